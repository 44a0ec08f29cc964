"""The open issues' goals, checked against a run's artifacts: every suite case that misses one.

``warpgauge goals RUN [RUN ...]`` reads committed runs (no GPU) and lists each check that fails,
with its ratio or rate, so a session's closing note (and a reader) gets the misses from the
evidence itself instead of by hand. The checks, each with the floor it enforces:

=================  =========================================================================
``band``           every op, lane and mode: warpgauge at least ``1 - band`` (0.97) times as fast
                   as every other provider that was timed (PyTorch, ``torch.compile``, peers):
                   "never slower, within a 3% band counts as level" (rows issue, goal 2)
``train``          forward+backward runs of softmax and add_rms_norm: at least 1.00x every
                   ``torch.compile`` mode and every peer (rows issue, goal 3)
``copy``           forward softmax, add_rms_norm and row_sum with at least 128 MiB of
                   compulsory traffic: at least 90% of the run's measured copy ceiling (goal 1)
``gemm``           gemm, every mode: at least 0.95x cuBLAS (GEMM issue); ``gemm-geomean`` the
                   geometric mean over a lane's cases at least 1.00x
``int4-copy``      int4_linear batch 1, weight of 32 MiB or more, cold lane: at least 85% of
                   the copy ceiling on compulsory bytes
``int4-tinygemm``  int4_linear batch 1-16: at least 1.2x tinygemm
``int4-dense``     int4_linear batch 17-256: at least 1.00x dense BF16 ``F.linear``
=================  =========================================================================

A provider that was not timed (absent, failed its gate, errored) cannot miss a ratio check; the
report's coverage part counts them per op, because a goal against a peer that never ran is not
met, only unjudged (the rows issue asks for QuACK in the run).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from .artifacts import Run, atomic_write_bytes, load_run
from .export import records
from .report_tables import _overlap as intervals_overlap

BAND = 0.03
ROW_OPS = ("softmax", "add_rms_norm", "row_sum")
TRAIN_OPS = ("softmax", "add_rms_norm")
TRAIN_FAMILIES = ("compile", "peer")
COPY_FRACTION = 90.0
COPY_MIN_BYTES = 128 << 20
GEMM_FLOOR = 0.95
INT4_COPY_FRACTION = 85.0
INT4_COPY_MIN_WEIGHT = 32 << 20
INT4_TINYGEMM_FLOOR = 1.2
INT4_DENSE_FLOOR = 1.0
WARPGAUGE = "warpgauge"


@dataclass(frozen=True)
class Miss:
    """One failed check: ``value`` is a ratio (other provider's median / warpgauge's: > 1 means
    warpgauge is faster) or, for the copy checks, warpgauge's percent of the copy ceiling."""

    run_id: str
    case_id: str
    op: str
    lane: str
    check: str
    provider: str
    value: float | None
    goal: float
    wg_us: float | None
    other_us: float | None
    pct_copy: float | None
    tie: bool = False  # the two providers' p10-p90 intervals overlap: a loss within the spread


def _mode(run: Run) -> str:
    cfg = run.run.get("config") or {}
    return str(cfg.get("mode") or "forward")


def _ok(row: dict) -> bool:
    return row["status"] == "ok" and row["device_median_us"] is not None


def _overlap(a: dict, b: dict) -> bool:
    """Whether two export rows' device-time p10-p90 intervals overlap (the report's test, on the
    rows' column names; False when one is missing)."""
    iv = [{"p10_us": r.get("device_p10_us"), "p90_us": r.get("device_p90_us")} for r in (a, b)]
    return all(v is not None for d in iv for v in d.values()) and intervals_overlap(*iv)


def _floors(mode: str, row: dict, other: dict, band: float) -> list[tuple[str, float]]:
    """The ratio floors that apply to warpgauge against ``other`` in this row's case."""
    op, prov, fam = row["op"], other["provider"], other["family"]
    floors = [("band", 1.0 - band)]
    if mode == "fwd_bwd" and op in TRAIN_OPS and fam in TRAIN_FAMILIES:
        floors.append(("train", 1.0))
    if op == "gemm" and prov == "cublas":
        floors.append(("gemm", GEMM_FLOOR))
    if op == "int4_linear":
        m = row["shape_M"] or 0
        if prov == "tinygemm" and 1 <= m <= 16:
            floors.append(("int4-tinygemm", INT4_TINYGEMM_FLOOR))
        if prov == "dense" and 17 <= m <= 256:
            floors.append(("int4-dense", INT4_DENSE_FLOOR))
    return floors


