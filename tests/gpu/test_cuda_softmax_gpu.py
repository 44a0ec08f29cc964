"""The CUDA softmax program on a real GPU: its self-check must catch the broken kernel and pass
the real ones, a short timing run must produce a complete JSON document, and the Python runner
must produce its summary. Skipped without a CUDA device or without nvcc."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from warpgauge import cuda_softmax as cs

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to build cuda/"),
]


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    return cs.build(build_dir=tmp_path_factory.mktemp("cuda-build"))


def _run(binary, tmp_path, *args, timeout=300):
    out = tmp_path / "run.json"
    proc = subprocess.run(
        [str(binary), *args, "--json", str(out)], capture_output=True, text=True, timeout=timeout
    )
    doc = json.loads(out.read_text()) if out.is_file() else None
    return proc, doc


def test_self_check_catches_the_broken_kernel(binary, tmp_path):
    proc, doc = _run(binary, tmp_path, "--self-check")
    assert proc.returncode == 0, proc.stderr
    assert "self-check OK" in proc.stderr
    assert doc["ok"] and doc["self_check"]["ok"]
    results = doc["correctness"]["results"]
    real = [r for r in results if not r["expect_fail"] and not r["diagnostic"]]
    broken = [r for r in results if r["expect_fail"]]
    assert {r["kernel"] for r in results if r["diagnostic"]} == {"softmax_serial_uncompensated"}
    assert {r["kernel"] for r in real} == set(cs.KERNELS)
    assert all(r["pass"] for r in real), [r for r in real if not r["pass"]]
    # Skipping the last float4 leaves NaN (the poison) behind in every case with a float4 body.
    assert any(not r["pass"] and r["nonfinite"] > 0 for r in broken)
    # The numerical fix: at width 8192 the compensated serial sum is closer to 1 than the plain one.
    wide = {r["kernel"]: r for r in results if r["case"].startswith("512x8192")}
    assert (
        wide["softmax_serial"]["max_row_sum_err"]
        < wide["softmax_serial_uncompensated"]["max_row_sum_err"]
    )
    cases = {r["case"] for r in results}
    assert any(c.startswith("512x8192") for c in cases)
    assert any(c.startswith("1000x4099 in+1") for c in cases)


def test_timing_run_writes_complete_json(binary, tmp_path):
    proc, doc = _run(
        binary, tmp_path, "--rows", "256", "--width", "1000", "--offset", "1",
        "--rounds", "20", "--warmup-ms", "20", "--suite", "quick",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert doc["ok"] and doc["correctness"]["all_pass"]
    assert doc["device"]["sm_count"] > 0 and doc["device"]["name"]
    assert doc["timing"]["warmup_ms_actual"] >= 20
    names = [k["name"] for k in doc["kernels"]]
    assert names == list(cs.KERNELS)
    for k in doc["kernels"]:
        assert len(k["samples_us"]) == 20 and k["n"] == 20
        assert 0 < k["p10_us"] <= k["median_us"] <= k["p90_us"]
    by = {k["name"]: k["median_us"] for k in doc["kernels"]}
    assert by["softmax_serial"] > by["softmax_parallel"]  # the weak baseline is weak


def test_runner_one_quick_run(binary, tmp_path):
    out = tmp_path / "out"
    argv = ["--binary", str(binary), "--runs", "1", "--rounds", "10", "--warmup-ms", "10",
            "--suite", "quick", "--out", str(out)]  # fmt: skip
    assert cs.main(argv) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["ok"] and set(cs.KERNELS) <= set(s["kernels"])
    assert "torch.softmax" in s["kernels"]  # torch is always there on a CUDA machine
