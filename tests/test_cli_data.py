"""Data out and the command line around it: export, load_run, --json, --version, doctor, and
the packaging that makes `warpgauge` work after a plain install. CPU only."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from warpgauge import artifacts as A
from warpgauge import cli
from warpgauge import export as X

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_RUN = ROOT / "tests" / "fixtures" / "run-synthetic"
SRC = str(ROOT / "src")


def _main(args, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        cli.main(list(map(str, args)))
    out = capsys.readouterr()
    return e.value.code or 0, out.out, out.err


# ------------------------------------------------------------------------------------ export


def test_records_are_one_row_per_case_and_provider():
    run = A.load_run(FIXTURE_RUN)
    rows = X.records(run)
    assert len(rows) == sum(len(c["providers"]) for c in run.cases)
    assert all(tuple(r) == X.COLUMNS for r in rows)
    case = run.case("softmax/bfloat16/16384x4096/cold")
    wg = next(p for p in case["providers"] if p["name"] == "warpgauge")
    row = next(r for r in rows if r["case_id"] == case["case_id"] and r["provider"] == "warpgauge")
    assert row["device_median_us"] == wg["device_time"]["median_us"]
    assert row["host_p90_us"] == wg["host_time"]["p90_us"]
    assert row["tbps"] == wg["derived"]["tbps"] and row["shape_rows"] == 16384
    assert row["shape_M"] is None and row["family"] == "warpgauge" and row["lane"] == "cold"
    err = next(r for r in rows if r["status"] == "error")
    assert err["error"] == "RuntimeError: synthetic failure for the fixture"  # one line
    assert err["device_median_us"] is None


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_export_cli_writes_long_form(tmp_path, capsys, fmt):
    out = tmp_path / f"run.{fmt}"
    code, stdout, _ = _main(["export", FIXTURE_RUN, "--out", out], capsys)
    assert code == 0 and str(out) in stdout
    rows = X.records(FIXTURE_RUN)
    if fmt == "json":
        back = json.loads(out.read_text())
        assert back == rows
    else:
        back = list(csv.DictReader(io.StringIO(out.read_text())))
        assert len(back) == len(rows) and tuple(back[0]) == X.COLUMNS
        assert float(back[0]["device_median_us"]) == rows[0]["device_median_us"]


def test_export_to_stdout_and_bad_format(capsys):
    code, stdout, _ = _main(["export", FIXTURE_RUN, "--format", "json"], capsys)
    assert code == 0 and len(json.loads(stdout)) == len(X.records(FIXTURE_RUN))
    code, _, err = _main(["export", FIXTURE_RUN, "--format", "xlsx"], capsys)
    assert code == 2 and "csv, parquet, json" in err


def test_export_of_a_truncated_run_names_the_file(tmp_path, capsys):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run)
    (run / "cases" / "gemm__bfloat16__2048x2048x2048__cold.json").write_text('{"run_id": ')
    code, _, err = _main(["export", run, "--format", "csv"], capsys)
    assert code == 2 and "gemm__bfloat16__2048x2048x2048__cold.json: corrupted" in err


def test_load_run_without_pandas_says_what_to_install(monkeypatch):
    import warpgauge

    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas -> ImportError
    with pytest.raises(ImportError, match="pip install pandas"):
        warpgauge.load_run(FIXTURE_RUN)


def test_load_run_returns_a_dataframe():
    pd = pytest.importorskip("pandas")
    import warpgauge

    df = warpgauge.load_run(FIXTURE_RUN)
    assert isinstance(df, pd.DataFrame) and tuple(df.columns) == X.COLUMNS
    assert len(df) == len(X.records(FIXTURE_RUN))
    wg = df[(df.provider == "warpgauge") & (df.lane == "cold") & (df.op == "softmax")]
    assert len(wg) == 3 and (wg.speedup_vs_best_pytorch > 1).all()


def test_export_parquet_round_trips(tmp_path, capsys):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    out = tmp_path / "run.parquet"
    code, _, _ = _main(["export", FIXTURE_RUN, "--out", out], capsys)
    assert code == 0
    back = pd.read_parquet(out)
    assert len(back) == len(X.records(FIXTURE_RUN)) and tuple(back.columns) == X.COLUMNS


def test_import_warpgauge_does_not_import_pandas_or_the_exporter():
    code = (
        "import sys, warpgauge; print('pandas' in sys.modules, 'warpgauge.export' in sys.modules)"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC, "TRITON_INTERPRET": "1"},
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["False", "False"]


# ------------------------------------------------------------------------------------ --json, --version


def test_validate_json_via_cli(capsys):
    code, stdout, _ = _main(["validate", FIXTURE_RUN, "--json"], capsys)
    assert code == 0 and json.loads(stdout)["valid"] is True


def test_compare_json_and_fail_above_via_cli(capsys):
    code, stdout, _ = _main(
        ["compare", FIXTURE_RUN, FIXTURE_RUN, "--json", "--fail-above", "1"], capsys
    )
    out = json.loads(stdout)
    assert code == 0 and out["regressions"] == [] and out["counts"]["same"] == len(out["rows"])


def test_providers_json(capsys):
    code, stdout, _ = _main(["providers", "--json"], capsys)
    rows = json.loads(stdout)
    assert code == 0 and {"op", "name", "family", "available"} <= set(rows[0])


def test_version_is_the_pyproject_version(capsys):
    import tomllib

    import warpgauge

    want = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    code, stdout, _ = _main(["--version"], capsys)
    assert code == 0 and stdout.strip() == f"warpgauge {want}"
    assert warpgauge.__version__ == want


def test_report_out_via_cli(tmp_path, capsys):
    code, stdout, _ = _main(["report", FIXTURE_RUN, "--out", tmp_path / "r"], capsys)
    assert code == 0 and (tmp_path / "r" / "report.html").is_file()


# ------------------------------------------------------------------------------------ doctor


def test_doctor_json_lists_every_item_with_a_verdict_and_fix(capsys):
    code, stdout, _ = _main(["doctor", "--json", "--no-kernel"], capsys)
    out = json.loads(stdout)
    names = [c["name"] for c in out["checks"]]
    for want in ("python", "Triton interpreter", "torch", "triton", "warpgauge",
                 "peer: liger_kernel", "peer: quack", "peer: gemlite",
                 "nvcc", "ncu", "compute-sanitizer"):  # fmt: skip
        assert want in names, want
    assert any(n in names for n in ("CUDA GPU", "GPU 0"))
    for c in out["checks"]:
        assert c["status"] in ("ok", "warn", "fail")
        assert c["status"] == "ok" or c["fix"], c  # anything not ok says what to do
    assert code == (1 if any(c["status"] == "fail" for c in out["checks"]) else 0)


def test_doctor_reports_a_missing_tool_with_its_fix(monkeypatch):
    from warpgauge import doctor as D

    monkeypatch.setattr(D.shutil, "which", lambda exe: None)
    found = {c.name: c for c in D.checks(run_kernel=False)}
    assert found["ncu"].status == "warn" and "PATH" in found["ncu"].fix
    monkeypatch.setattr(D, "_version", lambda dist: None)
    found = {c.name: c for c in D.checks(run_kernel=False)}
    assert found["peer: gemlite"].fix == "pip install gemlite"


def test_doctor_runs_a_kernel_under_the_interpreter():
    from warpgauge import doctor as D

    torch = pytest.importorskip("torch")
    k = D._kernel_check(torch)
    assert k is not None and k.status == "ok", k


# ------------------------------------------------------------------------------------ packaging


def _pyproject() -> dict:
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_cli_dependencies_are_core_and_metadata_is_clean():
    proj = _pyproject()
    deps = " ".join(proj["project"]["dependencies"])
    for dep in ("typer", "rich", "jsonschema", "tomli"):
        assert dep in deps, dep
    data = _pyproject()["tool"]["setuptools"]["package-data"]["warpgauge"]
    assert "py.typed" in data and not any("templates" in d for d in data)
    for pattern in data:
        assert list((ROOT / "src" / "warpgauge").glob(pattern)), f"{pattern} matches nothing"
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"## {proj['project']['version']}" in changelog


def test_cli_needs_nothing_beyond_the_core_dependencies():
    """What a plain `pip install .` provides: the CLI's --help and validate work with
    matplotlib, pandas and pynvml unimportable."""
    block = (
        "import sys; [sys.modules.__setitem__(m, None) for m in ('matplotlib', 'pandas', 'pynvml')]"
    )
    code = f"{block}; from warpgauge.cli import main; main(['validate', {str(FIXTURE_RUN)!r}])"
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("OK:")


def test_report_without_matplotlib_is_one_clear_line(tmp_path):
    block = "import sys; sys.modules['matplotlib'] = None"
    code = f"{block}; from warpgauge.cli import main; main(['report', {str(FIXTURE_RUN)!r}, '--out', {str(tmp_path)!r}])"
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC},
        timeout=120,
    )
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "pip install matplotlib" in p.stderr
