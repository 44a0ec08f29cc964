"""Report rendering (CPU only, from artifacts alone) and run comparison verdicts."""

from __future__ import annotations

import base64
import copy
import json
import math
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
    assert names == ["gemm.png", "report.html", "report.md", "roofline.png", "softmax.png"]
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
        "Warm lane (inputs stay in L2",
        "Host + device time",
        "| softmax | quack | absent |",
        "| gemm | triton_tutorial | failed gate |",
        "| softmax | torch_compile | error |",
    ):
        assert needle in md, needle
    # warpgauge softmax beats torch.compile by ~2.6x at 16384x4096 in the synthetic data
    row = next(line for line in md.splitlines() if line.startswith("| bfloat16 | 16384x4096 |"))
    assert "| 2.60× | torch.compile |" in row


def test_report_places_warpgauge_on_the_run_s_roofline(rendered):
    run_dir, _ = rendered
    md = (run_dir / "report" / "report.md").read_text("utf-8")
    section = md[md.index("## Roofline (cold lane)") : md.index("## Providers not timed")]
    assert "![achieved throughput against arithmetic intensity" in section
    assert "memory 3.99 TB/s" in section and "bfloat16 tensor cores 648" in section
    rows = {line.split(" | ")[0].strip("| "): line for line in section.splitlines()
            if line.startswith("| softmax") or line.startswith("| gemm")}  # fmt: skip
    assert set(rows) == {"softmax", "gemm"}
    assert "% of memory |" in rows["softmax"] and "% of tensor |" in rows["gemm"]
    page = (run_dir / "report" / "report.html").read_text("utf-8")
    data = base64.b64encode((run_dir / "report" / "roofline.png").read_bytes()).decode()
    assert f"data:image/png;base64,{data}" in page


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


def test_rates_above_the_measured_ceiling_get_their_own_section():
    run = A.load_run(FIXTURE_RUN)
    assert not any(b[1] == "Rates above the run's measured ceilings" for b in
                   R.build_blocks(run, [], {}) if b[0] == "h2")  # fmt: skip
    pr = next(p for c in run.cases for p in c["providers"] if p["status"] == "ok")
    flag = {"metric": "tflops", "rate": 763.0, "ceiling": 724.0, "ceiling_max": 787.0,
            "within_range": True}  # fmt: skip
    pr.setdefault("extra", {})["above_ceiling"] = {"flags": [flag], "note": "x"}
    blocks = R.build_blocks(run, [], {})
    i = next(
        i for i, b in enumerate(blocks) if b == ("h2", "Rates above the run's measured ceilings")
    )
    table = blocks[i + 2]
    assert table[0] == "table" and len(table[2]) == 1
    assert table[2][0][2] == "763 TFLOP/s" and table[2][0][5] == "yes"


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
    assert R.report_cli(run_dir) == 1  # rendered, but the run fails validation: non-zero
    md = (run_dir / "report" / "report.md").read_text("utf-8")
    assert "interrupted (4 of 10 expected cases missing)" in md
    assert "gemm/bfloat16/2048x2048x2048/cold" in md
    assert "WARNING: validation found" in md
    assert not (run_dir / "report" / "gemm.png").exists()
    out = capsys.readouterr()
    assert "report.md" in out.out and "fails validation" in out.err


def test_report_cli_fails_cleanly_without_a_run(tmp_path, capsys):
    assert R.report_cli(tmp_path / "nothing") == 1
    assert "cannot render" in capsys.readouterr().err


def test_report_of_a_corrupted_run_names_the_file(tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run_dir)
    bad = run_dir / "cases" / "softmax__bfloat16__1024x1024__cold.json"
    bad.write_bytes(bad.read_bytes()[:100])
    assert R.report_cli(run_dir) == 1
    err = capsys.readouterr().err
    assert "softmax__bfloat16__1024x1024__cold.json: corrupted or truncated" in err


def test_report_out_leaves_the_run_untouched_and_refuses_inside(tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run_dir)
    before = {rel: (run_dir / rel).read_bytes() for rel in A.list_files(run_dir)}
    assert R.report_cli(run_dir, tmp_path / "out") == 0
    assert (tmp_path / "out" / "report.html").is_file()
    assert {rel: (run_dir / rel).read_bytes() for rel in A.list_files(run_dir)} == before
    assert R.report_cli(run_dir, run_dir / "elsewhere") == 1
    assert "inside the run directory" in capsys.readouterr().err
    assert not (run_dir / "elsewhere").exists() and A.validate_run(run_dir) == []


