"""CPU checks of the CUDA softmax program: it compiles (when nvcc is present) with no spills, and
the Python runner's bookkeeping (middle run, spread, ratios, sanitizer verdicts, output files)
is right. Nothing here needs a GPU; tests/gpu/test_cuda_softmax_gpu.py runs the program."""

from __future__ import annotations

import hashlib
import json
import shutil
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from warpgauge import cuda_softmax as cs

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(
    NVCC is None, reason="nvcc not on PATH: the CUDA build check needs the CUDA toolkit"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """make -C cuda into a private build directory (so parallel runs never share one)."""
    if NVCC is None:
        pytest.skip("nvcc not on PATH: the CUDA build check needs the CUDA toolkit")
    return cs.build(build_dir=tmp_path_factory.mktemp("cuda-build"))


@needs_nvcc
def test_build_succeeds_and_reports_no_spills(built):
    assert built.is_file() and built.stat().st_mode & stat.S_IXUSR
    text = (built.parent / "resources.txt").read_text()
    res = cs.parse_resources(text)
    for name in cs.KERNELS:
        assert name in res, f"{name} missing from the ptxas report:\n{text}"
        k = res[name]
        assert k["arch"] == "sm_90"
        assert k["spill_store_bytes"] == 0 and k["spill_load_bytes"] == 0, (name, k)
        assert k["stack_bytes"] == 0, (name, k)
        assert 0 < k["registers"] <= 255, (name, k)
    # The block-per-row kernels reduce through shared memory; the serial one uses none.
    assert res["softmax_serial"]["smem_bytes"] == 0
    assert all(res[n]["smem_bytes"] > 0 for n in cs.KERNELS[1:])


@needs_nvcc
def test_build_failure_is_reported(tmp_path):
    with pytest.raises(cs.CommandError, match="build failed"):
        cs.build(build_dir=tmp_path, nvcc=str(tmp_path / "no-such-nvcc"))
    assert not (tmp_path / "resources.txt").exists()


def test_parse_resources_reads_ptxas_lines():
    text = textwrap.dedent(
        """\
        ptxas info    : Compiling entry function 'softmax_online' for 'sm_90'
        ptxas info    : Function properties for softmax_online
            0 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
        ptxas info    : Used 40 registers, used 1 barriers, 72 bytes smem
        ptxas info    : Compiling entry function 'softmax_serial' for 'sm_90'
        ptxas info    : Function properties for softmax_serial
            0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
        ptxas info    : Used 31 registers, used 0 barriers
        """
    )
    res = cs.parse_resources(text)
    assert res["softmax_online"] == {
        "arch": "sm_90",
        "stack_bytes": 0,
        "spill_store_bytes": 8,
        "spill_load_bytes": 4,
        "registers": 40,
        "barriers": 1,
        "smem_bytes": 72,
    }
    assert res["softmax_serial"]["registers"] == 31 and res["softmax_serial"]["smem_bytes"] == 0


def test_middle_run_is_fourth_of_seven():
    medians = [5.0, 1.0, 4.0, 2.0, 3.0, 7.0, 6.0]
    assert cs.middle_run(medians) == 2  # sorted: 1 2 3 [4] 5 6 7
    assert cs.middle_run([2.0, 2.0, 2.0]) == 1  # ties broken by run order
    assert cs.middle_run([3.0, 1.0]) == 1  # even count: the lower middle


def test_percentile_matches_linear_interpolation():
    s = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]
    assert cs.percentile(s, 0.5) == 6.0
    assert cs.percentile(s, 0.1) == 2.0
    assert cs.percentile([1.0, 2.0], 0.5) == 1.5
    stats = cs.sample_stats([3.0, 1.0, 2.0])
    assert stats["median_us"] == 2.0 and stats["n"] == 3 and stats["min_us"] == 1.0


@pytest.mark.parametrize(
    ("log", "rc", "clean"),
    [
        ("========= LEAK SUMMARY: 0 bytes leaked in 0 allocations\n"
         "========= ERROR SUMMARY: 0 errors\n", 0, True),
        ("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n", 0, True),
        ("========= ERROR SUMMARY: 1 error\n", 0, False),  # singular
        ("========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)\n", 0, False),
        ("========= LEAK SUMMARY: 64 bytes leaked in 1 allocations\n"
         "========= ERROR SUMMARY: 0 errors\n", 0, False),
        ("========= ERROR SUMMARY: 0 errors\n", 1, False),  # tool exit status counts
        ("softmax: device 0 ...\n", 0, False),  # no summary: the tool did not run
    ],
)  # fmt: skip
def test_sanitizer_verdict(log, rc, clean):
    v = cs.parse_sanitizer_log(log, rc)
    assert v["clean"] is clean, v
    assert (v["reason"] is None) is clean


