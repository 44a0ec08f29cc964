"""The command line: no-GPU message, help, subcommand wiring, python -m."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from warpgauge import cli

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _run(*args, env_extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU, even on a GPU machine
    env.pop("TRITON_INTERPRET", None)
    env.pop("WARPGAUGE_POISON_OUTPUTS", None)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "warpgauge", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_bench_without_cuda_is_one_clear_line():
    p = _run("bench", "--quick")
    assert p.returncode != 0
    text = (p.stdout + p.stderr).strip()
    assert "Traceback" not in text
    assert len(text.splitlines()) == 1, text
    assert "CUDA" in text and text.startswith("warpgauge bench:")


def test_bad_suite_is_one_clear_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[ops.softmax]\nshapes = ["12"]\n')
    p = _run("bench", "--suite", str(bad))
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert "is not ROWSxWIDTH" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for cmd in (
        "bench",
        "report",
        "validate",
        "compare",
        "export",
        "providers",
        "doctor",
        "cuda-softmax",
    ):
        assert cmd in out


def test_validate_of_a_missing_run_fails(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["validate", str(tmp_path / "nope")])
    assert e.value.code != 0


def test_cuda_softmax_forwards_argv(monkeypatch):
    seen = {}

    class Fake:
        @staticmethod
        def main(argv):
            seen["argv"] = argv
            return 5

    import warpgauge

    monkeypatch.setattr(warpgauge, "cuda_softmax", Fake, raising=False)
    monkeypatch.setitem(sys.modules, "warpgauge.cuda_softmax", Fake)
    with pytest.raises(SystemExit) as e:
        cli.main(["cuda-softmax", "--rows", "4", "--help"])
    assert e.value.code == 5 and seen["argv"] == ["--rows", "4", "--help"]


def test_providers_command_runs(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["providers"])
    assert e.value.code == 0
    assert "tinygemm" in capsys.readouterr().out
