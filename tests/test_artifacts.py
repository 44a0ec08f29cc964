"""Artifacts: schemas, atomic writes, manifest checksums, validation, and environment records.

Everything runs on CPU from the synthetic fixture run in tests/fixtures/run-synthetic (made by
tests/fixtures/make_fixture.py with the public writers).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from warpgauge import artifacts as A
from warpgauge import environment as E

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_RUN = FIXTURES / "run-synthetic"
SOFTMAX_COLD = "cases/softmax__bfloat16__16384x4096__cold.json"


@pytest.fixture(autouse=True)
def _git_state_from_git(monkeypatch):
    """These tests read the git state of real checkouts; a GPU session exports the sender's."""
    monkeypatch.delenv("WARPGAUGE_GIT_COMMIT", raising=False)
    monkeypatch.delenv("WARPGAUGE_GIT_DIRTY", raising=False)


def test_git_state_from_environment_only_without_git(monkeypatch, tmp_path):
    monkeypatch.setenv("WARPGAUGE_GIT_COMMIT", "ab" * 20)
    monkeypatch.setenv("WARPGAUGE_GIT_DIRTY", "0")
    assert E.git_state(tmp_path) == ("ab" * 20, False)  # a copy without .git
    assert E.git_info(tmp_path)["source"] == "env"
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    here = E.git_info(Path(__file__).parent)  # this checkout has .git: git wins over the variables
    assert here["source"] == "git" and here["commit"] != "ab" * 20


def _load_make_fixture():
    spec = importlib.util.spec_from_file_location("make_fixture", FIXTURES / "make_fixture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def run_dir(tmp_path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, dst)
    return dst


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data, indent=2))


def _has(problems: list[str], *needles: str) -> bool:
    return any(all(n in p for n in needles) for p in problems)


# ------------------------------------------------------------------------------------ schemas and fixture


def test_schemas_are_valid_draft_2020_12():
    from jsonschema import Draft202012Validator

    for name in (*A.SCHEMA_NAMES, "common"):
        Draft202012Validator.check_schema(A.schema(name))


def test_fixture_is_valid_and_up_to_date(tmp_path):
    assert A.validate_run(FIXTURE_RUN) == []
    rebuilt = _load_make_fixture().build(tmp_path / "rebuilt")
    assert A.list_files(rebuilt) == A.list_files(FIXTURE_RUN)
    for rel in A.list_files(FIXTURE_RUN):
        assert (rebuilt / rel).read_bytes() == (FIXTURE_RUN / rel).read_bytes(), (
            f"{rel} differs: run tests/fixtures/make_fixture.py to regenerate the fixture"
        )


def test_fixture_covers_every_status_and_both_lanes():
    run = A.load_run(FIXTURE_RUN)
    statuses = {p["status"] for c in run.cases for p in c["providers"]}
    assert statuses == {"ok", "absent", "failed_gate", "error"}
    assert {c["lane"] for c in run.cases} == {"cold", "warm"}
    assert len({c["op"] for c in run.cases}) >= 2


def test_round_trip_write_then_load_is_equal(tmp_path):
    src = A.load_run(FIXTURE_RUN)
    dst = tmp_path / "copy"
    run = dict(
        src.run, status="running", finished_cases=[], missing_cases=src.run["expected_cases"]
    )
    A.write_run(dst, run)
    A.write_ceilings(dst, src.ceilings)
    A.write_run(dst, run)
    for case in src.cases:
        A.write_case(dst, case)
    A.write_run(dst, src.run)
    back = A.load_run(dst)
    assert back.run == src.run
    assert back.cases == src.cases
    assert back.ceilings == src.ceilings
    assert A.validate_run(dst) == []


def test_numpy_scalars_and_tuples_are_stored_as_plain_json(run_dir):
    np = pytest.importorskip("numpy")
    case = A.read_json(run_dir / SOFTMAX_COLD)
    case["work"]["bytes"] = np.int64(case["work"]["bytes"])
    case["order"] = tuple(case["order"])
    case["warmup"]["burst_ms"] = np.float32(200.0)
    A.write_case(run_dir, case)
    back = A.read_json(run_dir / SOFTMAX_COLD)
    assert type(back["work"]["bytes"]) is int and isinstance(back["order"], list)
    assert A.validate_run(run_dir) == []


