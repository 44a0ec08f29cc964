"""Figures that answer "is warpgauge faster than what I would use instead?", from artifacts alone.

``speedup_figure(run, op, colors)`` draws, per dtype, the speedup of warpgauge against the best
PyTorch provider and against each peer (other / warpgauge device-time median, log2 axis, bars
from the p10-p90 intervals), with shapes as categories in suite order (``config.groups``): no
shape overprints another and no line joins unrelated shapes. Shapes that differ in batch or M
(INT4 decode at M = 1 and M = 16) get separate panels. Launch-bound shapes (the requested work
at the run's own ceiling would take under ``LAUNCH_BOUND_US``) get a latency panel as well:
device time (filled) and host + device time per eager call (hollow) of every provider, log axis.

matplotlib (Agg, no display) is imported inside the functions; PNGs carry no version metadata,
so the same matplotlib renders the same bytes.
"""

from __future__ import annotations

import io
import math

from .artifacts import BEST_PYTORCH_FAMILIES, Run, best_pytorch

LANE = "cold"  # the headline lane; warm is a cache diagnostic
LAUNCH_BOUND_US = 5.0  # ideal time below this: the launch, not the work, sets the time
BEST_COLOR = "#1f77b4"
PEER_COLORS = ["#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
PROVIDER_COLORS = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
    "#17becf", "#7f7f7f", "#bcbd22", "#393b79", "#637939", "#8c6d31", "#843c39",
]  # fmt: skip
FAMILY_RANK = {"warpgauge": 0, "pytorch": 1, "compile": 2, "peer": 3}


def is_flop_bound(op: str) -> bool:
    """Operators reported in TFLOP/s (gemm); every other operator in TB/s of requested bytes."""
    return op == "gemm" or op.startswith("gemm_")


def ok(pr: dict | None) -> bool:
    return pr is not None and pr["status"] == "ok" and pr.get("device_time") is not None


def providers_of(cases: list[dict]) -> list[tuple[str, str, str]]:
    """(name, label, family) of every provider in ``cases``, warpgauge first, then by family."""
    seen: dict[str, tuple[str, str, str]] = {}
    for c in cases:
        for pr in c["providers"]:
            seen.setdefault(pr["name"], (pr["name"], pr["label"], pr["family"]))
    return sorted(seen.values(), key=lambda p: (FAMILY_RANK.get(p[2], 9), p[0]))


def provider_colors(run: Run) -> dict[str, str]:
    """One color per provider name for the whole report (warpgauge's first one in red)."""
    return {
        name: PROVIDER_COLORS[i % len(PROVIDER_COLORS)]
        for i, (name, _, _) in enumerate(providers_of(run.cases))
    }


def headline(cases: list[dict]) -> str | None:
    """The warpgauge provider the speedups are about (the first of family warpgauge)."""
    return next((n for n, _, f in providers_of(cases) if f == "warpgauge"), None)


def suite_order(run: Run, op: str, lane: str = LANE) -> list[dict]:
    """The cases of ``op`` in ``lane``, in the order the suite lists them (config.groups),
    then any others by id."""
    cases = [c for c in run.cases if c["op"] == op and c["lane"] == lane]
    groups = run.run.get("config", {}).get("groups") or []
    rank = {(g.get("op"), g.get("dtype"), g.get("shape_label")): i for i, g in enumerate(groups)}

    def key(c):
        return rank.get((c["op"], c["dtype"], c["shape_label"]), len(rank)), c["case_id"]

    return sorted(cases, key=key)


def panels(cases: list[dict]) -> list[tuple[str, list[dict]]]:
    """Split cases into panels where batch or M differs: when every shape has an ``M`` and a
    few (2-4) distinct values of it repeat across shapes; else one panel."""
    ms = [c["shape"].get("M") for c in cases]
    distinct = list(dict.fromkeys(ms))
    if None in ms or not 1 < len(distinct) <= 4 or len(distinct) >= len(cases):
        return [("", cases)]
    return [(f"M = {m}", [c for c in cases if c["shape"].get("M") == m]) for m in distinct]


