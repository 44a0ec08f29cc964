"""Summaries of a rows9 sweep (experiments/rows9_sweep.py JSON), softmax only: per cell the
sweep's rule (the rule when the sweep ran), this checkout's rule (``RowPlan.for_shape`` with the
sweep's SM count and L2 size), the best plan and ``torch.softmax``; then the regret (time / the
cell's best time - 1) of both rules and the best plan of each cell.

    PYTHONPATH=src python3 experiments/rows9_analyze.py results/rows9-h200/rows9.json [--plans]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics

from warpgauge.kernels.plans import RowPlan


def short(plan: str) -> str:
    """A plan's repr with default fields left out."""
    defaults = {"split": "1", "rows": "1", "programs_per_sm": "0", "evict": "False",
                "lane_stats": "False", "prefetch": "True", "align": "True", "stages": "0",
                "sub": "0", "fma_exp": "0", "fast_exp": "False"}  # fmt: skip
    body = re.sub(r"^RowPlan\(|\)$", "", plan)
    keep = []
    for part in body.split(", "):
        k, _, v = part.partition("=")
        if defaults.get(k) != v:
            keep.append(v.strip("'") if k in ("kind", "block", "num_warps") else f"{k}={v}")
    return " ".join(keep)


def regret_line(name, regrets):
    if not regrets:
        return f"{name}: no cells"
    rs = sorted(regrets)
    p90 = rs[min(len(rs) - 1, int(0.9 * len(rs)))]
    over = sum(1 for r in rs if r > 0.10)
    return (f"{name}: {len(rs)} cells, mean regret {100 * statistics.mean(rs):.1f}%, "
            f"p90 {100 * p90:.1f}%, max {100 * rs[-1]:.1f}%, cells over 10%: {over}")  # fmt: skip


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--plans", action="store_true", help="every plan's mean regret too")
    a = ap.parse_args()
    with open(a.path) as f:
        d = json.load(f)
    sm, l2, cp = d["sm"], d["l2"], d.get("copy_tbps") or 1.0
    by = {}
    for r in d["results"]:
        by.setdefault((r["rows"], r["width"], r["family"]), []).append(r)
    print(f"copy ceiling {cp:.2f} TB/s, SM {sm}, L2 {l2 >> 20} MB")
    print(
        f"{'shape':>14s} {'fam':6s} {'old%cp':>6s} {'new%cp':>6s} {'best%cp':>7s} "
        f"{'new/old':>7s} {'new/torch':>9s} {'old_us':>8s} {'new_us':>8s}  new plan | best plan"
    )
    old_reg, new_reg, per_plan = [], [], {}
    for (rows, n, fam), rs in by.items():
        ok = [r for r in rs if r.get("us") and r["plan"] != "torch"]
        if not ok:
            continue
        best = min(ok, key=lambda r: r["us"])
        old = next((r for r in ok if r["rule"]), None)
        new_p = repr(RowPlan.for_shape(rows, n, sm, "softmax", l2, 2))
        new = next((r for r in ok if r["plan"] == new_p), None)
        t = next((r for r in rs if r.get("us") and r["plan"] == "torch"), None)
        for r in ok:
            per_plan.setdefault(short(r["plan"]), []).append(r["us"] / best["us"] - 1)
        if old:
            old_reg.append(old["us"] / best["us"] - 1)
        if new:
            new_reg.append(new["us"] / best["us"] - 1)

        def pc(r):
            return f"{100 * r['tbps'] / cp:6.1f}" if r else "     -"

        ratio = f"{old['us'] / new['us']:7.3f}" if old and new else "      -"
        vs_t = f"{t['us'] / new['us']:9.2f}" if t and new else "        -"
        print(
            f"{rows:>6d}x{n:<7d} {fam:6s} {pc(old)} {pc(new)} {pc(best):>7s} {ratio} {vs_t} "
            f"{old['us'] if old else 0:8.1f} {new['us'] if new else 0:8.1f}  "
            f"{short(new_p) if new else 'not measured: ' + short(new_p)} | {short(best['plan'])}"
        )
    print(regret_line("sweep's rule", old_reg))
    print(regret_line("this rule   ", new_reg))
    if a.plans:
        for k, v in sorted(per_plan.items(), key=lambda kv: statistics.mean(kv[1])):
            print(f"  {100 * statistics.mean(v):6.1f}% mean regret over {len(v):3d} cells  {k}")


if __name__ == "__main__":
    main()