# ------------------------------------------------------------------ the runner, with a fake binary

FAKE_BINARY = """\
#!{python}
# Stands in for cuda/build/softmax: writes a JSON document like the real one. Run k (counted in
# a file next to it) gets medians scaled by FACTORS[k], so the middle run is known in advance.
import json, sys
from pathlib import Path
FACTORS = [1.3, 1.0, 1.6, 0.9, 1.1, 2.0, 1.2]
BASE = {{"softmax_serial": 400.0, "softmax_parallel": 12.0,
        "softmax_online_scalar": 9.0, "softmax_online": 10.0}}
RESULTS = [
    {{"kernel": "softmax_serial", "case": "512x8192", "pass": True, "expect_fail": False,
     "diagnostic": False, "max_abs_err": 1e-8, "max_row_sum_err": 8e-8}},
    {{"kernel": "softmax_serial_uncompensated", "case": "512x8192", "pass": True,
     "expect_fail": False, "diagnostic": True, "max_abs_err": 2e-8, "max_row_sum_err": 8e-6}},
]
args = sys.argv[1:]
out = Path(args[args.index("--json") + 1])
counter = Path(sys.argv[0]).with_suffix(".count")
mode = "self-check" if "--self-check" in args else "timing"
doc = {{"schema": "warpgauge.cuda_softmax.run/1", "mode": mode,
       "device": {{"name": "Fake GPU", "sm_count": 4}},
       "correctness": {{"all_pass": {correct}, "results": RESULTS}}, "ok": {correct}}}
if mode == "timing":
    k = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(k + 1))
    f = FACTORS[k % len(FACTORS)]
    doc["timing"] = {{"rounds": 3}}
    doc["kernels"] = [
        {{"name": n, "median_us": b * f, "p10_us": b * f * 0.9, "p90_us": b * f * 1.1,
          "n": 3, "samples_us": [b * f] * 3}} for n, b in BASE.items()]
else:
    doc["timing"] = None
    doc["self_check"] = {{"ok": {correct}}}
print("fake run", mode, file=sys.stderr)
out.write_text(json.dumps(doc))
sys.exit(0 if {correct} else 1)
"""


def _fake_binary(tmp_path: Path, correct: bool = True) -> Path:
    p = tmp_path / "bin" / "softmax"
    p.parent.mkdir()
    p.write_text(FAKE_BINARY.format(python=sys.executable, correct=correct))
    p.chmod(0o755)
    (p.parent / "resources.txt").write_text(
        "ptxas info    : Compiling entry function 'softmax_online' for 'sm_90'\n"
    )
    return p


@pytest.fixture
def fake_gpu(monkeypatch):
    """The fake binary stands in for a GPU run: tell the probe a GPU is there."""
    monkeypatch.setattr(cs, "cuda_gpu_missing", lambda: None)


def test_runner_reports_middle_run_and_spread(tmp_path, fake_gpu):
    out = tmp_path / "out"
    argv = ["--binary", str(_fake_binary(tmp_path)), "--skip-python", "--out", str(out)]
    assert cs.main(argv) == 0

    raw = sorted(p.name for p in (out / "raw").iterdir())
    assert raw == sorted([f"cuda-run-{i}.json" for i in range(1, 8)]
                         + [f"cuda-run-{i}.log" for i in range(1, 8)])  # fmt: skip
    assert (out / "self-check.json").is_file() and (out / "resources.txt").is_file()

    s = json.loads((out / "summary.json").read_text())
    assert s["ok"] and s["runs_ok"] == 7 and s["correctness"]["all_pass"]
    assert s["self_check"]["ok"]
    k = s["kernels"]["softmax_parallel"]
    # Factors 1.3 1.0 1.6 0.9 1.1 2.0 1.2: the 4th smallest is 1.2, run 7.
    assert k["middle_run"] == 7
    assert k["median_us"] == pytest.approx(12.0 * 1.2)
    assert k["p10_us"] == pytest.approx(12.0 * 1.2 * 0.9)
    assert k["spread"]["min_us"] == pytest.approx(12.0 * 0.9)
    assert k["spread"]["max_us"] == pytest.approx(12.0 * 2.0)
    assert k["spread"]["max_over_min"] == pytest.approx(2.0 / 0.9)
    assert len(k["run_medians_us"]) == 7
    ratio = next(r for r in s["ratios"] if (r["a"], r["b"]) == ("softmax_serial", "softmax_online"))
    assert ratio["min"] == pytest.approx(40.0) and ratio["max"] == pytest.approx(40.0)
    assert ratio["same_process"]
    assert s["python_timing"] == "skipped"
    digest = hashlib.sha256((out / "raw" / "cuda-run-7.json").read_bytes()).hexdigest()
    assert s["files_sha256"]["raw/cuda-run-7.json"] == digest
    assert "summary.md" in s["files_sha256"] and "summary.json" not in s["files_sha256"]

    md = (out / "summary.md").read_text()
    assert "| softmax_parallel | 14.400 |" in md
    assert "| softmax_serial / softmax_online | 40.00x | 40.00x | yes |" in md
    assert "Self-check (broken kernel must be caught): OK." in md
    assert "| softmax_serial | 1e-08 | 8e-08 | yes |" in md
    assert "| softmax_serial_uncompensated (diagnostic, not a gate) | 2e-08 | 8e-06 | yes |" in md
    worst = s["correctness"]["worst_errors"]
    assert worst["softmax_serial_uncompensated"]["diagnostic"]