def ideal_us(run: Run, case: dict) -> float | None:
    """Time the case's requested work takes at the run's measured ceiling (µs), or None."""
    ceil = run.run.get("ceilings", {})
    if is_flop_bound(case["op"]):
        rate = (ceil.get("mm_tflops") or {}).get(case["dtype"])
        amount = case["work"]["flops"]
    else:
        rate, amount = ceil.get("copy_tbps"), case["work"]["bytes"]
    return amount / rate / 1e6 if rate and amount else None


def launch_bound(run: Run, cases: list[dict]) -> list[dict]:
    """The cases whose ideal time at the measured ceiling is under LAUNCH_BOUND_US."""
    return [c for c in cases if (t := ideal_us(run, c)) is not None and t < LAUNCH_BOUND_US]


def ratio_with_bars(other: dict, mine: dict) -> tuple[float, float, float]:
    """(other / mine median ratio, lower bar, upper bar) from the p10-p90 intervals."""
    r = other["median_us"] / mine["median_us"]
    lo = other["p10_us"] / max(mine["p90_us"], 1e-12)
    hi = other["p90_us"] / max(mine["p10_us"], 1e-12)
    return r, max(r - min(lo, r), 0.0), max(max(hi, r) - r, 0.0)


def speedup_series(cases: list[dict]) -> list[tuple[str, str, list]]:
    """(label, color, points) for "best PyTorch" and each peer; a point is (index, ratio, lo,
    hi) at the case's position, absent where either side was not timed."""
    wg = headline(cases)
    if wg is None:
        return []
    series: list[tuple[str, str, list]] = []
    best_points = []
    for i, c in enumerate(cases):
        me = next((p for p in c["providers"] if p["name"] == wg), None)
        best = best_pytorch(c)
        if ok(me) and best is not None:
            best_points.append((i, *ratio_with_bars(best["device_time"], me["device_time"])))
    if best_points:
        series.append(("best PyTorch provider", BEST_COLOR, best_points))
    peers = [p for p in providers_of(cases) if p[2] not in (*BEST_PYTORCH_FAMILIES, "warpgauge")]
    for k, (name, label, _) in enumerate(peers):
        pts = []
        for i, c in enumerate(cases):
            prs = {p["name"]: p for p in c["providers"]}
            if ok(prs.get(wg)) and ok(prs.get(name)):
                pts.append((i, *ratio_with_bars(prs[name]["device_time"], prs[wg]["device_time"])))
        if pts:
            series.append((label, PEER_COLORS[k % len(PEER_COLORS)], pts))
    return series


NICE_RATIOS = (1 / 16, 1 / 8, 1 / 4, 1 / 3, 1 / 2, 2 / 3, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0,
               6.0, 8.0, 16.0, 32.0)  # fmt: skip


def _log2_ticks(ax, values: list[float]) -> None:
    from matplotlib.ticker import FixedLocator, NullLocator

    lo = min([*values, 1.0]) / 1.08
    hi = max([*values, 1.0]) * 1.08
    lo, hi = min(lo, 0.8), max(hi, 1.25)
    ax.set_ylim(lo, hi)
    ticks = [t for t in NICE_RATIOS if lo <= t <= hi]
    if len(ticks) > 9:  # a wide range: powers of two only
        ticks = [t for t in ticks if math.log2(t).is_integer()]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_yticklabels([f"{t:.2g}×" for t in ticks])


def _categories(ax, cases: list[dict]) -> None:
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([c["shape_label"] for c in cases], rotation=35, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(cases) - 0.4)