def test_verdict_table_opens_the_report(rendered):
    run_dir, _ = rendered
    md = (run_dir / "report" / "report.md").read_text("utf-8")
    verdict = md.index("## Verdict per operator")
    assert verdict < md.index("## Run") < md.index("## softmax")
    run = A.load_run(run_dir)
    v = R.op_verdicts(run, "softmax")
    # synthetic data: warpgauge softmax is ~2.6x over torch.compile at the two large shapes;
    # at 1024x1024 both sit at the synthetic 4 us launch floor: a tie
    assert v["cases"] == 3 and v["counts"] == {"win": 2, "tie": 1, "loss": 0}
    ratios = [2.6, 2.6, 1.0]
    assert v["geomean"] == pytest.approx(math.prod(ratios) ** (1 / 3), rel=0.05)
    assert v["peers"]["Liger-Kernel"][1] == 3
    g = R.op_verdicts(run, "gemm")  # cuBLAS beats warpgauge gemm in the fixture
    assert g["counts"]["loss"] == 2 and g["geomean"] < 1 and g["worst"][0] < 1
    line = next(ln for ln in md.splitlines() if ln.startswith("| gemm |"))
    assert "| 0 / 0 / 2 |" in line and "**" in line  # losses in bold


def test_html_colours_losses_and_folds_errors(rendered):
    run_dir, _ = rendered
    page = (run_dir / "report" / "report.html").read_text("utf-8")
    assert '<td class="loss">' in page and '<td class="win">' in page
    assert "<details><summary>RuntimeError: synthetic failure for the fixture…</summary>" in page
    assert "<pre>Traceback (most recent call last):" in page
    assert 'class="wrap"' in page and "max-width" in page


def test_error_text_is_one_line_with_the_full_text_folded():
    tb = "Traceback (most recent call last):\n  File x, line 1\nValueError: width > 65536"
    assert R.report_tables._one_line(tb) == "ValueError: width > 65536…"
    assert R.report_tables._one_line("short reason") == "short reason"
    assert len(R.report_tables._one_line("x" * 500)) == R.report_tables.ERROR_SUMMARY_CHARS + 1


def test_speedup_panels_split_by_batch_and_keep_suite_order():
    from warpgauge import plots as P

    def case(label, **shape):
        return {"shape_label": label, "shape": shape}

    int4 = [case(f"{m}x{n}x4096", M=m, N=n, K=4096) for m in (1, 16) for n in (4096, 8192, 14336)]
    parts = P.panels(int4)
    assert [p[0] for p in parts] == ["M = 1", "M = 16"]
    assert [c["shape_label"] for c in parts[1][1]] == [
        "16x4096x4096",
        "16x8192x4096",
        "16x14336x4096",
    ]
    squares = [case(f"{n}^3", M=n, N=n, K=n) for n in (512, 1024, 4096, 8192)]
    assert len(P.panels(squares)) == 1
    run = A.load_run(FIXTURE_RUN)
    order = [c["shape_label"] for c in P.suite_order(run, "softmax")]
    assert order == ["1024x1024", "16384x4096", "32768x8192"]  # config.groups order


def test_speedup_series_ratio_and_bars():
    from warpgauge import plots as P

    run = A.load_run(FIXTURE_RUN)
    cases = P.suite_order(run, "softmax")
    series = dict((label, pts) for label, _, pts in P.speedup_series(cases))
    assert set(series) == {"best PyTorch provider", "Liger-Kernel"}  # QuACK absent: no points
    i, r, lo, hi = series["best PyTorch provider"][1]
    c = cases[i]
    wg = next(p for p in c["providers"] if p["name"] == "warpgauge")["device_time"]
    best = A.best_pytorch(c)["device_time"]
    assert r == pytest.approx(best["median_us"] / wg["median_us"])
    assert r - lo == pytest.approx(best["p10_us"] / wg["p90_us"])
    assert r + hi == pytest.approx(best["p90_us"] / wg["p10_us"])


