"""Report rendering (CPU only, from artifacts alone) and run comparison verdicts."""

from __future__ import annotations

import base64
import copy
import shutil
from pathlib import Path

import pytest

from warpgauge import artifacts as A
from warpgauge import compare as C
from warpgauge import report as R

FIXTURE_RUN = Path(__file__).parent / "fixtures" / "run-synthetic"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """The fixture run copied and rendered once (matplotlib is the slow part)."""
    run_dir = tmp_path_factory.mktemp("rendered") / "run"
    shutil.copytree(FIXTURE_RUN, run_dir)
    paths = R.render_report(run_dir)
    return run_dir, paths


# ------------------------------------------------------------------------------------ report


def test_report_writes_markdown_html_and_one_png_per_op(rendered):
    run_dir, paths = rendered
    names = sorted(p.name for p in paths)
    assert names == ["gemm.png", "report.html", "report.md", "softmax.png"]
    assert all(p.parent == run_dir / "report" for p in paths)
    for p in paths:
        if p.suffix == ".png":
            assert p.read_bytes().startswith(PNG_MAGIC) and p.stat().st_size > 10_000


def test_html_is_self_contained_with_the_figures_embedded(rendered):
    run_dir, _ = rendered
    page = (run_dir / "report" / "report.html").read_text("utf-8")
    for op in ("softmax", "gemm"):
        data = base64.b64encode((run_dir / "report" / f"{op}.png").read_bytes()).decode()
        assert f"data:image/png;base64,{data}" in page
    assert 'src="http' not in page and "<script" not in page


def test_markdown_has_the_minute_summary(rendered):
    run_dir, _ = rendered
    md = (run_dir / "report" / "report.md").read_text("utf-8")
    for needle in (
        "fixture-synthetic",  # run id
        "Synthetic GPU (fixture)",  # GPU
        "0000000000000000000000000000000000000000",  # commit
        "| dirty | no |",
        "copy ceiling (measured) | 3.99 TB/s",
        "bfloat16 648 TFLOP/s",
        "complete (10 of 10 expected cases present)",
        "![softmax",
        "vs best PyTorch",
        "cache diagnostic",
        "Host + device time",
        "| softmax | quack | absent |",
        "| gemm | triton_tutorial | failed gate |",
        "| softmax | torch_compile | error |",
    ):
        assert needle in md, needle
    # warpgauge softmax beats torch.compile by ~2.6x at 16384x4096 in the synthetic data
    row = next(line for line in md.splitlines() if line.startswith("| bfloat16 | 16384x4096 |"))
    assert "2.60× (torch.compile)" in row


def test_rendering_inside_the_run_keeps_it_valid(rendered):
    run_dir, _ = rendered
    assert A.validate_run(run_dir) == []
    listed = A.read_json(run_dir / "manifest.json")["files"]
    assert {"report/report.md", "report/report.html", "report/softmax.png"} <= set(listed)
    png = run_dir / "report" / "gemm.png"
    original = png.read_bytes()
    png.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    try:
        assert any("report/gemm.png" in p and "checksum" in p for p in A.validate_run(run_dir))
    finally:
        png.write_bytes(original)


def test_render_elsewhere_leaves_the_run_untouched(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run_dir)
    before = {rel: (run_dir / rel).read_bytes() for rel in A.list_files(run_dir)}
    paths = R.render_report(run_dir, tmp_path / "elsewhere")
    assert all(p.parent == tmp_path / "elsewhere" for p in paths)
    assert {rel: (run_dir / rel).read_bytes() for rel in A.list_files(run_dir)} == before


def test_report_of_an_interrupted_run_lists_what_is_missing(tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run_dir)
    for rel in A.list_files(run_dir):
        if rel.startswith("cases/gemm__"):
            (run_dir / rel).unlink()
    A.write_manifest(run_dir)
    A.finish_run(run_dir, "interrupted")
    assert R.report_cli(run_dir) == 0
    md = (run_dir / "report" / "report.md").read_text("utf-8")
    assert "interrupted (4 of 10 expected cases missing)" in md
    assert "gemm/bfloat16/2048x2048x2048/cold" in md
    assert "WARNING: validation found" in md
    assert not (run_dir / "report" / "gemm.png").exists()
    assert "report.md" in capsys.readouterr().out