def _speedup_panel(ax, cases: list[dict], title: str) -> list[tuple[str, object]]:
    series = speedup_series(cases)
    handles = []
    n = max(len(series), 1)
    width = 0.6
    values = []
    for k, (label, color, pts) in enumerate(series):
        off = (k - (n - 1) / 2) * (width / n)  # side by side within a category
        xs = [i + off for i, *_ in pts]
        ys = [r for _, r, _, _ in pts]
        h = ax.errorbar(
            xs,
            ys,
            yerr=[[lo for *_, lo, _ in pts], [hi for *_, hi in pts]],
            fmt="o" if k == 0 else "D",
            color=color,
            markersize=5,
            capsize=2,
            linestyle="none",
            label=label,
        )
        handles.append((label, h))
        values += [y - lo for _, y, lo, _ in pts] + [y + hi for _, y, _, hi in pts]
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_yscale("log", base=2)
    _log2_ticks(ax, [v for v in values if v > 0] or [1.0])
    _categories(ax, cases)
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    ax.text(0.005, 0.99, "↑ warpgauge faster", transform=ax.transAxes, fontsize=7, va="top")
    ax.text(0.005, 0.01, "↓ warpgauge slower", transform=ax.transAxes, fontsize=7, va="bottom")
    return handles


def _latency_panel(ax, cases: list[dict], colors: dict[str, str], title: str):
    handles = []
    provs = providers_of(cases)
    n = max(len(provs), 1)
    for k, (name, label, _) in enumerate(provs):
        off = (k - (n - 1) / 2) * (0.7 / n)
        dev, host = [], []
        for i, c in enumerate(cases):
            pr = next((p for p in c["providers"] if p["name"] == name), None)
            if ok(pr):
                dev.append((i + off, pr["device_time"]["median_us"]))
                if pr.get("host_time"):
                    host.append((i + off, pr["host_time"]["median_us"]))
        if not dev:
            continue
        h = ax.plot(*zip(*dev), "o", color=colors.get(name, "gray"), markersize=5, label=label)[0]
        handles.append((label, h))
        if host:
            ax.plot(*zip(*host), "o", markerfacecolor="none", color=colors.get(name, "gray"))
    ax.set_yscale("log")
    _categories(ax, cases)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel("µs per call (log): filled device, hollow host + device", fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return handles


def speedup_figure(run: Run, op: str, colors: dict[str, str]) -> bytes | None:
    """The PNG (bytes) for ``op``: per dtype a row of speedup panels (one per batch/M value)
    and, where the op has launch-bound shapes, a latency panel. None when the op has no
    warpgauge provider timed in the cold lane."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cases = suite_order(run, op)
    if not cases or headline(cases) is None:
        return None
    dtypes = list(dict.fromkeys(c["dtype"] for c in cases))
    rows = []
    for dt in dtypes:
        mine = [c for c in cases if c["dtype"] == dt]
        cols = [("speedup", label, cs) for label, cs in panels(mine)]
        fast = launch_bound(run, mine)
        if fast:
            cols.append(("latency", "launch-bound shapes", fast))
        rows.append((dt, cols))
    ncols = max(len(cols) for _, cols in rows)
    widths = [3] * ncols  # categories per column, at least 3 so titles fit
    for _, cols in rows:
        for j, (_, _, cs) in enumerate(cols):
            widths[j] = max(widths[j], len(cs))
    fig = Figure(
        figsize=(min(3.0 + 0.55 * sum(widths) + 3.2, 19), 3.9 * len(rows)),
        dpi=100,
        layout="constrained",
    )
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(rows), ncols, squeeze=False, width_ratios=widths)
    legend: dict[str, object] = {}
    for i, (dt, cols) in enumerate(rows):
        for j in range(ncols):
            ax = axes[i][j]
            if j >= len(cols):
                ax.set_visible(False)
                continue
            kind, label, cs = cols[j]
            title = dt + (f", {label}" if label else "")
            if kind == "speedup":
                hs = _speedup_panel(ax, cs, f"{title}: speedup")
                if j == 0:
                    ax.set_ylabel("speedup of warpgauge (log2)", fontsize=9)
                for name, h in hs:
                    legend.setdefault(f"vs {name}", h)
            else:
                for name, h in _latency_panel(ax, cs, colors, f"{dt}: {label}"):
                    legend.setdefault(name, h)
    fig.suptitle(
        f"{op}: warpgauge against the best PyTorch provider and each peer, {LANE} L2 "
        "(other / warpgauge device time; > 1: warpgauge faster)",
        fontsize=11,
    )
    if legend:
        fig.legend(
            list(legend.values()),
            list(legend.keys()),
            loc="outside right center",
            fontsize=8,
            frameon=False,
        )
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()
