"""warpgauge roofline on recorded artifacts: the roofs (calibration-only and confirmed formats),
each point's binding roof and fraction, which roofs apply to which operator, the plot and the CLI.
The run directory is tests/fixtures/run-synthetic (synthetic numbers, real artifact format)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from warpgauge import artifacts
from warpgauge import roofline as R
from warpgauge.roofline.ceilings import read_roofs
from warpgauge.roofline.points import summarize

RUN = Path(__file__).parent / "fixtures" / "run-synthetic"
REAL = Path(__file__).parents[1] / "results" / "20261130-065525-default"


@pytest.fixture(scope="module")
def loaded():
    return artifacts.load_run(RUN)


def test_calibration_only_roofs_come_from_run_json(loaded):
    roofs = read_roofs(loaded.run, loaded.ceilings)
    assert roofs["memory"].median == pytest.approx(loaded.run["ceilings"]["copy_tbps"])
    assert roofs["memory"].confirmations == 0 and roofs["memory"].min is None
    assert roofs["tensor"]["bfloat16"].median == pytest.approx(648.3560134316481)
    assert "no confirmation" in roofs["memory"].source


def _with_confirmations(run, ceilings, style):
    run, ceilings = copy.deepcopy(run), copy.deepcopy(ceilings)
    copies = [3.9, 4.0, 4.1, 4.05, 3.95, 4.02, 3.98]  # seven confirmation runs, median 4.0
    if style == "bench":  # what bench/ceilings.py writes: a confirmation measurement per ceiling
        for m in list(ceilings["measurements"]):
            c = copy.deepcopy(m)
            c["name"] += "_confirmed"
            if m["kind"] == "copy":
                times = [c["work"]["bytes"] / r / 1e6 for r in copies]
                c["tbps"] = 4.0
            else:
                times = [c["work"]["flops"] / r / 1e6 for r in (640, 650, 660, 655, 645, 648, 652)]
                c["tflops"] = 650.0
            c["extra"] = {"role": "confirmation", "selected": m["name"],
                          "runs": [{"run": i, "median_us": t} for i, t in enumerate(times)]}  # fmt: skip
            m.setdefault("extra", {})["role"] = "calibration"
            ceilings["measurements"].append(c)
        run["ceilings"]["copy_tbps"] = 4.0
        run["ceilings"]["copy_tbps_range"] = [3.9, 4.1]
        run["ceilings"]["mm_tflops"]["bfloat16"] = 650.0
    elif style == "measurement":
        for m in ceilings["measurements"]:
            if m["kind"] == "copy":
                m["confirmations"] = {"median": 4.0, "min": 3.9, "max": 4.1, "n": 7}
            else:
                m["confirmations"] = [{"tflops": v} for v in (640, 650, 660, 655, 645, 648, 652)]
    elif style == "top":
        ceilings["confirmations"] = {"copy": copies, "mm_bfloat16": {"runs": [650.0] * 7}}
    else:  # ranges in run.json only
        run["ceilings"]["copy_tbps_range"] = [3.9, 4.1]
    return run, ceilings


@pytest.mark.parametrize("style", ["bench", "measurement", "top"])
def test_confirmed_roofs_use_the_median_of_seven_runs(loaded, style):
    run, ceil = _with_confirmations(loaded.run, loaded.ceilings, style)
    roofs = read_roofs(run, ceil)
    m = roofs["memory"]
    assert (m.median, m.min, m.max, m.confirmations) == pytest.approx((4.0, 3.9, 4.1, 7))
    assert roofs["tensor"]["bfloat16"].confirmations == 7
    assert roofs["tensor"]["bfloat16"].median == pytest.approx(650.0)


def test_range_without_runs_is_a_band_of_unknown_count(loaded):
    run, ceil = _with_confirmations(loaded.run, loaded.ceilings, "range")
    m = read_roofs(run, ceil)["memory"]
    assert (m.min, m.max, m.confirmations) == (3.9, 4.1, None)


def test_gemm_is_bound_by_the_tensor_roof_and_softmax_by_memory(loaded):
    s = summarize(loaded.run, loaded.cases, read_roofs(loaded.run, loaded.ceilings), "cold")
    g = next(p for p in s["operators"]["gemm"]["points"]
             if p["shape_label"] == "8192x8192x8192" and p["provider"] == "warpgauge")  # fmt: skip
    assert g["intensity"] == pytest.approx(1099511627776 / 402653184)
    assert g["binding_roof"] == "tensor"
    assert g["fraction_of_binding"] == pytest.approx(587.2269098096833 / 648.3560134316481)
    sm = s["operators"]["softmax"]
    assert sm["roofs_applied"] == ["memory"]
    assert "not a roof for softmax" in sm["roofs_not_applicable"]["tensor"]
    assert sm["work_unit"] == "scalar op"
    case = loaded.case("softmax/bfloat16/16384x4096/cold")
    wg = next(p for p in sm["points"] if p["case_id"] == case["case_id"]
              and p["provider"] == "warpgauge")  # fmt: skip
    assert wg["binding_roof"] == "memory" and wg["roof_tensor_tflops"] is None
    pct = next(pr for pr in case["providers"] if pr["name"] == "warpgauge")["derived"]
    assert wg["fraction_of_binding"] == pytest.approx(pct["pct_copy_ceiling"] / 100)


def test_untimed_providers_have_no_point_and_lanes_are_separate(loaded):
    s = summarize(loaded.run, loaded.cases, read_roofs(loaded.run, loaded.ceilings), "cold")
    names = {p["provider"] for p in s["operators"]["gemm"]["points"]}
    assert "triton_tutorial" not in names  # failed its gate
    assert all(p["case_id"].endswith("/cold") for e in s["operators"].values() for p in e["points"])
    assert "quack" not in {p["provider"] for p in s["operators"]["softmax"]["points"]}


def test_a_rate_above_its_roof_is_flagged(loaded):
    warm = summarize(loaded.run, loaded.cases, read_roofs(loaded.run, loaded.ceilings), "warm")
    above = warm["operators"]["softmax"]["above_roof"]
    assert "softmax/bfloat16/16384x4096/warm:warpgauge" in above  # 5.58 > 3.99 TB/s x 1.25
    cold = summarize(loaded.run, loaded.cases, read_roofs(loaded.run, loaded.ceilings), "cold")
    assert cold["operators"]["softmax"]["above_roof"] == []


def test_plot_to_path_figure_and_axes(tmp_path):
    from matplotlib.figure import Figure

    png = tmp_path / "r.png"
    s = R.plot(RUN, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    fig = Figure()
    R.plot(RUN, fig)
    assert len(fig.axes) == len(s["operators"])
    ax = Figure().add_subplot()
    R.plot(RUN, ax)
    assert ax.get_xscale() == "log" and len(ax.collections) > 0


def test_bad_lane_names_the_argument():
    with pytest.raises(ValueError, match="lane must be cold or warm"):
        R.summary(RUN, lane="hot")


def test_cli_writes_json_png_and_keeps_the_run_valid(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    from warpgauge.roofline.cli import roofline_cli

    assert roofline_cli(run) == 0
    rec = json.loads((run / "roofline" / "roofline-cold.json").read_text())
    assert rec["kind"] == "roofline" and rec["ridge_flop_per_byte"]["bfloat16"] > 100
    assert (run / "roofline" / "roofline-cold.png").is_file()
    assert artifacts.validate_run(run) == []


def test_not_a_run_directory(tmp_path, capsys):
    from warpgauge.roofline.cli import roofline_cli

    assert roofline_cli(tmp_path) == 2
    assert "no run.json" in capsys.readouterr().err


@pytest.mark.skipif(not REAL.is_dir(), reason="committed H200 run not present")
def test_committed_h200_run_every_operator_has_a_binding_roof():
    s = R.summary(REAL)
    assert set(s["operators"]) == {"softmax", "add_rms_norm", "row_sum", "add", "gemm",
                                   "int4_linear"}  # fmt: skip
    for op, e in s["operators"].items():
        assert e["points"], op
        assert all(p["binding_roof"] for p in e["points"]), op
    assert s["operators"]["gemm"]["best_warpgauge"]["binding_roof"] == "tensor"
    assert s["operators"]["row_sum"]["best_warpgauge"]["binding_roof"] == "memory"


def test_markdown_names_roofs_and_binding():
    md = R.markdown(RUN)
    assert "calibration only" in md and "| gemm | memory, tensor |" in md
    assert "| tensor |" in md and "not a roof for softmax" in md