# ------------------------------------------------------------------------------------ case ids


def test_case_filename():
    assert (
        A.case_filename("softmax/bfloat16/32768x8192/cold")
        == "softmax__bfloat16__32768x8192__cold.json"
    )
    assert (
        A.make_case_id("gemm", "float16", "1x4096x4096", "warm") == "gemm/float16/1x4096x4096/warm"
    )
    for bad in (
        "softmax/bfloat16/32768x8192",
        "softmax/bf16/a/b/cold",
        "../x/y/cold",
        "softmax/bfloat16/32768 x 8192/cold",
        "softmax/bfloat16/1x1/hot",
    ):
        with pytest.raises(ValueError, match="case id"):
            A.case_filename(bad)


# ------------------------------------------------------------------------------------ atomic writes


def _dir_entries(d: Path) -> list[str]:
    return sorted(os.listdir(d))


def test_atomic_write_json_success_leaves_no_temp(tmp_path):
    path = tmp_path / "x.json"
    A.atomic_write_json(path, {"a": [1, 2.5], "b": None})
    assert A.read_json(path) == {"a": [1, 2.5], "b": None}
    assert _dir_entries(tmp_path) == ["x.json"]


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_atomic_write_failure_keeps_old_file_and_no_temp(tmp_path, monkeypatch, failing):
    path = tmp_path / "x.json"
    A.atomic_write_json(path, {"version": "old"})
    before = path.read_bytes()

    def boom(*args, **kwargs):
        raise OSError("simulated failure mid-write")

    monkeypatch.setattr(os, failing, boom)
    with pytest.raises(OSError, match="simulated"):
        A.atomic_write_json(path, {"version": "new", "pad": "x" * 100_000})
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert _dir_entries(tmp_path) == ["x.json"]


def test_unserializable_object_touches_nothing(tmp_path):
    path = tmp_path / "x.json"
    with pytest.raises(ValueError, match=r"\$\.gate\.max_abs_err.*not finite"):
        A.atomic_write_json(path, {"gate": {"max_abs_err": float("nan")}})
    with pytest.raises(TypeError, match=r"\$\.when"):
        A.atomic_write_json(path, {"when": object()})
    assert _dir_entries(tmp_path) == []


# ------------------------------------------------------------------------------------ writers reject bad records


def test_write_case_rejects_schema_errors_with_paths_and_writes_nothing(run_dir):
    case = A.read_json(run_dir / SOFTMAX_COLD)
    case["providers"][1]["status"] = "okay"
    case["providers"][0]["device_time"]["samples_us"][0] = "fast"
    case["lane"] = "hot"
    manifest_before = (run_dir / "manifest.json").read_bytes()
    file_before = (run_dir / SOFTMAX_COLD).read_bytes()
    with pytest.raises(A.ArtifactError) as info:
        A.write_case(run_dir, case)
    problems = info.value.problems
    assert _has(problems, "$.providers[1].status", "okay")
    assert _has(problems, "$.providers[0].device_time.samples_us[0]", "number")
    assert _has(problems, "$.lane")
    assert (run_dir / "manifest.json").read_bytes() == manifest_before
    assert (run_dir / SOFTMAX_COLD).read_bytes() == file_before


def test_write_case_rejects_nan_and_inconsistent_numbers(run_dir):
    case = A.read_json(run_dir / SOFTMAX_COLD)
    case["providers"][0]["gate"]["max_abs_err"] = float("inf")
    with pytest.raises(A.ArtifactError, match=r"providers\[0\]\.gate\.max_abs_err"):
        A.write_case(run_dir, case)

    case = A.read_json(run_dir / SOFTMAX_COLD)
    case["providers"][0]["device_time"]["median_us"] *= 2  # no longer the samples' median
    case["providers"][0]["derived"]["tbps"] *= 1.5  # no longer bytes / median
    case["order"].append("nobody")
    with pytest.raises(A.ArtifactError) as info:
        A.write_case(run_dir, case)
    problems = info.value.problems
    assert _has(problems, "device_time.median_us", "middle samples")
    assert _has(problems, "derived.tbps", "definition")
    assert _has(problems, "$.order", "nobody")


