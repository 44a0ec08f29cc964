"""Read a rowsum9 sweep (experiments/rowsum9_sweep.py) and score the committed rule on it.

For every cell: the plan the sweep recorded as the rule's ("old"), the plan the rule in this
checkout picks for the same shape with the run's SM count and L2 size ("new", looked up among the
cell's measured plans), the best measured plan, torch and torch.compile. Prints per cell
new/old speedup, regret of both rules (rule time / best time - 1) and the summary over cells.
A cell whose new plan was not measured is listed as such (never scored).

    PYTHONPATH=src python3 experiments/rowsum9_analyze.py results/rowsum9-h200/rowsum9.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from warpgauge.kernels.plans import RowPlan


def cells(results):
    by = {}
    for r in results:
        by.setdefault((r["op"], r["rows"], r["width"], r["family"]), []).append(r)
    return by


def med(rs):
    """Median time of the records of one plan (a plan can appear in a cell once per run)."""
    return statistics.median(r["us"] for r in rs) if rs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json")
    ap.add_argument("--op", default="")
    ap.add_argument("--all", action="store_true", help="print every plan of every cell")
    ap.add_argument("--copy", type=float, default=0.0,
                    help="copy ceiling in TB/s for the %% column (default: the sweep's own)")  # fmt: skip
    a = ap.parse_args()
    with open(a.json) as fh:
        d = json.load(fh)
    sm, l2, copy = d["sm"], d["l2"], a.copy or d.get("copy_tbps")
    rows_out, old_reg, new_reg, gains, missing = [], [], [], [], []
    for (op, rows, n, fam), rs in cells(d["results"]).items():
        if a.op and op != a.op:
            continue
        ok = [r for r in rs if r.get("us")]
        mine = [r for r in ok if r["plan"] not in ("torch", "compile")]
        if not mine:
            continue
        old = [r for r in mine if r["rule"]]
        new_plan = repr(RowPlan.for_shape(rows, n, sm, op, l2, 2))
        new = [r for r in mine if r["plan"] == new_plan]
        best = min(mine, key=lambda r: r["us"])
        t_old, t_new = med(old), med(new)
        torch_us = med([r for r in ok if r["plan"] == "torch"])
        comp = med([r for r in ok if r["plan"] == "compile"])
        if t_new is None:
            missing.append((op, rows, n, fam, new_plan))
        if t_old:
            old_reg.append(t_old / best["us"] - 1)
        if t_new:
            new_reg.append(t_new / best["us"] - 1)
        if t_old and t_new:
            gains.append(t_old / t_new)
        rows_out.append((op, fam, rows, n, t_old, t_new, best, torch_us, comp))
        if a.all:
            for r in sorted(mine, key=lambda r: r["us"]):
                print(f"   {op} {rows}x{n} {r['us']:9.2f} {r['plan']}")
    print(f"SM {sm}, L2 {l2 >> 20} MB, copy {copy and round(copy, 2)} TB/s")
    print(f"{'op':7s} {'fam':6s} {'shape':>14s} {'old_us':>8s} {'new_us':>8s} {'new/old':>7s} "
          f"{'best_us':>8s} {'torch':>7s} {'compile':>7s} {'new%cp':>6s} {'vs_torch':>8s} "
          f"{'vs_comp':>7s}")  # fmt: skip
    for op, fam, rows, n, t_old, t_new, best, torch_us, comp in rows_out:

        def f(v, w=8, p=1):
            return f"{v:{w}.{p}f}" if v else " " * (w - 1) + "-"

        t = t_new or t_old
        pc = 100 * _bytes(op, rows, n) / t / 1e6 / copy if (t and copy) else None
        print(f"{op:7s} {fam:6s} {rows:>6d}x{n:<7d} {f(t_old)} {f(t_new)} "
              f"{f(t_old / t_new if t_old and t_new else None, 7, 3)} {f(best['us'])} "
              f"{f(torch_us, 7)} {f(comp, 7)} {f(pc, 6, 0)} "
              f"{f(torch_us / t if torch_us and t else None, 8, 3)} "
              f"{f(comp / t if comp and t else None, 7, 3)}")  # fmt: skip

    def stats(v):
        if not v:
            return "-"
        v = sorted(v)
        return (f"mean {100 * statistics.mean(v):.1f}%, p90 {100 * v[int(0.9 * (len(v) - 1))]:.1f}%"
                f", max {100 * v[-1]:.1f}%, over 10%: {sum(x > 0.1 for x in v)} of {len(v)}")  # fmt: skip

    print(f"regret, recorded rule: {stats(old_reg)}")
    print(f"regret, this checkout's rule: {stats(new_reg)}")
    if gains:
        g = sorted(gains)
        print(f"new/old speedup: min {g[0]:.3f}, median {statistics.median(g):.3f}, max {g[-1]:.3f}"
              f"; cells slower by more than 3%: {sum(x < 0.97 for x in g)}")  # fmt: skip
    for m in missing:
        print("new plan not measured:", m)
    return 0


def _bytes(op, rows, n):
    return {
        "softmax": 4 * rows * n,
        "rms": 8 * rows * n + 2 * n,
        "row_sum": 2 * rows * n + 2 * rows,
    }[op]


if __name__ == "__main__":
    sys.exit(main())
