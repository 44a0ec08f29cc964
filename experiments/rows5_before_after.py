"""Cells of a rows5 sweep where this checkout's rule picks another plan than the sweep's rule
did: both plans' times from the same sweep (old rule / new rule; > 1: the new rule is faster).

    PYTHONPATH=src python3 experiments/rows5_before_after.py results/rows5-h200/rows5.json
"""

from __future__ import annotations

import json
import sys

from rows5_analyze import norm

from warpgauge.kernels.plans import RowPlan


def main(path):
    with open(path) as f:
        d = json.load(f)
    sm, cells = d["sm"], {}
    for r in d["results"]:
        if r.get("us") and r["plan"] != "torch":
            cells.setdefault((r["op"], r["family"], r["rows"], r["width"]), []).append(r)
    print(f"{'op':8s}{'family':7s}{'shape':>15s} {'old us':>8s} {'new us':>8s} {'old/new':>8s} "
          f"{'new TB/s':>8s}  new plan (old plan)")  # fmt: skip
    for (op, fam, rows, n), rs in cells.items():
        plans = {norm(r["plan"]): r for r in rs}
        old = next(r for r in rs if r["rule"])
        new_k = norm(repr(RowPlan.for_shape(rows, n, sm, op)))
        if new_k == norm(old["plan"]) or new_k not in plans:
            continue
        new = plans[new_k]
        print(f"{op:8s}{fam:7s}{rows:>7d}x{n:<7d} {old['us']:8.1f} {new['us']:8.1f} "
              f"{old['us'] / new['us']:8.3f} {new['tbps']:8.2f}  {new_k} ({norm(old['plan'])})")  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