def test_write_case_rejects_case_outside_expected_and_wrong_run(run_dir):
    case = A.read_json(run_dir / SOFTMAX_COLD)
    case.update(shape_label="7x7", case_id="softmax/bfloat16/7x7/cold")
    with pytest.raises(A.ArtifactError, match="expected_cases"):
        A.write_case(run_dir, case)
    case = A.read_json(run_dir / SOFTMAX_COLD)
    case["run_id"] = "another-run"
    with pytest.raises(A.ArtifactError, match="run.json says"):
        A.write_case(run_dir, case)


def test_status_rules_are_in_the_schema(run_dir):
    case = A.read_json(run_dir / SOFTMAX_COLD)
    absent = next(p for p in case["providers"] if p["status"] == "absent")
    absent["error"] = None  # an absent provider must say why
    ok = next(p for p in case["providers"] if p["status"] == "ok")
    ok["gate"]["ok"] = False  # timed but failed its gate: contradiction
    errs = A.schema_errors("case", case)
    assert any(".error" in e for e in errs)
    assert any(".gate.ok" in e for e in errs)


def test_fill_derived_follows_its_definitions(run_dir):
    case = A.read_json(run_dir / SOFTMAX_COLD)
    for p in case["providers"]:
        p["derived"] = {}
    A.fill_derived(case, copy_tbps=4.0)
    wg = next(p for p in case["providers"] if p["name"] == "warpgauge")
    med = wg["device_time"]["median_us"]
    assert wg["derived"]["tbps"] == pytest.approx(case["work"]["bytes"] / med / 1e6)
    assert wg["derived"]["pct_copy_ceiling"] == pytest.approx(100 * wg["derived"]["tbps"] / 4.0)
    best = min(
        p["device_time"]["median_us"]
        for p in case["providers"]
        if p["status"] == "ok" and p["family"] in ("pytorch", "compile")
    )
    assert wg["derived"]["speedup_vs_best_pytorch"] == pytest.approx(best / med)
    absent = next(p for p in case["providers"] if p["status"] == "absent")
    assert set(absent["derived"].values()) == {None}


def test_best_pytorch_skips_providers_the_runner_excluded(run_dir):
    case = A.read_json(run_dir / SOFTMAX_COLD)
    best = A.best_pytorch(case)
    assert best["name"] == "torch_compile"
    best.setdefault("extra", {})["excluded_from_best"] = "CUDA graph trees copy the inputs"
    assert A.excluded_from_best(best) == "CUDA graph trees copy the inputs"
    assert A.best_pytorch(case)["name"] == "torch"
    A.fill_derived(case, 3.9924549890264753)
    wg = next(p for p in case["providers"] if p["name"] == "warpgauge")
    torch_med = next(p for p in case["providers"] if p["name"] == "torch")["device_time"]
    assert wg["derived"]["speedup_vs_best_pytorch"] == pytest.approx(
        torch_med["median_us"] / wg["device_time"]["median_us"]
    )
    A.write_case(run_dir, case)  # the validator follows the same definition
    assert A.validate_run(run_dir) == []


# ------------------------------------------------------------------------------------ validation


def test_validate_cli_ok_and_failing(run_dir, capsys):
    assert A.validate_cli(run_dir) == 0
    assert "OK" in capsys.readouterr().out
    (run_dir / SOFTMAX_COLD).unlink()
    assert A.validate_cli(run_dir) == 1
    out = capsys.readouterr().out
    assert "INVALID" in out and "listed in the manifest but missing" in out