def check_run(run: Run | str | os.PathLike, band: float = BAND) -> dict:
    """Every goal check of one run: ``misses`` (a list of :class:`Miss` as dicts), ``geomeans``
    (gemm against cuBLAS per lane), ``coverage`` (providers not timed, per op and status) and
    ``checked`` (how many comparisons each check made), ``worst`` (per case the check furthest
    from its goal, passed or not: ``attainment`` = value / goal, below 1 a miss)."""
    run = run if isinstance(run, Run) else load_run(run)
    mode = _mode(run)
    by_case: dict[str, list[dict]] = defaultdict(list)
    for r in records(run):
        by_case[r["case_id"]].append(r)
    misses: list[Miss] = []
    checked: Counter = Counter()
    coverage: Counter = Counter()
    gemm_ratios: dict[str, list[float]] = defaultdict(list)
    worst: list[dict] = []
    for case_id, rows in by_case.items():
        wg = next((r for r in rows if r["provider"] == WARPGAUGE), None)
        wg = wg or next((r for r in rows if r["family"] == WARPGAUGE), None)
        for r in rows:
            if r is not wg and r["status"] != "ok":
                coverage[(r["op"], r["provider"], r["status"])] += 1
        if wg is None or not _ok(wg):
            if wg is not None:
                coverage[(wg["op"], wg["provider"], wg["status"])] += 1
            continue
        t = wg["device_median_us"]
        pct = wg.get("pct_copy_ceiling")

        def miss(check, prov, value, goal, other_us=None, tie=False, _c=case_id, _wg=wg, _t=t,
                 _pct=pct):  # fmt: skip
            misses.append(Miss(run.run_id, _c, _wg["op"], _wg["lane"], check, prov,
                               value, goal, _t, other_us, _pct, tie))  # fmt: skip

        op = wg["op"]
        low: list[tuple[float, str, str]] = []  # (value / goal, check, against) of this case
        for other in rows:
            if other is wg or other["family"] == WARPGAUGE or not _ok(other):
                continue
            ratio = other["device_median_us"] / t
            floors = _floors(mode, wg, other, band)
            for name, goal in floors:
                checked[name] += 1
                low.append((ratio / goal, name, other["provider"]))
            failed = [(name, goal) for name, goal in floors if ratio < goal]
            if failed:
                goal = max(g for _, g in failed)
                names = "+".join(n for n, _ in failed)
                miss(names, other["provider"], ratio, goal, other["device_median_us"],
                     _overlap(wg, other))  # fmt: skip
            if op == "gemm" and other["provider"] == "cublas":
                gemm_ratios[wg["lane"]].append(ratio)
        if op in ROW_OPS and mode != "fwd_bwd" and (wg["bytes"] or 0) >= COPY_MIN_BYTES:
            checked["copy"] += 1
            low.append(((pct or 0.0) / COPY_FRACTION, "copy", "copy ceiling"))
            if pct is None or pct < COPY_FRACTION:
                miss("copy", "copy ceiling", pct, COPY_FRACTION)
        if op == "int4_linear" and mode != "fwd_bwd" and wg["lane"] == "cold":
            n, k = wg["shape_N"] or 0, wg["shape_K"] or 0
            if wg["shape_M"] == 1 and n * k // 2 >= INT4_COPY_MIN_WEIGHT:
                checked["int4-copy"] += 1
                low.append(((pct or 0.0) / INT4_COPY_FRACTION, "int4-copy", "copy ceiling"))
                if pct is None or pct < INT4_COPY_FRACTION:
                    miss("int4-copy", "copy ceiling", pct, INT4_COPY_FRACTION)
        if low:
            a, name, against = min(low)
            worst.append({"case_id": case_id, "op": op, "lane": wg["lane"], "attainment": a,
                          "check": name, "against": against})  # fmt: skip
    geomeans = {
        lane: math.exp(sum(math.log(x) for x in xs) / len(xs))
        for lane, xs in sorted(gemm_ratios.items())
    }
    for lane, g in geomeans.items():
        checked["gemm-geomean"] += 1
        if g < 1.0:
            misses.append(Miss(run.run_id, f"gemm ({lane}, {len(gemm_ratios[lane])} cases)",
                               "gemm", lane, "gemm-geomean", "cublas", g, 1.0, None, None,
                               None))  # fmt: skip
    misses.sort(key=lambda m: (m.op, m.case_id, m.value if m.value is not None else -1.0))
    return {
        "run_id": run.run_id,
        "mode": mode,
        "band": band,
        "cases": len(by_case),
        "checked": dict(sorted(checked.items())),
        "misses": [asdict(m) for m in misses],
        "geomeans": geomeans,
        "worst": worst,
        "coverage": [
            {"op": op, "provider": p, "status": s, "cases": n}
            for (op, p, s), n in sorted(coverage.items())
        ],
    }