def test_launch_bound_shapes_get_a_latency_panel():
    from warpgauge import plots as P

    run = A.load_run(FIXTURE_RUN)
    cases = P.suite_order(run, "softmax")
    fast = P.launch_bound(run, cases)
    # 1024x1024 bf16 moves 4 MiB: ~1 us at the 4 TB/s ceiling; the others take far longer
    assert [c["shape_label"] for c in fast] == ["1024x1024"]


# ------------------------------------------------------------------------------------ verdicts


def stats_of(samples):
    xs = sorted(samples)
    n = len(xs)
    med = (xs[(n - 1) // 2] + xs[n // 2]) / 2
    return {
        "median_us": med,
        "p10_us": xs[int(0.1 * (n - 1))],
        "p90_us": xs[int(round(0.9 * (n - 1)))],
        "samples_us": list(samples),
    }


def noisy(center, rel, n=40, seed=0):
    """``n`` samples spread evenly over center * (1 +- rel)."""
    return stats_of([center * (1 - rel + 2 * rel * i / (n - 1)) for i in range(n)])


def test_median_interval_is_order_statistics_of_the_samples():
    s = stats_of([float(x) for x in range(1, 101)])  # 1..100
    lo, hi = C.median_interval(s)
    assert (lo, hi) == (40.0, 61.0)  # ranks floor((100 - 19.6) / 2) = 40 and ceil(1 + 59.8) = 61
    few = {"median_us": 5.0, "p10_us": 4.0, "p90_us": 6.0, "samples_us": [5.0]}
    assert C.median_interval(few) == (4.0, 6.0)


@pytest.mark.parametrize(
    "a, b, expected",
    [
        (noisy(100, 0.01), noisy(80, 0.01), "faster"),  # -20%, tight
        (noisy(100, 0.01), noisy(125, 0.01), "slower"),  # +25%, tight
        (noisy(100, 0.001), noisy(101, 0.001), "slower"),  # 1% but the noise is 0.1%: real
        (noisy(100, 0.10), noisy(101, 0.10), "same"),  # 1% inside 10% noise
        (noisy(100, 0.30), noisy(112, 0.30), "ambiguous"),  # 12%: intervals touch, > noise
        (noisy(100, 0.02), noisy(100, 0.02), "same"),  # identical
    ],
)
def test_verdict_comes_from_both_runs_noise(a, b, expected):
    assert C.verdict(a, b) == expected


def test_verdict_noise_is_the_larger_of_the_two():
    quiet, loud = noisy(100, 0.001), noisy(103, 0.30)
    assert C.relative_noise(loud) > 0.03 > C.relative_noise(quiet)
    assert C.verdict(quiet, loud) == "same"  # a 3% move inside B's noise is not a change
    assert C.verdict(loud, quiet) == "same"


def test_min_effect_calls_small_significant_changes_same():
    a, b = noisy(100, 0.001), noisy(101, 0.001)
    assert C.verdict(a, b) == "slower"
    assert C.verdict(a, b, min_effect=0.02) == "same"


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
    assert rows[(target, "warpgauge")].noise_b > 0
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
    assert "softmax: warpgauge B/A geomean 1.000 over 6 case(s) (6 same)" in out
    assert C.compare_cli(FIXTURE_RUN, tmp_path / "missing") == C.EXIT_UNREADABLE
    assert "cannot compare" in capsys.readouterr().err


def _slowed_copy(tmp_path, factor: float, provider="warpgauge", op="softmax") -> Path:
    """The fixture run with one provider's device times of ``op`` scaled, manifest renewed."""
    dst = tmp_path / f"slowed-{factor}-{provider}"
    shutil.copytree(FIXTURE_RUN, dst)
    for path in (dst / "cases").glob(f"{op}__*.json"):
        case = A.read_json(path)
        for pr in case["providers"]:
            if pr["name"] == provider and pr["device_time"]:
                pr["device_time"] = _scaled(pr["device_time"], factor)
        A.atomic_write_json(path, A.fill_derived(case, 3.9924549890264753))
    A.write_manifest(dst)
    return dst


def test_compare_fail_above_exits_on_a_warpgauge_regression(tmp_path, capsys):
    slow = _slowed_copy(tmp_path, 1.10)
    assert C.compare_cli(FIXTURE_RUN, slow, fail_above=5) == C.EXIT_REGRESSION
    out = capsys.readouterr().out
    assert "REGRESSION: softmax/bfloat16/" in out
    assert "softmax: warpgauge B/A geomean 1.100 over 6 case(s) (6 slower)" in out
    assert C.compare_cli(FIXTURE_RUN, slow, fail_above=15) == 0  # 10% is under the limit
    assert C.compare_cli(FIXTURE_RUN, slow) == 0  # no limit, no failure
    capsys.readouterr()
    faster = _slowed_copy(tmp_path, 0.8)
    assert C.compare_cli(FIXTURE_RUN, faster, fail_above=1) == 0  # faster is no regression
    peer = _slowed_copy(tmp_path, 1.5, provider="liger")
    assert C.compare_cli(FIXTURE_RUN, peer, fail_above=1) == 0  # a peer's regression is not ours


def test_compare_json(tmp_path, capsys):
    slow = _slowed_copy(tmp_path, 1.10)
    assert C.compare_cli(FIXTURE_RUN, slow, as_json=True, fail_above=5) == C.EXIT_REGRESSION
    out = json.loads(capsys.readouterr().out)
    assert out["counts"]["slower"] >= 6 and len(out["regressions"]) == 6
    soft = next(s for s in out["summaries"] if s["op"] == "softmax")
    assert soft["geomean_ratio"] == pytest.approx(1.10) and soft["counts"]["slower"] == 6
    row = out["rows"][0]
    assert {"case_id", "provider", "ratio", "verdict", "interval_a_us", "noise_b"} <= set(row)


def test_report_without_jsonschema_warns_but_does_not_fail(tmp_path, monkeypatch, capsys):
    import warpgauge.artifacts.validate as V

    monkeypatch.setattr(V, "have_jsonschema", lambda: False)
    monkeypatch.setattr(V, "schema_errors", lambda name, obj: [])
    assert R.report_cli(FIXTURE_RUN, tmp_path / "r") == 0
    md = (tmp_path / "r" / "report.md").read_text("utf-8")
    assert "schemas not checked" in md  # said in the banner, not hidden


def test_warm_lane_has_its_own_compact_table():
    run = A.load_run(FIXTURE_RUN)
    headers, rows = R.warm_table(run, "softmax")
    assert headers[-2:] == ["vs best PyTorch", "best PyTorch provider"] and len(rows) == 3
    case = run.case("softmax/bfloat16/16384x4096/warm")
    wg = next(p for p in case["providers"] if p["name"] == "warpgauge")["device_time"]
    best = A.best_pytorch(case)["device_time"]
    row = next(r for r in rows if r[1] == "16384x4096")
    assert row[4].text.startswith(f"{best['median_us'] / wg['median_us']:.2f}×")


def test_report_names_providers_left_out_of_best_pytorch(tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run_dir)
    for path in (run_dir / "cases").glob("softmax__*.json"):
        case = A.read_json(path)
        for pr in case["providers"]:
            if pr["name"] == "torch_compile":
                pr["extra"] = {"excluded_from_best": "CUDA graph trees copy the inputs"}
        A.write_case(run_dir, A.fill_derived(case, 3.9924549890264753))
    R.render_report(run_dir, tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text("utf-8")
    assert "- torch.compile: CUDA graph trees copy the inputs" in md
    row = next(ln for ln in md.splitlines() if ln.startswith("| bfloat16 | 16384x4096 |"))
    assert "| torch.softmax |" in row  # the best PyTorch provider is now eager torch


def test_report_names_the_claimed_commit_of_a_copy_with_an_old_git():
    """A run made on a copy of the tree whose .git is older than its files records git's HEAD,
    the changed files and the commit the caller claimed (``WARPGAUGE_GIT_COMMIT``); the report's
    run table shows the claim beside git's answer (session 11's host runs), and a run without a
    claim shows git's commit alone."""
    from warpgauge import artifacts
    from warpgauge.report import _run_facts

    repo = Path(__file__).resolve().parents[1]
    run = artifacts.load_run(repo / "results" / "20261202-001711-host")
    facts = dict((k, v) for k, v, *_ in _run_facts(run))
    assert facts["commit"].startswith("220a2cfdbddf705de2084f008c0e42bda15adeea (the copy's")
    assert "claimed: 1fabc2d11479bfeb59685a8a842a2e89e1ced276" in facts["commit"]
    run.run["provenance"].pop("git_claimed_commit")
    facts = dict((k, v) for k, v, *_ in _run_facts(run))
    assert facts["commit"] == "220a2cfdbddf705de2084f008c0e42bda15adeea"
