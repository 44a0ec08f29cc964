"""Summarize a wide_tune.py JSON: per cell, the sweep's rule (the rule when it ran), the current
rule (``RowPlan.for_shape`` now, with the sweep's SM count), the best plan and PyTorch, in TB/s.

    python3 tuning/analyze_wide.py results/rows-wide-h200/wide_r1.json [--rep 1] [--markdown]

"now" is blank when the current rule's plan was not measured in that cell.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics


def short(plan: str) -> str:
    """``RowPlan(kind='coop', block=4096, num_warps=4, ...)`` -> ``coop 4096/4``."""
    if not plan.startswith("RowPlan("):
        return plan
    f = dict(re.findall(r"(\w+)=('?[\w.]+'?)", plan))
    out = f"{f['kind'].strip(chr(39))} {f['block']}/{f['num_warps']}"
    for key, tag in (("programs_per_sm", "p"), ("rows", "r")):
        if f.get(key, "0") not in ("0", "1") or (key == "programs_per_sm" and f[key] != "0"):
            out += f" {tag}{f[key]}"
    if f.get("lane_stats") == "True":
        out += " ls"
    return out


def main():
    from warpgauge.kernels.plans import RowPlan

    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--rep", type=int, default=1)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    with open(a.json) as f:
        d = json.load(f)
    sm = d["sm"]
    cells = {}
    for r in d["results"]:
        if r.get("rep", 1) == a.rep:
            cells.setdefault((r["op"], r["rows"], r["width"]), []).append(r)
    head = ["op", "rows x width", "sweep rule", "now", "best", "torch", "now plan", "best plan"]
    rows = []
    regret = {}
    for (op, rows_, n), rs in cells.items():
        ok = {r["plan"]: r["tbps"] for r in rs if r.get("tbps")}
        mine = {p: t for p, t in ok.items() if p != "torch"}
        if not mine:
            continue
        swept = next((r["tbps"] for r in rs if r["rule"] and r.get("tbps")), None)
        now_plan = repr(RowPlan.for_shape(rows_, n, sm, op))
        now = ok.get(now_plan)
        best_plan = max(mine, key=mine.get)
        if now:
            regret.setdefault(op, []).append(mine[best_plan] / now - 1)
        f = lambda v: f"{v:.2f}" if v else ""  # noqa: E731
        rows.append([op, f"{rows_}x{n}", f(swept), f(now), f(mine[best_plan]), f(ok.get("torch")),
                     short(now_plan), short(best_plan)])  # fmt: skip
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        print(" ".join(f"{h:>14s}" for h in head))
        for r in rows:
            print(" ".join(f"{c:>14s}" for c in r))
    for op, rg in regret.items():
        rg.sort()
        print(f"{op}: {len(rg)} cells, regret of the current rule: mean {statistics.mean(rg):.1%}, "
              f"max {rg[-1]:.1%}, over 5%: {sum(x > 0.05 for x in rg)}")  # fmt: skip


if __name__ == "__main__":
    main()