def _fmt(x: float | None, nd: int = 2) -> str:
    return "" if x is None else f"{x:.{nd}f}"


def describe_value(m: dict) -> str:
    """A failed check's value against its goal, e.g. ``0.950x < 0.97x`` or ``72.4% < 90%``."""
    if m["check"] in ("copy", "int4-copy"):
        shown = f"{_fmt(m['value'], 1)}%" if m["value"] is not None else "no rate"
        return f"{shown} < {m['goal']:.0f}%"
    tie = "†" if m.get("tie") else ""
    return f"{m['value']:.3f}x{tie} < {m['goal']:.2f}x"


def markdown(results: list[dict]) -> str:
    """The checks of one or more runs as a markdown page."""
    out = ["# Goal checks\n"]
    out.append("Generated by `warpgauge goals` from the runs' artifacts (checks: "
               "`python -m warpgauge goals --help`). Ratio = other provider's median / "
               "warpgauge's (> 1: warpgauge faster); †: the two p10-p90 intervals overlap (a "
               "loss within the run's spread, still below the goal).\n")  # fmt: skip
    for res in results:
        ms = res["misses"]
        cases = sorted({m["case_id"] for m in ms})
        out.append(f"## {res['run_id']} ({res['mode']}, {res['cases']} cases)\n")
        checked = ", ".join(f"{k} {v}" for k, v in res["checked"].items())
        out.append(
            f"Failed checks: {len(ms)}, in {len(cases)} cases; comparisons made: {checked}.\n"
        )
        if res["geomeans"]:
            g = ", ".join(f"{lane} {v:.3f}x" for lane, v in res["geomeans"].items())
            out.append(f"gemm geometric mean against cuBLAS: {g}.\n")
        if ms:
            out.append("| case | check | against | value | warpgauge us | other us | % copy |")
            out.append("|---|---|---|---|---|---|---|")
            for m in ms:
                out.append(f"| {m['case_id']} | {m['check']} | {m['provider']} | {describe_value(m)} | "
                           f"{_fmt(m['wg_us'])} | {_fmt(m['other_us'])} | "
                           f"{_fmt(m['pct_copy'], 1)} |")  # fmt: skip
            out.append("")
        if res["coverage"]:
            out.append("Providers not timed (their ratio checks are unjudged, not met):\n")
            out.append("| op | provider | status | cases |")
            out.append("|---|---|---|---|")
            for c in res["coverage"]:
                out.append(f"| {c['op']} | {c['provider']} | {c['status']} | {c['cases']} |")
            out.append("")
    return "\n".join(out) + "\n"