def _flip_positions(size: int, rng: random.Random, k: int) -> list[int]:
    return sorted({0, size - 1, size // 2, *(rng.randrange(size) for _ in range(k))})


def test_a_flipped_byte_in_any_file_fails_validation(tmp_path):
    """Flip one bit at sampled positions of every kind of file (data, manifest, report-free)."""
    rng = random.Random(7)
    names = A.list_files(FIXTURE_RUN)
    cases = [n for n in names if n.startswith("cases/")]
    targets = [n for n in names if not n.startswith("cases/")] + rng.sample(cases, 3)
    work = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, work)
    for rel in targets:
        original = (FIXTURE_RUN / rel).read_bytes()
        k = 10 if rel == "manifest.json" else 5
        for pos in _flip_positions(len(original), rng, k):
            for mask in (0x01, 0x20):
                data = bytearray(original)
                data[pos] ^= mask
                (work / rel).write_bytes(bytes(data))
                assert A.validate_run(work), (
                    f"flipping byte {pos} of {rel} with {mask:#x} went unnoticed"
                )
        (work / rel).write_bytes(original)
    assert A.validate_run(work) == []


def test_checksum_mismatch_names_the_file(run_dir):
    path = run_dir / "ceilings.json"
    path.write_bytes(path.read_bytes().replace(b'"copy_1GiB"', b'"copy_1GiC"'))
    problems = A.validate_run(run_dir)
    assert _has(problems, "ceilings.json", "checksum mismatch")


def test_schema_breaking_edit_with_recomputed_manifest_still_fails(run_dir):
    _edit_json(run_dir / SOFTMAX_COLD, lambda c: c["providers"][2].__setitem__("family", "friend"))
    _edit_json(
        run_dir / "run.json", lambda r: r["provenance"]["gpu"].__setitem__("sm_count", "132")
    )
    A.write_manifest(run_dir)
    problems = A.validate_run(run_dir)
    assert not _has(problems, "checksum")
    assert _has(problems, SOFTMAX_COLD, "$.providers[2].family", "friend")
    assert _has(problems, "run.json", "$.provenance.gpu.sm_count")


def test_inconsistent_numbers_with_recomputed_manifest_still_fail(run_dir):
    def edit(c):
        c["providers"][0]["device_time"]["samples_us"][0] *= 3  # stats no longer describe samples
        c["providers"][1]["derived"]["pct_copy_ceiling"] = 99.0

    _edit_json(run_dir / SOFTMAX_COLD, edit)
    A.write_manifest(run_dir)
    problems = A.validate_run(run_dir)
    assert _has(problems, SOFTMAX_COLD, "device_time")
    assert _has(problems, SOFTMAX_COLD, "pct_copy_ceiling")


def test_missing_case_fails_coverage_and_status(run_dir):
    (run_dir / SOFTMAX_COLD).unlink()
    A.write_manifest(run_dir)
    problems = A.validate_run(run_dir)
    assert _has(problems, "coverage", "softmax/bfloat16/16384x4096/cold")
    assert _has(problems, "finished_cases without a case file")
    run = A.finish_run(run_dir, "complete")
    assert run["status"] == "interrupted"
    assert run["missing_cases"] == ["softmax/bfloat16/16384x4096/cold"]
    problems = A.validate_run(run_dir)
    assert _has(problems, "status is 'interrupted'")
    assert _has(problems, "coverage")


def test_extra_unlisted_file_fails(run_dir):
    (run_dir / "notes.txt").write_text("hello")
    assert _has(A.validate_run(run_dir), "notes.txt", "not listed in the manifest")


def test_case_outside_expected_fails_coverage(run_dir):
    case = A.read_json(run_dir / SOFTMAX_COLD)
    case.update(shape_label="7x7", case_id="softmax/bfloat16/7x7/cold")
    A.atomic_write_json(run_dir / "cases" / A.case_filename(case["case_id"]), case)
    A.write_manifest(run_dir)
    assert _has(A.validate_run(run_dir), "coverage", "7x7", "config does not ask for")


def test_misnamed_case_file_and_leftover_temp_fail(run_dir):
    os.rename(run_dir / SOFTMAX_COLD, run_dir / "cases" / "renamed.json")
    (run_dir / "cases" / ".x.json.abc.tmp").write_text("{")
    A.write_manifest(run_dir)
    problems = A.validate_run(run_dir)
    assert _has(problems, "cases/renamed.json", "whose file is")
    assert _has(problems, ".x.json.abc.tmp", "leftover temp file")


def test_write_case_updates_only_its_manifest_entry(run_dir):
    """A corrupted file stays caught after later writes: write_case never re-blesses others."""
    other = run_dir / "cases" / "gemm__bfloat16__2048x2048x2048__cold.json"
    other.write_bytes(other.read_bytes().replace(b'"fixture-synthetic"', b'"fixture-synthetiq"', 1))
    A.write_case(run_dir, A.read_json(run_dir / SOFTMAX_COLD))
    assert _has(A.validate_run(run_dir), other.name, "checksum mismatch")


def test_running_status_is_reported(run_dir):
    _edit_json(run_dir / "run.json", lambda r: r.__setitem__("status", "running"))
    A.write_manifest(run_dir)
    assert _has(A.validate_run(run_dir), "status is 'running'")


# ------------------------------------------------------------------------------------ environment


def _fresh_nvml(monkeypatch, module):
    monkeypatch.setattr(E, "_nvml_state", {})
    monkeypatch.setitem(sys.modules, "pynvml", module)


def test_telemetry_snapshot_never_raises_without_nvml(monkeypatch):
    _fresh_nvml(monkeypatch, None)  # import pynvml -> ImportError
    snap = E.telemetry_snapshot(0)
    assert all(snap[f] is None for f in E.TELEMETRY_FIELDS)
    assert snap["error"] and "NVML unavailable" in snap["error"]
    assert A.schema_errors("common#/$defs/telemetry_snapshot", snap) == []


def test_telemetry_snapshot_tolerates_a_broken_nvml(monkeypatch):
    broken = types.SimpleNamespace(
        nvmlInit=lambda: (_ for _ in ()).throw(RuntimeError("driver gone"))
    )
    _fresh_nvml(monkeypatch, broken)
    snap = E.telemetry_snapshot(3)
    assert snap["sm_clock_mhz"] is None and "driver gone" in snap["error"]


def _fake_nvml(**overrides):
    def fail(*a):
        raise RuntimeError("not supported")

    nv = types.SimpleNamespace(
        NVML_CLOCK_SM=1,
        NVML_CLOCK_MEM=2,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetClockInfo=lambda h, which: {1: 1980, 2: 3201}[which],
        nvmlDeviceGetTemperature=lambda h, s: 45,
        nvmlDeviceGetPowerUsage=lambda h: 412_345,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=97, memory=60),
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x4 | 0x1,
        nvmlDeviceGetPerformanceState=lambda h: 0,
    )
    for k, v in overrides.items():
        setattr(nv, k, fail if v is None else v)
    return nv


