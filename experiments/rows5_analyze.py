"""Summaries of a rows5 sweep (experiments/rows5_sweep.py JSON): per cell the rule, the best plan
and PyTorch; per plan its regret (time / the cell's best time - 1) over the cells it ran in; and
the regret of a rule given as a Python function (``--rule module:function``, called as
``f(op, rows, width, sm) -> RowPlan``; default: the committed ``RowPlan.for_shape``).

    python3 experiments/rows5_analyze.py results/rows5-h200/rows5.json [--op softmax] [--fam few]
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import re
import zlib
from collections import defaultdict


def norm(plan: str) -> str:
    """A plan's repr without its split count (a split plan's count depends on the rows)."""
    plan = re.sub(r"split=\d+, ", "", plan)
    plan = re.sub(r"RowPlan\(|\)$", "", plan)
    keep = []
    defaults = {"rows": "1", "programs_per_sm": "0", "evict": "False", "lane_stats": "False",
                "prefetch": "True", "align": "True", "stages": "0", "sub": "0"}  # fmt: skip
    for part in plan.split(", "):
        k, _, v = part.partition("=")
        if defaults.get(k) != v:
            keep.append(part.replace("kind=", "").replace("'", ""))
    return " ".join(keep)


def cells(results, op=None, fam=None, skip=()):
    by = defaultdict(list)
    for r in results:
        if (op and r["op"] != op) or (fam and r["family"] != fam) or r["family"] in skip:
            continue
        by[(r["op"], r["rows"], r["width"], r["family"])].append(r)
    return by


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--op")
    ap.add_argument("--fam")
    ap.add_argument("--skip-fam", default="", help="comma-separated families to leave out")
    ap.add_argument("--rule", help="module:function giving a plan for (op, rows, width, sm)")
    ap.add_argument("--current", action="store_true",
                    help="score this checkout's RowPlan.for_shape instead of the sweep's rule")  # fmt: skip
    ap.add_argument("--plans", action="store_true", help="per-plan regret table")
    ap.add_argument("--noise", action="store_true",
                    help="same plan, same cell: the 'rep2' pass against the first one")  # fmt: skip
    a = ap.parse_args()
    with open(a.json) as f:
        d = json.load(f)
    sm = d["sm"]
    rule = None
    if a.rule:
        mod, fn = a.rule.split(":")
        rule = getattr(importlib.import_module(mod), fn)
    elif a.current:
        from warpgauge.kernels.plans import RowPlan

        def rule(op, rows, n, sm):
            return RowPlan.for_shape(rows, n, sm, op)

    by = cells(d["results"], a.op, a.fam, tuple(a.skip_fam.split(",")))
    regs, regs_cells, per_plan = [], [], defaultdict(list)
    print(f"copy ceiling {d.get('copy_tbps', 0):.2f} TB/s, SM {sm}, L2 {d['l2'] >> 20} MB")
    for (op, rows, n, fam), rs in by.items():
        ok = {norm(r["plan"]): r for r in rs if r.get("us") and r["plan"] != "torch"}
        if not ok:
            continue
        best_k = min(ok, key=lambda k: ok[k]["us"])
        best = ok[best_k]["us"]
        for k, r in ok.items():
            per_plan[k].append((r["us"] / best - 1, op, rows, n))
        if rule is not None:
            k = norm(repr(rule(op, rows, n, sm)))
        else:
            k = next((norm(r["plan"]) for r in rs if r["rule"]), None)
        t = next((r for r in rs if r["plan"] == "torch" and r.get("us")), None)
        if k in ok:
            regs.append(ok[k]["us"] / best - 1)
            regs_cells.append((op, rows, n, fam))
            rule_s = f"{ok[k]['us']:8.1f} {ok[k]['tbps']:5.2f}"
        else:
            rule_s = f"{'(not timed)':>14s}"
        ts = f"{t['us']:8.1f}" if t else "       -"
        print(f"{op:7s} {fam:6s} {rows:>5d}x{n:<7d} rule {rule_s}  best {best:8.1f} "
              f"{ok[best_k]['tbps']:5.2f}  torch {ts}  {best_k[:70]}  [{k or '-'}]"[:200])  # fmt: skip
    if regs:
        halves = defaultdict(list)
        for (op, rows, n, fam), r in zip(regs_cells, regs):
            halves[zlib.crc32(f"{op} {rows}x{n} {fam}".encode()) % 2].append(r)
        for h, v in sorted(halves.items()):
            v.sort()
            print(f"half {h}: {len(v)} cells, mean {sum(v) / len(v):.3f}, "
                  f"p90 {v[min(len(v) - 1, int(0.9 * len(v)))]:.3f}, over 10%: {sum(x > 0.1 for x in v)}")  # fmt: skip
        regs.sort()
        mean = sum(regs) / len(regs)
        p90 = regs[min(len(regs) - 1, int(0.9 * len(regs)))]
        over = sum(r > 0.10 for r in regs)
        print(f"rule regret over {len(regs)} cells: mean {mean:.3f}, p90 {p90:.3f}, "
              f"max {regs[-1]:.3f}, cells over 10%: {over}")  # fmt: skip
    if a.noise:
        first = {(r["op"], r["rows"], r["width"], r["plan"]): r["us"] for r in d["results"]
                 if r.get("us") and r["family"] == "many"}  # fmt: skip
        diffs = sorted(abs(r["us"] / first[k] - 1) for r in d["results"]
                       if r.get("us") and r["family"] == "rep2"
                       and (k := (r["op"], r["rows"], r["width"], r["plan"])) in first)  # fmt: skip
        if diffs:
            print(f"noise (rep2 vs first pass, same plan and cell): {len(diffs)} pairs, median "
                  f"{diffs[len(diffs) // 2]:.3f}, p90 {diffs[int(0.9 * len(diffs))]:.3f}, "
                  f"max {diffs[-1]:.3f}")  # fmt: skip
    if a.plans:
        print("\nper plan: cells, geomean(time/best), cells within 3% of best")
        rows = []
        for k, v in per_plan.items():
            g = math.exp(sum(math.log1p(x[0]) for x in v) / len(v))
            rows.append((g, len(v), sum(x[0] <= 0.03 for x in v), k))
        for g, nv, near, k in sorted(rows):
            print(f"{nv:4d} {g:6.3f} {near:4d}  {k}")


if __name__ == "__main__":
    main()