def test_report_cli_fails_cleanly_without_a_run(tmp_path, capsys):
    assert R.report_cli(tmp_path / "nothing") == 1
    assert "cannot render" in capsys.readouterr().out


# ------------------------------------------------------------------------------------ verdicts


def stats(median, p10, p90):
    return {"median_us": median, "p10_us": p10, "p90_us": p90}


@pytest.mark.parametrize(
    "a, b, expected",
    [
        (stats(100, 98, 102), stats(80, 79, 81), "faster"),  # -20%, spreads apart
        (stats(100, 98, 102), stats(125, 124, 127), "slower"),  # +25%, spreads apart
        (stats(100, 99.9, 100.1), stats(102, 101.9, 102.1), "same"),  # apart but within 3%
        (stats(100, 90, 110), stats(101, 95, 112), "same"),  # overlapping and within 3%
        (stats(100, 90, 110), stats(108, 100, 115), "unresolved"),  # 8% but spreads overlap
        (stats(100, 80, 120), stats(70, 60, 85), "unresolved"),  # -30% but spreads overlap
        (stats(100, 100, 100), stats(103, 103, 103), "same"),  # edge of the band
        (stats(103, 103, 103), stats(100, 100, 100), "same"),  # the band is symmetric
        (stats(100, 100, 100), stats(103.5, 103.5, 103.5), "slower"),
    ],
)
def test_verdict(a, b, expected):
    assert C.verdict(a, b) == expected


def test_verdict_band_is_a_parameter():
    assert C.verdict(stats(100, 99, 101), stats(108, 107, 109), band=0.10) == "same"


# ------------------------------------------------------------------------------------ compare_runs


def _scaled(s: dict, f: float) -> dict:
    out = dict(s)
    for k in ("median_us", "p10_us", "p90_us", "mad_us", "min_us", "max_us", "mean_us"):
        out[k] = s[k] * f
    out["samples_us"] = [x * f for x in s["samples_us"]]
    return out


def test_compare_runs_pairs_cases_and_lists_the_rest():
    a = A.load_run(FIXTURE_RUN)
    b = copy.deepcopy(a)
    b.run["run_id"] = "fixture-b"
    target = "softmax/bfloat16/16384x4096/cold"
    case_b = b.case(target)
    wg = next(p for p in case_b["providers"] if p["name"] == "warpgauge")
    wg["device_time"] = _scaled(wg["device_time"], 0.8)
    torch_p = next(p for p in case_b["providers"] if p["name"] == "torch")
    torch_p["device_time"] = _scaled(torch_p["device_time"], 1.5)
    liger = next(p for p in case_b["providers"] if p["name"] == "liger")
    liger.update(
        status="absent", error="not installed", gate=None, device_time=None, host_time=None
    )
    dropped = "gemm/bfloat16/8192x8192x8192/warm"
    b.cases = [c for c in b.cases if c["case_id"] != dropped]

    cmp = C.compare_runs(a, b)
    rows = {(r.case_id, r.provider): r for r in cmp.rows}
    assert rows[(target, "warpgauge")].verdict == "faster"
    assert rows[(target, "warpgauge")].ratio == pytest.approx(0.8)
    assert rows[(target, "torch")].verdict == "slower"
    assert rows[(target, "torch_compile")].verdict == "same"
    assert (target, "liger") not in rows
    assert (target, "liger", "A: ok, B: absent") in cmp.not_compared
    assert cmp.only_in_a == [dropped] and cmp.only_in_b == []
    assert cmp.counts()["faster"] == 1 and cmp.counts()["slower"] == 1
    text = C.format_comparison(cmp)
    assert "Only in A (1): " + dropped in text and "faster" in text


def test_compare_warns_about_different_gpus():
    a = A.load_run(FIXTURE_RUN)
    b = copy.deepcopy(a)
    b.run["provenance"]["gpu"]["name"] = "Another GPU"
    assert any("different GPUs" in w for w in C.compare_runs(a, b).warnings)


def test_compare_cli(tmp_path, capsys):
    assert C.compare_cli(FIXTURE_RUN, FIXTURE_RUN) == 0
    out = capsys.readouterr().out
    assert "softmax/bfloat16/16384x4096/cold" in out and "same" in out
    assert "Not timed in both" in out
    assert C.compare_cli(FIXTURE_RUN, tmp_path / "missing") == 1
