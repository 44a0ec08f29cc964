"""warpgauge profile on the CPU: metric discovery and raw-page parsing on recorded ncu output, the
byte-model check, the artifact and its manifest, and the whole CLI against a stand-in ncu."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from warpgauge.profile import artifact as art
from warpgauge.profile import ncu
from warpgauge.profile.targets import all_targets, model_matches_work, select

FIX = Path(__file__).parent / "fixtures" / "ncu"
FAKE = FIX / "fake_ncu.py"


def test_version_and_metric_names_are_parsed():
    assert ncu.parse_version((FIX / "version.txt").read_text()).startswith("2025.1.0.0")
    names = ncu.parse_metric_names((FIX / "query-metrics-excerpt.txt").read_text())
    assert "dram__bytes_read" in names and "gpu__dram_throughput" in names
    assert "Metric" not in names and "Device" not in names  # banner and header skipped


def test_discovery_keeps_only_listed_candidates_and_finds_stalls():
    names = ncu.parse_metric_names((FIX / "query-metrics-excerpt.txt").read_text())
    d = ncu.discover(names)
    assert d.fields["dram_throughput_pct"] == (
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    )  # the older dram__throughput spelling is not listed, so it is not requested
    assert "l2_throughput_pct" not in d.missing_fields
    assert "theoretical_occupancy_pct" in d.missing_fields  # not in the excerpt
    assert d.stall_metrics == (
        "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
    )  # "selected" is the issuing warp, not a stall
    assert "launch__registers_per_thread" in d.metrics_arg()


def test_command_never_touches_clocks():
    cmd = ncu.command("ncu", "r.ncu-rep", ["python3", "x.py"], ["dram__bytes_read.sum"])
    joined = " ".join(cmd)
    assert "--clock-control none" in joined and "--cache-control all" in joined
    assert "--replay-mode kernel" in joined and "--profile-from-start off" in joined
    assert cmd[cmd.index("--") + 1 :] == ["python3", "x.py"]


def _csv(rows: list[list], cols: list[str]) -> str:
    head = ",".join(f'"{c}"' for c in cols)
    units = ",".join('""' for _ in cols)
    body = "\n".join(",".join(f'"{v}"' for v in r) for r in rows)
    return f"==PROF== note\n{head}\n{units}\n{body}\n"


COLS = ["ID", "Kernel Name", "Grid Size", "dram__bytes_read.sum", "dram__bytes_write.sum",
        "launch__registers_per_thread",
        "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
        "smsp__average_warps_issue_stalled_selected_per_issue_active.ratio"]  # fmt: skip


def test_raw_csv_numbers_with_separators_and_marker_grouping():
    rows = ncu.parse_raw_csv(_csv([
        [0, "_wg_profile_marker", "(1, 1, 1)", "0", "0", 16, 0, 0, 1],
        [1, "_softmax_resident", "(1024, 1, 1)", "8,390,656", "8,388,608", 32, 3.0, 1.0, 1],
        [2, "_wg_profile_marker", "(2, 1, 1)", "0", "0", 16, 0, 0, 1],
        [3, "stats", "(4, 8, 1)", "1,048,576", "256", 40, 1.0, 1.0, 1],
        [4, "write", "(4, 8, 1)", "1,048,576", "1,048,576", 40, 1.0, 3.0, 1],
    ], COLS))  # fmt: skip
    assert rows[1].number("dram__bytes_read.sum") == 8390656
    groups = art.group_rows(rows, "_wg_profile_marker")
    assert [r.name for r in groups[0]] == ["_softmax_resident"]
    assert [r.name for r in groups[1]] == ["stats", "write"]
    top = ncu.stalls(rows[1])
    assert top[0]["reason"] == "long_scoreboard" and top[0]["share_pct"] == pytest.approx(75.0)
    assert all(s["reason"] != "selected" for s in top)


def test_no_header_is_an_error_and_empty_output_is_no_rows():
    with pytest.raises(ncu.NcuError, match="header"):
        ncu.parse_raw_csv("==PROF== something went wrong\n")
    assert ncu.parse_raw_csv("") == []


def test_target_models_match_the_kernels_work_models():
    fwd = [t for t in all_targets() if not t.op.endswith(("_bwd", "_grad", "_grad_a", "_grad_b"))]
    assert len(fwd) > 20
    for t in fwd:
        assert model_matches_work(t), t.name


def test_every_kernel_family_has_two_shapes():
    fams: dict[str, int] = {}
    for t in all_targets():
        fams[t.kernel_family] = fams.get(t.kernel_family, 0) + 1
    for fam in ("softmax/resident", "softmax/looped", "softmax/split", "add_rms_norm/split",
                "row_sum/looped", "gemm", "int4_linear/gemv", "int4_linear/splitk",
                "softmax_bwd/split", "add_rms_norm_bwd/looped", "gemm_grad_a", "gemm_grad_b",
                "int4_linear_grad", "gemm/cublas", "int4_linear/tinygemm"):  # fmt: skip
        assert fams.get(fam, 0) >= 2, fam


def test_select_rejects_unknown_patterns():
    with pytest.raises(ValueError, match="--targets nosuch"):
        select(all_targets(), ["nosuch"])


def _entry(read_scale: float, write_scale: float = 1.0, l2=64 << 20):
    t = select(all_targets(), ["softmax.resident.8192x4096"])[0]
    k = {"metrics": {"dram_bytes_read": t.model.read * read_scale,
                     "dram_bytes_write": t.model.write * write_scale}}  # fmt: skip
    return art.target_entry(t, {"built": True}, [k], l2)


def test_byte_model_gap_flags_above_threshold():
    ok = _entry(1.01)
    assert ok["gap_pct"]["read"] == pytest.approx(1.0)
    assert not ok["flag"]["over_threshold"]
    bad = _entry(1.05)
    assert bad["flag"]["over_threshold"] and "read +5.00%" in bad["flag"]["reasons"][0]


def test_low_write_count_of_an_l2_sized_output_is_noted_not_flagged():
    e = _entry(1.0, write_scale=0.5, l2=1 << 30)  # 64 MiB output fits a 1 GiB "L2"
    assert not e["flag"]["over_threshold"] and "write-back" in e["flag"]["note"]
    e = _entry(1.0, write_scale=0.5, l2=1 << 20)  # does not fit: a real gap
    assert e["flag"]["over_threshold"]


@pytest.fixture()
def fake_env(monkeypatch, tmp_path):
    """An executable ``ncu`` that runs the stand-in with this interpreter."""
    exe = tmp_path / "bin" / "ncu"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    exe.chmod(0o755)
    return str(exe)


CLI_TARGETS = ["softmax.resident.1024x4096", "softmax.split.4x131072", "softmax.looped.256x65536"]


def _run_cli(tmp_path, fake, scale="1.0", mode="nvtx"):
    from warpgauge.profile.cli import profile_cli

    models = tmp_path / "models.json"
    models.write_text(json.dumps({t.name: [t.model.read, t.model.write] for t in all_targets()}))
    os.environ["FAKE_NCU_READ_SCALE"] = scale
    os.environ["FAKE_NCU_MODELS"] = str(models)
    os.environ["FAKE_NCU_MODE"] = mode
    try:
        rc = profile_cli(tmp_path, CLI_TARGETS, ncu_path=fake, profile_id="p1", peers=False)
    finally:
        os.environ.pop("FAKE_NCU_READ_SCALE", None)
        os.environ.pop("FAKE_NCU_MODELS", None)
        os.environ.pop("FAKE_NCU_MODE", None)
    return rc, tmp_path / "p1"  # (the fake's bin/ is beside it, outside the profile)


@pytest.mark.parametrize("mode", ["nvtx", "marker"])
def test_profile_cli_end_to_end_with_a_stand_in_ncu(tmp_path, fake_env, mode):
    rc, root = _run_cli(tmp_path, fake_env, mode=mode)
    assert rc == 0
    rec = json.loads((root / "profile.json").read_text())
    assert rec["policy"] == {"replay_mode": "kernel", "cache_control": "all",
                             "clock_control": "none"}  # fmt: skip
    assert [t["status"] for t in rec["targets"]] == ["ok", "ok", "ok"]
    for t in rec["targets"]:
        assert t["gap_pct"]["read"] == pytest.approx(0.0, abs=1e-6)
        assert len(t["kernels"]) == 1  # a marker is not counted as the target's kernel
        assert t["kernels"][0]["name"] == "kernel_softmax"
    from warpgauge.profile.cli import main

    assert art.validate_profile(root) == [] and main(["--validate", str(root)]) == 0
    # a changed byte fails the manifest
    p = root / "profile.json"
    p.write_text(p.read_text().replace('"p1"', '"p2"', 1))
    assert any("checksum" in x for x in art.validate_profile(root))
    assert main(["--validate", str(root)]) == 1
    (root / "stray.txt").write_text("x")
    assert any("stray.txt: not listed" in x for x in art.validate_profile(root))


def test_profile_cli_flags_a_wrong_byte_model(tmp_path, fake_env):
    rc, root = _run_cli(tmp_path, fake_env, scale="1.2")
    assert rc == 0
    rec = json.loads((root / "profile.json").read_text())
    assert all(t["flag"]["over_threshold"] for t in rec["targets"])
    rec["targets"][0]["flag"]["over_threshold"] = False  # a record that hides its gap
    assert any("flag.over_threshold" in x for x in art.record_problems(rec))


def test_a_hung_group_is_killed_and_the_rest_is_still_written(tmp_path, fake_env, monkeypatch):
    import time

    from warpgauge.profile.cli import profile_cli

    monkeypatch.setenv("FAKE_NCU_MODE", "hang")
    t0 = time.perf_counter()
    rc = profile_cli(tmp_path, ["softmax.resident.1024x4096"], ncu_path=fake_env,
                     profile_id="h", peers=False, group_timeout_s=1.5)  # fmt: skip
    assert rc == 1 and time.perf_counter() - t0 < 30
    rec = json.loads((tmp_path / "h" / "profile.json").read_text())
    assert rec["targets"][0]["status"] == "not built"
    assert "timed out" in rec["errors"][0]
    assert art.validate_profile(tmp_path / "h") == []


def test_missing_ncu_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NCU", raising=False)
    with pytest.raises(ncu.NcuError, match="--ncu"):
        ncu.find_ncu(str(tmp_path / "nope"))


# ----------------------------------------------------------------- recorded on the H200 (round 1)

H200 = FIX / "h200"


def _h200_names() -> set[str]:
    import gzip

    return ncu.parse_metric_names(
        gzip.decompress((H200 / "query-metrics.txt.gz").read_bytes()).decode()
    )


def test_h200_discovery_fills_every_field_but_one():
    d = ncu.discover(_h200_names())
    assert d.missing_fields == ("theoretical_occupancy_pct",)  # a section metric, not listed
    # the plain counter, not the multi-pass "Throughput" breakdown
    assert d.fields["dram_throughput_pct"] == ("dram__bytes.sum.pct_of_peak_sustained_elapsed",)
    assert d.fields["l2_throughput_pct"] == ("lts__t_bytes.sum.pct_of_peak_sustained_elapsed",)
    assert len(d.stall_metrics) == 18 and all(m.endswith(".ratio") for m in d.stall_metrics)
    assert "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio" in d.stall_metrics
    assert ncu.parse_version((H200 / "version.txt").read_text()).startswith("2025.3.1.0")


def _h200_record(csv_name: str):
    plan = json.loads((H200 / f"{csv_name}.plan.json").read_text())
    rows = ncu.parse_raw_csv((H200 / f"{csv_name}.csv").read_text())
    targets = select(all_targets(), [t["name"] for t in plan["targets"]])
    meta = {"ncu": {}, "gpu": {"l2_bytes": 62914560}, "_rows_per_plan": [rows]}
    return art.build_record("h200", targets, [plan], [], None, meta)


def test_h200_softmax_profile_attributes_kernels_by_marker_and_checks_bytes():
    rec = _h200_record("sections-r1")
    res, split = rec["targets"]
    assert [k["name"] for k in res["kernels"]] == ["_softmax_resident"]
    assert [k["name"] for k in split["kernels"]] == ["_softmax_split_stats", "_softmax_split_write"]
    m = res["kernels"][0]["metrics"]
    assert (m["dram_bytes_read"], m["registers_per_thread"], m["block_size"]) == (8396544, 32, 256)
    assert res["gap_pct"]["read"] == pytest.approx(100 * (8396544 - 8388608) / 8388608)
    assert m["sm_clock_hz"] == pytest.approx(2103809360.97) and m["local_load_bytes"] == 0
    assert res["kernels"][0]["stalls"][0]["reason"] == "long_scoreboard"
    # the split plan's two kernels each read x once: +101% over the compulsory model, flagged
    assert split["gap_pct"]["read"] == pytest.approx(101.49, abs=0.01)
    assert split["flag"]["over_threshold"] and "several kernels" in split["flag"]["note"]


def test_h200_nvtx_ranges_attribute_kernels_without_a_marker():
    rows = ncu.parse_raw_csv(
        (H200 / "nvtx-rowsum.csv").read_text()
    )  # stdout form, app lines mixed in
    assert [r.name for r in rows] == ["_wg_profile_marker", "_row_sum_resident"]
    assert art.nvtx_range(rows[1], "wg:") == "row_sum.resident.1024x4096"
    groups = art.group_rows(rows, "_wg_profile_marker", ["row_sum.resident.1024x4096"])
    assert [r.name for r in groups[0]] == ["_row_sum_resident"]
    rec = _h200_record("nvtx-rowsum")
    t = rec["targets"][0]
    assert t["measured_bytes"]["read"] == 8392704 and abs(t["gap_pct"]["read"]) < 0.1
    # the 2 KiB output stayed in L2 (write-back): noted, not flagged
    assert not t["flag"]["over_threshold"] and "write-back" in t["flag"]["note"]


def test_markdown_table_has_a_row_per_target():
    from warpgauge.profile.table import markdown

    rec = _h200_record("sections-r1")
    md = markdown(rec)
    lines = md.strip().splitlines()
    assert len(lines) == 2 + len(rec["targets"])
    assert "| softmax.resident.1024x4096 | resident/1 | 1 | 8.40 (8.39) | +0.09% |" in md
    assert lines[-1].rstrip().endswith("| GAP |")  # the split plan reads x twice


def test_a_stopped_profile_leaves_no_ncu_behind(tmp_path, fake_env):
    """SIGTERM to `warpgauge profile` (what `timeout` sends) also kills the ncu process group it
    started in its own session: nothing keeps running on the GPU."""
    import signal
    import subprocess
    import time

    env = dict(os.environ, FAKE_NCU_MODE="hang", PYTHONPATH=str(Path(__file__).parents[1] / "src"))
    p = subprocess.Popen([sys.executable, "-m", "warpgauge", "profile", "--ncu", fake_env,
                          "--no-peers", "--targets", "softmax.resident.1024x4096",
                          "--out", str(tmp_path), "--profile-id", "s"], env=env)  # fmt: skip
    deadline = time.time() + 60
    while time.time() < deadline and not list((tmp_path / "s" / "ncu").glob("*")):
        time.sleep(0.2)
    time.sleep(1.0)  # the hanging fake ncu is running now
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=20) != 0
    time.sleep(0.5)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(FAKE) not in ps


# Every target builder, at test sizes, run by the Triton interpreter: the closures the profiled
# process calls must run and compute the right thing (the GPU rounds reached only a few of them).
@pytest.mark.parametrize(
    "make",
    ["softmax", "softmax_bwd", "rms", "rms_bwd", "row_sum", "add", "gemm", "gemm_a", "gemm_b",
     "int4", "int4_grad", "softmax_torch", "rms_torch", "row_sum_torch", "add_torch",
     "gemm_cublas"],
)  # fmt: skip
def test_target_builders_run_under_the_interpreter(make):
    import torch

    from warpgauge.profile import targets as T

    dev = torch.device("cpu")
    dt = "float16"
    made = {
        "softmax": lambda: T._softmax(3, 40, dt, None),
        "softmax_bwd": lambda: T._softmax(3, 40, dt, None, bwd=True),
        "rms": lambda: T._rms(3, 40, dt, None),
        "rms_bwd": lambda: T._rms(3, 40, dt, None, bwd=True),
        "row_sum": lambda: T._row_sum(2, 33000, dt, None),  # wider than RESIDENT_MAX: split plan
        "add": lambda: T._add(100, dt),
        "gemm": lambda: T._gemm(20, 24, 16, dt),
        "gemm_a": lambda: T._gemm(20, 24, 16, dt, grad="a"),
        "gemm_b": lambda: T._gemm(20, 24, 16, dt, grad="b"),
        "int4": lambda: T._int4(1, 32, 256, dt),
        "int4_grad": lambda: T._int4(16, 32, 256, dt, grad=True),
        "softmax_torch": lambda: T._softmax(3, 40, dt, None, peer="torch"),
        "rms_torch": lambda: T._rms(3, 40, dt, None, peer="torch"),
        "row_sum_torch": lambda: T._row_sum(3, 40, dt, None, peer="torch"),
        "add_torch": lambda: T._add(100, dt, peer="torch"),
        "gemm_cublas": lambda: T._gemm(20, 24, 16, dt, peer="cublas"),
    }[make]
    model, build = made()
    fn = build(dev)
    out = fn()
    outs = out if isinstance(out, tuple) else (out,)
    written = sum(o.numel() * o.element_size() for o in outs if o is not None)
    assert written == model.write  # the outputs are exactly what the model says is written
    for o in outs:
        if o is not None:
            assert torch.isfinite(o.float()).all()  # NaN-poisoned outputs were all written
    if make == "softmax":
        assert torch.allclose(out.float().sum(-1), torch.ones(3), atol=1e-2)
    if make == "row_sum":
        assert fn.plan["kind"] == "split"