def test_telemetry_snapshot_reads_and_decodes(monkeypatch):
    _fresh_nvml(monkeypatch, _fake_nvml())
    snap = E.telemetry_snapshot(0)
    assert snap["sm_clock_mhz"] == 1980 and snap["mem_clock_mhz"] == 3201
    assert snap["power_w"] == pytest.approx(412.345)
    assert snap["throttle_reasons"] == ["gpu_idle", "sw_power_cap"]
    assert snap["error"] is None
    assert A.schema_errors("common#/$defs/telemetry_snapshot", snap) == []


def test_telemetry_snapshot_nulls_only_unreadable_fields(monkeypatch):
    _fresh_nvml(
        monkeypatch, _fake_nvml(nvmlDeviceGetPowerUsage=None, nvmlDeviceGetPerformanceState=None)
    )
    snap = E.telemetry_snapshot(0)
    assert snap["power_w"] is None and snap["pstate"] is None and snap["sm_clock_mhz"] == 1980
    assert "power_w" in snap["error"] and "pstate" in snap["error"]


def test_decode_reasons_names_unknown_bits():
    assert E.decode_reasons(0) == []
    assert E.decode_reasons(0x40 | 0x8) == ["hw_slowdown", "hw_thermal_slowdown"]
    assert E.decode_reasons(0x1000) == ["other_0x1000"]


def test_provenance_is_schema_valid_on_cpu(monkeypatch):
    _fresh_nvml(monkeypatch, None)
    prov = E.provenance()
    assert A.schema_errors("common#/$defs/provenance", prov) == []
    assert prov["packages"]["torch"] is not None
    assert prov["hostname"] and prov["platform"]


