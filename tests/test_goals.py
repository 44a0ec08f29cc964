"""`warpgauge goals`: the open issues' goals checked against a run's artifacts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from warpgauge import goals as G
from warpgauge.artifacts import Run

ROOT = Path(__file__).resolve().parents[1]


def _prov(name, family, us=None, status="ok", pct=None):
    return {
        "name": name, "label": name, "family": family, "baseline": False, "status": status,
        "gate": {"ok": status == "ok"}, "device_time": {"median_us": us} if us else {},
        "host_time": {}, "derived": {"pct_copy_ceiling": pct},
    }  # fmt: skip


def _case(op, shape, lane, provs, nbytes=1 << 20):
    label = "x".join(str(v) for v in shape.values())
    return {
        "run_id": "r", "case_id": f"{op}/bfloat16/{label}/{lane}", "op": op, "dtype": "bfloat16",
        "shape_label": label, "shape": shape, "lane": lane,
        "work": {"bytes": nbytes, "flops": 0}, "providers": provs,
    }  # fmt: skip


def _run(cases, mode="forward"):
    return Run(Path("."), {"run_id": "r", "config": {"mode": mode}}, cases)


def _checks(res):
    return {
        (m["case_id"], m["provider"]): (m["check"], round(m["value"], 4)) for m in res["misses"]
    }


def test_band_counts_every_timed_provider_and_reports_untimed_peers():
    rows = {"rows": 64, "width": 4096}
    res = G.check_run(_run([_case("softmax", rows, "cold", [
        _prov("warpgauge", "warpgauge", 10.0, pct=50.0),
        _prov("compile", "compile", 9.75),  # 0.975: level
        _prov("liger", "peer", 9.5),  # 0.95: below the band
        _prov("quack", "peer", status="absent"),
    ])]))  # fmt: skip
    assert _checks(res) == {("softmax/bfloat16/64x4096/cold", "liger"): ("band", 0.95)}
    assert res["checked"] == {"band": 2}
    assert res["coverage"] == [
        {"op": "softmax", "provider": "quack", "status": "absent", "cases": 1}
    ]


def test_training_rows_need_1_00x_compile_and_peers_but_only_the_band_against_eager():
    rows = {"rows": 32, "width": 127}
    provs = [_prov("warpgauge", "warpgauge", 10.0), _prov("compile", "compile", 9.9),
             _prov("torch", "pytorch", 9.8), _prov("liger", "peer", 10.5)]  # fmt: skip
    res = G.check_run(_run([_case("add_rms_norm", rows, "warm", provs)], mode="fwd_bwd"))
    assert _checks(res) == {("add_rms_norm/bfloat16/32x127/warm", "compile"): ("train", 0.99)}
    fwd = G.check_run(_run([_case("add_rms_norm", rows, "warm", provs)]))
    assert fwd["misses"] == []  # the same ratios pass the forward suite's band


def test_copy_goal_applies_to_dram_bound_forward_row_ops_only():
    big, small = 200 << 20, 100 << 20
    cases = [
        _case("softmax", {"rows": 4096, "width": 131072}, "cold",
              [_prov("warpgauge", "warpgauge", 500.0, pct=84.0)], big),
        _case("row_sum", {"rows": 8192, "width": 8192}, "cold",
              [_prov("warpgauge", "warpgauge", 500.0, pct=91.0)], big),
        _case("add_rms_norm", {"rows": 64, "width": 4096}, "cold",
              [_prov("warpgauge", "warpgauge", 5.0, pct=20.0)], small),
        _case("add", {"numel": 1 << 28}, "cold",
              [_prov("warpgauge", "warpgauge", 500.0, pct=50.0)], big),
    ]  # fmt: skip
    res = G.check_run(_run(cases))
    assert _checks(res) == {("softmax/bfloat16/4096x131072/cold", "copy ceiling"): ("copy", 84.0)}
    assert res["checked"]["copy"] == 2
    assert G.check_run(_run(cases[:1], mode="fwd_bwd"))["misses"] == []


def test_gemm_floor_and_geometric_mean_against_cublas():
    def gemm(m, ratio):
        return _case("gemm", {"M": m, "N": 4096, "K": 4096}, "cold",
                     [_prov("warpgauge", "warpgauge", 100.0), _prov("cublas", "pytorch", 100.0 * ratio)])  # fmt: skip

    res = G.check_run(_run([gemm(1, 0.96), gemm(2, 0.94), gemm(3, 1.02)]))
    got = _checks(res)
    assert got[("gemm/bfloat16/1x4096x4096/cold", "cublas")] == ("band", 0.96)
    assert got[("gemm/bfloat16/2x4096x4096/cold", "cublas")] == ("band+gemm", 0.94)
    assert res["geomeans"]["cold"] == pytest.approx((0.96 * 0.94 * 1.02) ** (1 / 3))
    assert ("gemm (cold, 3 cases)", "cublas") in got


def test_int4_goals_by_batch():
    def int4(m, n, k, provs, lane="cold"):
        return _case("int4_linear", {"M": m, "N": n, "K": k, "group_size": 128}, lane, provs)

    cases = [
        int4(1, 28672, 8192, [_prov("warpgauge", "warpgauge", 53.0, pct=52.0),
                              _prov("tinygemm", "pytorch", 64.0)]),  # 1.21x: meets 1.2x
        int4(1, 4096, 4096, [_prov("warpgauge", "warpgauge", 11.0, pct=17.0)]),  # 8 MiB weight
        int4(4, 4096, 4096, [_prov("warpgauge", "warpgauge", 10.0),
                             _prov("tinygemm", "pytorch", 11.0)]),  # 1.1x < 1.2x
        int4(64, 4096, 4096, [_prov("warpgauge", "warpgauge", 10.0),
                              _prov("dense", "pytorch", 9.9),  # 0.99: level, but < 1.00
                              _prov("tinygemm", "pytorch", 5.0)]),  # no tinygemm goal at 64
    ]  # fmt: skip
    got = _checks(G.check_run(_run(cases)))
    assert got == {
        ("int4_linear/bfloat16/1x28672x8192x128/cold", "copy ceiling"): ("int4-copy", 52.0),
        ("int4_linear/bfloat16/4x4096x4096x128/cold", "tinygemm"): ("int4-tinygemm", 1.1),
        ("int4_linear/bfloat16/64x4096x4096x128/cold", "dense"): ("int4-dense", 0.99),
        ("int4_linear/bfloat16/64x4096x4096x128/cold", "tinygemm"): ("band", 0.5),
    }


def test_a_committed_run_gives_the_band_misses_suite_misses_counted():
    run = ROOT / "results" / "20261203-171754-default"
    if not run.is_dir():
        pytest.skip("the session-20 default run is not in this checkout")
    res = G.check_run(run)
    band = [m for m in res["misses"] if "band" in m["check"]]
    # experiments/suite_misses.py on this run: 54 ratios below 0.97 in 32 cases
    assert len(band) == 54 and len({m["case_id"] for m in band}) == 32
    assert res["cases"] == 178


def test_cli_writes_json_and_markdown_and_strict_exits_1(tmp_path):
    run = ROOT / "results" / "20261204-182132-default"
    if not run.is_dir():
        pytest.skip("the session-21 add run is not in this checkout")
    j, md = tmp_path / "g.json", tmp_path / "g.md"
    assert G.goals_cli([run], json_out=j, md_out=md) == 0
    data = json.loads(j.read_text())
    assert data[0]["run_id"] == "20261204-182132-default" and data[0]["misses"]
    assert "| add/bfloat16/257/warm | band |" in md.read_text()
    assert G.goals_cli([run], strict=True) == 1
    with pytest.raises(ValueError, match="--band"):
        G.goals_cli([run], band=1.5)
    assert G.goals_cli([tmp_path / "nope"]) == 2


def test_the_committed_goals_page_is_what_its_runs_give():
    page = ROOT / "results" / "goals" / "goals.json"
    if not page.is_file():
        pytest.skip("no committed goals page in this checkout")
    committed = json.loads(page.read_text())
    again = [G.check_run(ROOT / "results" / r["run_id"]) for r in committed]
    assert json.loads(json.dumps(again)) == committed
    md = (ROOT / "results" / "goals" / "goals.md").read_text()
    assert md == G.markdown(again)


def test_the_report_has_the_goal_checks(tmp_path):
    from warpgauge import report as R

    run = ROOT / "results" / "20261204-182132-default"
    if not run.is_dir():
        pytest.skip("the session-21 add run is not in this checkout")
    assert R.report_cli(run, tmp_path / "rep") == 0
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Goal checks" in md and "2 failed checks in 1 of 10 cases" in md
    assert "| add/bfloat16/257/warm | band | compile | **0.956x < 0.97x** |" in md
    passed = _run([_case("add", {"numel": 4096}, "cold", [_prov("warpgauge", "warpgauge", 4.0)])])
    assert R.goal_blocks(passed)[1][1].startswith("Every goal check passed")


def test_the_plot_and_each_case_s_worst_check():
    rows = {"rows": 64, "width": 4096}
    res = G.check_run(_run([_case("softmax", rows, "cold", [
        _prov("warpgauge", "warpgauge", 10.0), _prov("compile", "compile", 12.0),
        _prov("liger", "peer", 9.5)])]))  # fmt: skip
    (w,) = res["worst"]
    assert w["against"] == "liger" and w["attainment"] == pytest.approx(0.95 / 0.97)
    png = G.goals_figure([res, res])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_the_command_line(tmp_path):
    from typer.testing import CliRunner

    from warpgauge.cli import app

    run = ROOT / "results" / "20261204-182132-default"
    if not run.is_dir():
        pytest.skip("the session-21 add run is not in this checkout")
    res = CliRunner().invoke(
        app, ["goals", str(run), "--strict", "--plot", str(tmp_path / "g.png")]
    )
    assert res.exit_code == 1 and "add/bfloat16/257/warm" in res.output
    assert (tmp_path / "g.png").stat().st_size > 10_000
    assert CliRunner().invoke(app, ["goals", str(run)]).exit_code == 0
    bad = CliRunner().invoke(app, ["goals", str(run), "--band", "1.5"])
    assert bad.exit_code == 2 and "--band" in bad.output


def test_a_loss_within_the_spread_is_marked_but_still_a_miss():
    rows = {"rows": 64, "width": 4096}
    wg, lig = _prov("warpgauge", "warpgauge", 10.0), _prov("liger", "peer", 9.9)
    wg["device_time"].update(p10_us=9.8, p90_us=10.3)
    lig["device_time"].update(p10_us=9.7, p90_us=10.0)
    res = G.check_run(_run([_case("softmax", rows, "cold", [wg, lig])], mode="fwd_bwd"))
    (m,) = res["misses"]
    assert m["check"] == "train" and m["tie"] is True
    assert G.describe_value(m) == "0.990x\u2020 < 1.00x"
    lig["device_time"].update(p10_us=9.0, p90_us=9.5)  # apart: a plain loss
    (m,) = G.check_run(_run([_case("softmax", rows, "cold", [wg, lig])], mode="fwd_bwd"))["misses"]
    assert m["tie"] is False