def goals_figure(results: list[dict]) -> bytes:
    """A PNG: per run, each case's check furthest from its goal (value / goal, log2), by op and
    lane; below the line at 1 the case misses a goal."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 2.9 * len(results) + 0.6), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(results), 1, squeeze=False)[:, 0]
    for ax, res in zip(axes, results, strict=True):
        ops = list(dict.fromkeys(w["op"] for w in res["worst"]))
        for i, op in enumerate(ops):
            for lane, dx, marker in (("cold", -0.14, "o"), ("warm", 0.14, "^")):
                ys = sorted(w["attainment"] for w in res["worst"]
                            if w["op"] == op and w["lane"] == lane)  # fmt: skip
                xs = [i + dx + 0.18 * ((j * 0.618) % 1 - 0.5) for j in range(len(ys))]
                colors = ["#c0392b" if y < 1 else "#2e86c1" for y in ys]
                ax.scatter(xs, ys, s=18, c=colors, marker=marker, alpha=0.8, linewidths=0)
        for lane, marker in (("cold", "o"), ("warm", "^")):
            ax.scatter([], [], s=18, c="#777", marker=marker, label=f"{lane} lane")
        ax.axhline(1.0, color="#333", lw=1)
        ax.set_yscale("log", base=2)
        att = [w["attainment"] for w in res["worst"] if w["attainment"] > 0] or [1.0]
        ax.set_ylim(min(0.7, min(att) / 1.1), max(1.6, max(att) * 1.1))
        ax.set_xticks(range(len(ops)), ops, fontsize=9)
        ax.set_xlim(-0.6, len(ops) - 0.4)
        misses = sum(1 for w in res["worst"] if w["attainment"] < 1)
        ax.set_title(f"{res['run_id']} ({res['mode']}): {misses} of {len(res['worst'])} cases "
                     "below a goal (red)", fontsize=10)  # fmt: skip
        ax.set_ylabel("value / goal (log2)", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
    fig.suptitle("warpgauge goals: each case's check furthest from its goal (o cold, ^ warm)",
                 fontsize=11)  # fmt: skip
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def goals_cli(runs: list[str | os.PathLike], band: float = BAND, json_out=None, md_out=None,
              strict: bool = False, top: int = 40, plot_out=None) -> int:  # fmt: skip
    """``warpgauge goals``: print the misses (the first ``top`` per run), write ``--json`` /
    ``--markdown`` when asked. Exit 0, or 1 with ``strict`` when any check failed; 2 when a
    run cannot be read."""
    from rich.console import Console
    from rich.table import Table

    if not 0 <= band < 1:
        raise ValueError(f"--band {band}: give a fraction in [0, 1), e.g. 0.03 for 3%")
    results = []
    for r in runs:
        try:
            results.append(check_run(r, band))
        except (OSError, ValueError, KeyError, TypeError) as e:
            print(f"warpgauge goals: cannot read {r}: {type(e).__name__}: {e}")
            return 2
    con = Console(highlight=False, width=None if sys.stdout.isatty() else 150)
    for res in results:
        ms = res["misses"]
        t = Table(title=f"{res['run_id']} ({res['mode']}): failed checks {len(ms)}, in "
                        f"{len({m['case_id'] for m in ms})} of {res['cases']} cases")  # fmt: skip
        for col in ("case", "check", "against", "value", "wg us", "other us"):
            t.add_column(col)
        for m in ms[:top]:
            t.add_row(m["case_id"], m["check"], m["provider"], describe_value(m), _fmt(m["wg_us"]),
                      _fmt(m["other_us"]))  # fmt: skip
        con.print(t if top > 0 else t.title)
        if 0 < top < len(ms):
            con.print(f"... and {len(ms) - top} more (--json / --markdown have them all)")
        untimed = [c for c in res["coverage"] if c["provider"] in ("quack", "liger", "gemlite")]
        for c in untimed:
            con.print(f"[yellow]{c['op']}: {c['provider']} {c['status']} in {c['cases']} "
                      "cases: its checks are unjudged[/yellow]")  # fmt: skip
    if json_out:
        data = json.dumps(results, indent=1, allow_nan=False) + "\n"
        atomic_write_bytes(Path(json_out), data.encode("utf-8"))
        print(json_out)
    if md_out:
        atomic_write_bytes(Path(md_out), markdown(results).encode("utf-8"))
        print(md_out)
    if plot_out:
        atomic_write_bytes(Path(plot_out), goals_figure(results))
        print(plot_out)
    return 1 if strict and any(res["misses"] for res in results) else 0