def test_git_state_commit_and_dirty(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    assert E.git_state(tmp_path) == (None, None)  # not a repository
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "f.txt").write_text("a")
    subprocess.run([*git, "add", "f.txt"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], cwd=tmp_path, check=True)
    commit, dirty = E.git_state(tmp_path)
    assert len(commit) == 40 and dirty is False
    (tmp_path / "results" / "run-1").mkdir(parents=True)
    (tmp_path / "results" / "run-1" / "run.json").write_text("{}")  # a run being written
    assert E.git_state(tmp_path)[1] is False
    (tmp_path / "new_kernel.py").write_text("x = 1")  # an uncommitted source file
    info = E.git_info(tmp_path)
    assert info["dirty"] is True and info["dirty_files"] == ["new_kernel.py"]
    (tmp_path / "new_kernel.py").unlink()
    (tmp_path / "f.txt").write_text("b")
    assert E.git_state(tmp_path)[1] is True
    sub = tmp_path / "sub"
    sub.mkdir()
    assert E.git_state(sub)[1] is True  # asked from a subdirectory: the whole checkout counts


def test_a_stale_git_keeps_the_claimed_commit_beside_its_own(tmp_path, monkeypatch):
    """The lent GPU machine's copy carried the .git of an earlier sync, so git said "HEAD plus
    changes" for code that was another commit (results/h200-session4/README.md). The commit the
    caller names is kept beside git's, marked as a claim; a clean checkout records no claim."""
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "f.txt").write_text("a")
    subprocess.run([*git, "add", "f.txt"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], cwd=tmp_path, check=True)
    monkeypatch.setenv("WARPGAUGE_GIT_COMMIT", "81d95f59a942")
    assert "claimed_commit" not in E.git_info(tmp_path)  # clean: git's answer is the whole truth
    (tmp_path / "f.txt").write_text("newer code")
    info = E.git_info(tmp_path)
    assert info["source"] == "git" and info["dirty"] is True
    assert info["claimed_commit"] == "81d95f59a942" and info["commit"] != "81d95f59a942"


def test_a_copy_inside_another_repository_does_not_take_its_commit(tmp_path):
    """A lent machine may unpack the tree inside some other checkout: that checkout's commit is
    not the code's. Only a repository that tracks the package's own file counts."""
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "other.txt").write_text("a")
    subprocess.run([*git, "add", "other.txt"], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], cwd=tmp_path, check=True)
    pkg = tmp_path / "scratch" / "copy" / "src" / "warpgauge"
    pkg.mkdir(parents=True)
    own = pkg / "__init__.py"
    own.write_text("")
    assert E._git_root(pkg, own) is None  # untracked there: not our repository
    subprocess.run([*git, "add", str(own)], cwd=tmp_path, check=True)
    assert E._git_root(pkg, own) == tmp_path.resolve()


def test_warpgauge_version_comes_from_pyproject():
    import tomllib

    from warpgauge import _version

    want = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert _version.version() == want["version"]
    assert E.package_versions()["warpgauge"] == want["version"]


def test_host_gpus_records_other_work(monkeypatch):
    me = os.getpid()
    procs = {
        "h0": [types.SimpleNamespace(pid=me, usedGpuMemory=2 << 30)],
        "h1": [types.SimpleNamespace(pid=4242, usedGpuMemory=30 << 30)],
    }
    nv = _fake_nvml(
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetName=lambda h: "NVIDIA H200",
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=5 << 30, total=141 << 30),
        nvmlDeviceGetComputeRunningProcesses=lambda h: procs[h],
        nvmlDeviceGetGraphicsRunningProcesses=lambda h: [],
        nvmlSystemGetProcessName=lambda pid: "python3" if pid == 4242 else "me",
    )
    _fresh_nvml(monkeypatch, nv)
    snap = E.host_gpus()
    assert snap["error"] is None and len(snap["devices"]) == 2
    assert snap["devices"][1]["processes"][0] == {
        "pid": 4242, "kind": "compute", "name": "python3", "used_memory_bytes": 30 << 30
    }  # fmt: skip
    assert A.schema_errors("common#/$defs/host_gpus_snapshot", snap) == []
    lines = E.other_gpu_work(snap, own_uuid="GPU-h0")
    assert any("pid 4242" in line and "GPU 1" in line for line in lines)
    assert any("GPU 1" in line and "97% busy" in line for line in lines)
    assert not any(f"pid {me}" in line for line in lines)


