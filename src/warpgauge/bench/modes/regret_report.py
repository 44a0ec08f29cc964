"""``warpgauge plans-report RUN [RUN2]``: the regret tables of a plans-mode grid as markdown.

``--write docs/plans.md`` replaces the text between ``<!-- plans-report:begin -->`` and
``<!-- plans-report:end -->`` in that file (or writes the whole file when the markers are
absent); ``--json PATH`` writes the summary (``regret.summarize``).
"""

from __future__ import annotations

from pathlib import Path

from . import regret

BEGIN, END = "<!-- plans-report:begin -->", "<!-- plans-report:end -->"


def _pct(v) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def markdown(summary: dict) -> str:
    runs = ", ".join(f"`{Path(r).name}`" for r in summary["runs"])
    ops = summary["ops"]
    lines = [f"Grid: {summary['n_cells']} cells (operator x rows x width) from {runs}.", ""]
    lines += [
        "## Regret of the rules",
        "",
        "Regret = time of the plan the rule picks / best plan time in the same cell - 1 (forced-"
        "plan times of the same run). Mean and p90 over the cells; cells over 10%.",
        "",
        "| rule | operator | cells | mean (run 1"
        + (" / run 2" if len(summary["runs"]) > 1 else "")
        + ") | p90 | cells over 10% | not measured |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in ops.items():
        cur = e["current"]
        means = " / ".join(_pct(s["mean"]) for s in cur)
        c0 = cur[0]
        lines.append(f"| current (RowPlan.for_shape) | {name} | {c0['n']} | {means} | "
                     f"{_pct(c0['p90'])} | {c0['over_10pct']} | {c0['missing']} |")  # fmt: skip
        ck = e.get("checkout")
        if ck:
            a = ck["all"]
            lines.append(f"| this checkout's rule | {name} | {a['n']} | {_pct(a['mean'])} | "
                         f"{_pct(a['p90'])} | {a['over_10pct']} | {a['missing']} |")  # fmt: skip
        b = e["best_in_sample"]["score"]
        lines.append(f"| region table fitted on all cells (in sample) | {name} | {b['n']} | "
                     f"{_pct(b['mean'])} | {_pct(b['p90'])} | {b['over_10pct']} | {b['missing']} |")  # fmt: skip
    lines += [
        "",
        "## Fitted on half the cells, scored on the other half",
        "",
        "| operator | fitted rule | fit cells | held-out cells | held-out mean | held-out p90 | "
        "held-out over 10% | current rule on the held-out half (mean / p90) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, e in ops.items():
        f = e["fitted"]
        h, ch = f["held_out"], f["current_held_out"]
        lines.append(f"| {name} | {f['describe']} | {f['fit_cells']} | {f['held_out_cells']} | "
                     f"{_pct(h['mean'])} | {_pct(h['p90'])} | {h['over_10pct']} | "
                     f"{_pct(ch['mean'])} / {_pct(ch['p90'])} |")  # fmt: skip
    if any(e.get("checkout") for e in ops.values()):
        lines += ["", "This checkout's rule (`RowPlan.for_shape` as committed now, with the run's "
                  "SM count and L2 size) on each half of the cells (the halves of the fit above):",
                  "", "| operator | half 0: mean / p90 / over 10% | half 1: mean / p90 / over 10% |",
                  "|---|---|---|"]  # fmt: skip
        for name, e in ops.items():
            h0, h1 = e["checkout"]["half0"], e["checkout"]["half1"]
            lines.append(f"| {name} | {_pct(h0['mean'])} / {_pct(h0['p90'])} / "
                         f"{h0['over_10pct']} | {_pct(h1['mean'])} / {_pct(h1['p90'])} / "
                         f"{h1['over_10pct']} |")  # fmt: skip
    if "noise" in summary:
        n = summary["noise"]
        lines += ["", "## Noise", "",
                  f"The same plan in the same cell moved by a median of {_pct(n['median'])} and "
                  f"{_pct(n['p90'])} at the 90th percentile between the two runs ({n['n']} "
                  "plan-cells): a difference of a few points of mean regret is noise."]  # fmt: skip
    lines += ["", "The `rule` provider runs the public function; its time against the forced "
              "copy of the plan it picked (same kernel, same run) measures noise too:", ""]  # fmt: skip
    for name, e in ops.items():
        rv = e["rule_vs_forced"]
        if rv["n"]:
            lines.append(f"- {name}: median {_pct(rv['median'])}, max {_pct(rv['max'])} "
                         f"({rv['n']} cells)")  # fmt: skip
    for name, e in ops.items():
        if not e["split_vs_loop"]:
            continue
        lines += ["", f"## Split against loop by row count: {name}", "",
                  "Median over widths of the best split time / best looped time; in brackets the "
                  "cells where splitting wins (< 0.95), is within 5%, or loses (> 1.05).", "",
                  "| rows | split / looped | wins / level / loses |", "|---|---|---|"]  # fmt: skip
        for r in e["split_vs_loop"]:
            lines.append(f"| {r['rows']} | {r['median']:.2f} | {r['wins']} / {r['level']} / "
                         f"{r['loses']} |")  # fmt: skip
    worst = ops.get("all", {}).get("worst", [])
    if worst:
        lines += ["", "## Worst cells for the current rule", "",
                  "| cell | rule's plan | best plan | regret |", "|---|---|---|---|"]  # fmt: skip
        for w in worst:
            lines.append(f"| {w['cell']} | {w['rule']} | {w['best']} | {_pct(w['regret'])} |")
    return "\n".join(lines) + "\n"


def write_into(path: Path, body: str) -> None:
    from warpgauge.artifacts import atomic_write_bytes

    text = path.read_text(encoding="utf-8") if path.exists() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = f"{head}{BEGIN}\n{body}{END}{tail}"
    else:
        text = body
    atomic_write_bytes(path, text.encode())


def _checkout_choice():
    """The chooser for this checkout's rule, or None where the kernels cannot be imported."""
    try:
        from .plans import checkout_choice
    except ImportError:
        return None
    return checkout_choice


def report_cli(runs, write=None, json_out=None) -> int:
    import sys

    from warpgauge.artifacts import atomic_write_json

    if not runs or len(runs) > 2:
        print("warpgauge plans-report: give one or two plans-mode run directories", file=sys.stderr)
        return 2
    try:
        summary = regret.summarize(runs, checkout=_checkout_choice())
    except (OSError, ValueError, KeyError) as e:
        print(f"warpgauge plans-report: cannot read the runs: {e}", file=sys.stderr)
        return 1
    if not summary["n_cells"]:
        print("warpgauge plans-report: no plan cells in the run (is it a --mode plans run?)",
              file=sys.stderr)  # fmt: skip
        return 1
    body = markdown(summary)
    if json_out:
        atomic_write_json(Path(json_out), summary)
    if write:
        write_into(Path(write), body)
    print(body)
    return 0