def test_runner_fails_when_the_binary_fails(tmp_path, fake_gpu):
    out = tmp_path / "out"
    argv = ["--binary", str(_fake_binary(tmp_path, correct=False)), "--skip-python",
            "--runs", "2", "--out", str(out)]  # fmt: skip
    assert cs.main(argv) == 1
    s = json.loads((out / "summary.json").read_text())
    assert not s["ok"] and s["runs_ok"] == 0 and not s["self_check"]["ok"]
    assert s["kernels"] == {} and not s["correctness"]["all_pass"]


def test_summary_records_unavailable_python_providers():
    cuda_doc = {"kernels": [{"name": "softmax_online", "median_us": 10.0, "p10_us": 9.0,
                             "p90_us": 11.0, "n": 5}]}  # fmt: skip
    py_doc = {
        "providers": [
            {"name": "torch.softmax", "available": True, "correct": True, "median_us": 5.0,
             "p10_us": 4.5, "p90_us": 5.5, "n": 5},
            {"name": "warpgauge.softmax", "available": False,
             "reason": "unavailable: ImportError: nope"},
        ]
    }  # fmt: skip
    s = cs.summarize([cuda_doc], [py_doc])
    assert set(s["kernels"]) == {"softmax_online", "torch.softmax"}
    assert s["kernels"]["torch.softmax"]["source"] == "python"
    cross = next(r for r in s["ratios"] if r["a"] == "softmax_online")
    assert cross["b"] == "torch.softmax" and cross["per_run"] == [2.0]
    assert not cross["same_process"]
    md = cs.render_markdown(
        {
            **s,
            "shape": {"rows": 1024, "width": 1024},
            "device": {"name": "Fake"},
            "runs_ok": 1,
            "runs_requested": 1,
            "correctness": {"all_pass": True},
            "unavailable": {"warpgauge.softmax": "unavailable: ImportError: nope"},
        }
    )
    assert "| warpgauge.softmax | unavailable: ImportError: nope |" in md


def test_help_exits_cleanly(capsys):
    with pytest.raises(SystemExit) as e:
        cs.main(["--help"])
    assert e.value.code == 0
    assert "--runs" in capsys.readouterr().out


def test_without_a_gpu_says_so_and_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cs, "cuda_gpu_missing", lambda: "cuInit: CUDA_ERROR_NO_DEVICE")
    out = tmp_path / "out"
    assert cs.main(["--binary", str(_fake_binary(tmp_path)), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU" in err and "CUDA_ERROR_NO_DEVICE" in err
    assert "FAILED" not in err and not out.exists()  # nothing half-written, no false verdicts


def test_the_probe_on_this_machine(tmp_path, capsys):
    """The real probe (libcuda through ctypes): on a machine without a GPU, exit 2 and say so."""
    reason = cs.cuda_gpu_missing()
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        has_gpu = None
    if has_gpu is not None:
        assert (reason is None) == has_gpu, reason
    if reason is None:
        pytest.skip("a CUDA GPU is visible here")
    assert cs.main(["--runs", "1", "--out", str(tmp_path / "out")]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_a_binary_that_reports_an_insufficient_driver_exits_2(tmp_path, fake_gpu, capsys):
    p = tmp_path / "softmax"
    p.write_text(
        f"#!{sys.executable}\nimport sys\n"
        "print('CUDA error: cudaErrorInsufficientDriver: CUDA driver version is insufficient', "
        "file=sys.stderr)\nsys.exit(1)\n"
    )
    p.chmod(0o755)
    assert cs.main(["--binary", str(p), "--skip-python", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no CUDA GPU" in err and "cudaErrorInsufficientDriver" in err