def test_host_gpus_never_raises_without_nvml(monkeypatch):
    _fresh_nvml(monkeypatch, None)
    snap = E.host_gpus()
    assert snap["devices"] == [] and "NVML unavailable" in snap["error"]
    assert A.schema_errors("common#/$defs/host_gpus_snapshot", snap) == []


def test_finish_run_records_host_gpus_after(run_dir):
    after = {"t": 1.0, "this_pid": 1, "devices": [], "error": "NVML unavailable"}
    run = A.finish_run(run_dir, "complete", host_gpus_after=after)
    assert run["provenance"]["host_gpus"] == {"before": None, "after": after}
    assert A.validate_run(run_dir) == []


# ------------------------------------------------------------------------------------ coverage from the config


def _drop_op_everywhere_but_the_config(run_dir: Path, op: str) -> None:
    """What a careless (or dishonest) edit would do: delete every case file of ``op``, take
    its ids out of run.json's lists, and bless the result with a fresh manifest."""
    for path in (run_dir / "cases").glob(f"{op}__*.json"):
        path.unlink()

    def edit(r):
        for key in ("expected_cases", "finished_cases", "missing_cases"):
            r[key] = [c for c in r[key] if not c.startswith(op + "/")]

    _edit_json(run_dir / "run.json", edit)
    A.write_manifest(run_dir)


def test_dropping_an_operator_and_its_expected_cases_still_fails(run_dir):
    _drop_op_everywhere_but_the_config(run_dir, "gemm")
    run = A.read_json(run_dir / "run.json")
    assert A.run_problems(run) == []  # run.json's own bookkeeping is consistent ...
    problems = A.validate_run(run_dir)  # ... but the config still asks for gemm
    assert _has(problems, "run.json", "expected_cases lacks 4 case(s)", "gemm/bfloat16/")
    assert _has(problems, "coverage: 4 of 10 expected case(s) have no case file", "gemm/")


def test_dropping_the_operator_from_config_ops_too_is_inconsistent(run_dir):
    _drop_op_everywhere_but_the_config(run_dir, "gemm")
    _edit_json(run_dir / "run.json", lambda r: r["config"].__setitem__("ops", ["softmax"]))
    A.write_manifest(run_dir)
    assert _has(A.validate_run(run_dir), "config.ops", "gemm")


def test_a_config_without_groups_cannot_vouch_for_its_cases(run_dir):
    _edit_json(run_dir / "run.json", lambda r: r["config"].pop("groups"))
    A.write_manifest(run_dir)
    assert _has(A.validate_run(run_dir), "run.json", "config.groups: missing")


def _packaged_config(**select) -> dict:
    from warpgauge.bench.suite import load_suite

    return load_suite("default", quick=True, **select).to_config()


def test_packaged_suite_check_recomputes_groups_from_the_suite_file():
    cfg = _packaged_config()
    assert cfg["source"] == "package:warpgauge/suites/default.toml"
    assert len(cfg["source_sha256"]) == 64
    assert A.packaged_suite_check(cfg) == ([], [])
    assert A.expected_cases(cfg) == [
        f"{g['op']}/{g['dtype']}/{g['shape_label']}/{lane}"
        for g in cfg["groups"]
        for lane in cfg["lanes"]
    ]
    # a thorough forgery: drop one operator from groups *and* ops; the suite file still has it
    dropped = cfg["groups"][0]["op"]
    forged = dict(cfg, groups=[g for g in cfg["groups"] if g["op"] != dropped])
    forged["ops"] = [o for o in cfg["ops"] if o != dropped]
    assert A.config_problems(forged) == []
    problems, notes = A.packaged_suite_check(forged)
    assert notes == [] and _has(problems, "lacks", f"{dropped}/")
    # a shape edited in place
    edited = json.loads(json.dumps(cfg))
    edited["groups"][0]["shape"] = {k: v + 1 for k, v in edited["groups"][0]["shape"].items()}
    assert _has(A.packaged_suite_check(edited)[0], "does not define with that shape")


