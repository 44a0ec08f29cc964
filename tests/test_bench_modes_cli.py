"""The command line's mode, selection and plug-in options (no GPU: errors come before CUDA)."""

from __future__ import annotations

import pytest

from .test_bench_cli import _run


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--mode", "training"], "unknown mode"),
        (["--provider", "wg_no_such_module:register"], "cannot import"),
        (["--only", "cudnn"], "no provider named"),
        (["--shapes", "nothing-matches"], "selection is empty"),
        (["--mode", "plans", "--ops", "gemm", "--suite", "default"], "no plans form"),
        (["--repeat", "0"], "--repeat must be >= 1"),
    ],
)
def test_bench_selection_errors_are_one_clear_line(args, fragment):
    p = _run("bench", *args)
    text = (p.stdout + p.stderr).strip()
    assert p.returncode != 0 and "Traceback" not in text, text
    assert fragment in text and len(text.splitlines()) == 1, text


def test_a_valid_mode_selection_reaches_the_cuda_check():
    p = _run("bench", "--mode", "host", "--only", "warpgauge,torch", "--shapes", "*x127")
    text = (p.stdout + p.stderr).strip()
    assert p.returncode != 0 and "CUDA" in text and len(text.splitlines()) == 1, text


def test_reports_of_missing_runs_fail(tmp_path):
    p = _run("plans-report", str(tmp_path / "nope"))
    assert p.returncode != 0 and "Traceback" not in p.stderr
    p = _run("stability", str(tmp_path))
    assert p.returncode != 0 and "two or more" in p.stderr
