"""Drawing the roofline with matplotlib (Agg): one panel per operator, or every operator on one
Axes. Only roofs that apply to an operator are drawn in its panel; the others are named in a note.
"""

from __future__ import annotations

import math

OP_ORDER = ("softmax", "add_rms_norm", "row_sum", "add", "gemm", "int4_linear")
FAMILY_STYLE = {  # family -> (marker, colour)
    "warpgauge": ("*", "#d62728"),
    "pytorch": ("o", "#1f77b4"),
    "compile": ("s", "#2ca02c"),
    "peer": ("^", "#9467bd"),
}
OP_COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")


def _xrange(points) -> tuple[float, float]:
    xs = [p["intensity"] for p in points if p["intensity"] > 0]
    if not xs:
        return 0.01, 1000.0
    return 10 ** math.floor(math.log10(min(xs)) - 0.5), 10 ** math.ceil(math.log10(max(xs)) + 0.5)


def _memory_roof(ax, roof: dict, lo: float, hi: float, label: bool = True) -> None:
    import numpy as np

    xs = np.logspace(math.log10(lo), math.log10(hi), 64)
    ax.plot(xs, roof["median"] * xs, color="black", lw=1.4,
            label=f"memory {roof['median']:.2f} TB/s" if label else None)  # fmt: skip
    if roof.get("min") is not None and roof.get("max") is not None:
        ax.fill_between(xs, roof["min"] * xs, roof["max"] * xs, color="black", alpha=0.12, lw=0)


def _tensor_roof(ax, dtype: str, roof: dict, lo: float, hi: float, style: str) -> None:
    ax.hlines(roof["median"], lo, hi, colors="#555555", linestyles=style, lw=1.2,
              label=f"tensor {dtype} {roof['median']:.0f} TFLOP/s")  # fmt: skip
    if roof.get("min") is not None and roof.get("max") is not None:
        ax.fill_between([lo, hi], roof["min"], roof["max"], color="#555555", alpha=0.1, lw=0)


def _draw_points(ax, points, colour_by_op: dict | None = None) -> None:
    seen = set()
    for p in points:
        marker, colour = FAMILY_STYLE.get(p["family"], ("o", "#7f7f7f"))
        if colour_by_op is not None:
            colour = colour_by_op[p["op"]]
            key = (p["op"], p["family"] == "warpgauge")
            label = f"{p['op']} ({'warpgauge' if key[1] else 'others'})"
            marker = "*" if key[1] else "o"
        else:
            key = p["family"]
            label = p["family"]
        size = 90 if marker == "*" else 28
        edge = "red" if p["above_roof"] else "none"
        ax.scatter([p["intensity"]], [p["achieved_tflops"]], marker=marker, s=size, c=colour,
                   alpha=0.85, edgecolors=edge, label=None if key in seen else label)  # fmt: skip
        seen.add(key)


def draw_panel(ax, op: str, entry: dict, roofs: dict) -> None:
    pts = entry["points"]
    lo, hi = _xrange(pts)
    if roofs.get("memory"):
        _memory_roof(ax, roofs["memory"], lo, hi)
    if "tensor" in entry["roofs_applied"]:
        for i, (dt, r) in enumerate(sorted(roofs.get("tensor", {}).items())):
            if any(p["dtype"] == dt for p in pts):
                _tensor_roof(ax, dt, r, lo, hi, ("--", ":")[i % 2])
    _draw_points(ax, pts)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_title(op, fontsize=10)
    ax.set_xlabel(f"{entry['work_unit']}s per requested byte", fontsize=8)
    ax.set_ylabel(f"T{entry['work_unit'].replace('scalar op', 'op')}/s", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, which="both", alpha=0.2)
    if entry["roofs_not_applicable"].get("tensor"):
        ax.text(0.02, 0.98, "tensor-core roof: not applicable", transform=ax.transAxes,
                fontsize=7, va="top", color="#555555")  # fmt: skip
    ax.legend(fontsize=6, loc="lower right")


def draw_combined(ax, summary: dict) -> None:
    """Every operator on one Axes: one colour per operator, stars for warpgauge."""
    pts = [p for e in summary["operators"].values() for p in e["points"]]
    lo, hi = _xrange(pts)
    roofs = summary["roofs"]
    if roofs.get("memory"):
        _memory_roof(ax, roofs["memory"], lo, hi)
    for i, (dt, r) in enumerate(sorted(roofs.get("tensor", {}).items())):
        _tensor_roof(ax, dt, r, lo, hi, ("--", ":")[i % 2])
    ops = [o for o in OP_ORDER if o in summary["operators"]] + sorted(
        set(summary["operators"]) - set(OP_ORDER)
    )
    colours = {o: OP_COLOURS[i % len(OP_COLOURS)] for i, o in enumerate(ops)}
    _draw_points(ax, pts, colours)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("FLOPs (softmax: scalar ops) per requested byte")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"roofline, run {summary['run_id']} ({summary['lane']} lane); tensor roofs "
                 "apply to gemm and int4_linear only", fontsize=9)  # fmt: skip
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(fontsize=6, loc="lower right", ncol=2)


def draw_grid(fig, summary: dict) -> None:
    ops = [o for o in OP_ORDER if o in summary["operators"]] + sorted(
        set(summary["operators"]) - set(OP_ORDER)
    )
    n = max(len(ops), 1)
    cols = min(3, n)
    rows = math.ceil(n / cols)
    for i, op in enumerate(ops):
        ax = fig.add_subplot(rows, cols, i + 1)
        draw_panel(ax, op, summary["operators"][op], summary["roofs"])
    mem = summary["roofs"].get("memory") or {}
    band = ("shaded: min-max of the roof's confirmation runs" if mem.get("min") is not None
            else "roofs are single calibration medians: no confirmation runs")  # fmt: skip
    fig.suptitle(f"warpgauge roofline: run {summary['run_id']}, {summary['lane']} lane "
                 f"(requested bytes; {band}; red edge: above its roof)", fontsize=10)  # fmt: skip
    fig.tight_layout()


def new_figure(summary: dict):
    from matplotlib.figure import Figure

    n = max(len(summary["operators"]), 1)
    rows = math.ceil(n / min(3, n))
    return Figure(figsize=(13, 4.2 * rows))