def test_packaged_suite_check_honours_the_recorded_selection():
    cfg = _packaged_config(ops=["softmax"], lanes=["cold"])
    assert cfg["selection"]["ops"] == ["softmax"] and cfg["lanes"] == ["cold"]
    assert A.packaged_suite_check(cfg) == ([], [])
    narrowed = dict(cfg, groups=cfg["groups"][:1], selection={**cfg["selection"], "shapes": ["x"]})
    assert A.packaged_suite_check(narrowed)[0] == []  # an unknown filter: subset check only


def test_packaged_suite_check_notes_why_it_could_not_run():
    cfg = _packaged_config()
    _, notes = A.packaged_suite_check(dict(cfg, source_sha256="0" * 64))
    assert _has(notes, "changed since the run")
    _, notes = A.packaged_suite_check({k: v for k, v in cfg.items() if k != "source_sha256"})
    assert _has(notes, "records no source_sha256")
    _, notes = A.packaged_suite_check(dict(cfg, source="/tmp/my-suite.toml"))
    assert _has(notes, "not a packaged suite")


# ------------------------------------------------------------------------------------ corrupted files


@pytest.mark.parametrize(
    "rel",
    ["run.json", "manifest.json", "ceilings.json", SOFTMAX_COLD],
    ids=lambda r: r.split("/")[-1],
)
def test_truncated_artifact_is_named(run_dir, rel):
    path = run_dir / rel
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    problems = A.validate_run(run_dir)
    assert _has(problems, rel, "corrupted or truncated")
    with pytest.raises(ValueError, match=f"{rel.split('/')[-1]}: corrupted or truncated"):
        A.load_run(run_dir)  # the report, compare and export read through load_run


def test_truncated_case_with_a_reblessed_manifest_is_named(run_dir):
    path = run_dir / SOFTMAX_COLD
    path.write_bytes(b"")
    A.write_manifest(run_dir)
    assert _has(A.validate_run(run_dir), SOFTMAX_COLD, "corrupted or truncated")


def test_truncation_is_called_out_by_the_checksum(run_dir):
    path = run_dir / SOFTMAX_COLD
    data = path.read_bytes()
    path.write_bytes(data[:-2] + b"\n")  # the closing brace gone, same look otherwise
    assert _has(A.validate_run(run_dir), SOFTMAX_COLD, "truncated or grown")


def test_a_case_file_holding_a_list_is_named(run_dir):
    (run_dir / SOFTMAX_COLD).write_text("[1, 2]\n")
    A.write_manifest(run_dir)
    assert _has(A.validate_run(run_dir), SOFTMAX_COLD, "not an object")


def test_validate_without_jsonschema_says_schemas_were_not_checked(run_dir, monkeypatch):
    import warpgauge.artifacts.validate as V

    monkeypatch.setattr(V, "have_jsonschema", lambda: False)
    monkeypatch.setattr(V, "schema_errors", lambda name, obj: [])
    problems = A.validate_run(run_dir)
    assert problems == [A.SCHEMA_SKIPPED]
    # the cross-field rules still run, and a wrecked record is one problem, not a crash
    _edit_json(run_dir / SOFTMAX_COLD, lambda c: c.pop("providers"))
    A.write_manifest(run_dir)
    assert _has(V.validate_run(run_dir), SOFTMAX_COLD, "not the structure")


def test_validate_json(run_dir, capsys):
    assert A.validate_cli(run_dir, as_json=True) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is True and out["problems"] == [] and out["case_files"] == 10
    (run_dir / SOFTMAX_COLD).unlink()
    assert A.validate_cli(run_dir, as_json=True) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is False and _has(out["problems"], SOFTMAX_COLD)


REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "run", sorted(p.parent.name for p in (REPO / "results").glob("*/run.json")) or ["none"]
)
def test_committed_runs_still_validate(run):
    if run == "none":
        pytest.skip("no committed run")
    assert A.validate_run(REPO / "results" / run) == []
