"""Summarize a row_tune.py JSON: per cell the rule's plan, the best plan, regret, and torch.

python3 tuning/analyze.py results/row-tuning-h200/tune_fwd.json [--op softmax]
"""

from __future__ import annotations

import argparse
import json
import statistics


def load(path):
    with open(path) as f:
        return json.load(f)


def cells(results):
    by = {}
    for r in results:
        by.setdefault((r["op"], r["rows"], r["width"]), []).append(r)
    return by


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json", nargs="+")
    ap.add_argument("--op", default=None)
    ap.add_argument("--all", action="store_true", help="print every plan of every cell")
    ap.add_argument(
        "--rule", type=int, default=0, metavar="SM",
        help="score the current RowPlan.for_shape (with this SM count) instead of the sweep's rule",
    )  # fmt: skip
    a = ap.parse_args()
    results = []
    for p in a.json:
        results += load(p)["results"]
    by = cells(results)
    torch_us = {(rw, n): rs[0]["us"] for (op, rw, n), rs in by.items() if op == "torch_softmax"}
    regrets = {}
    for (op, rows, n), rs in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][1])):
        if op.startswith("torch") or (a.op and op != a.op):
            continue
        ok = [r for r in rs if r["us"]]
        if not ok:
            print(f"{op} {rows}x{n}: all failed: {rs[0]['err']}")
            continue
        rule = rs[0]
        if a.rule:
            from warpgauge.kernels.plans import RowPlan

            want = repr(RowPlan.for_shape(rows, n, a.rule, op.replace("_nodw", "")))
            match = [r for r in ok if r["plan"] == want]
            if not match:
                print(f"{op:12s} {rows:>6d}x{n:<7d} rule plan not measured: {want[8:]}")
                continue
            rule = match[0]
        best = min(ok, key=lambda r: r["us"])
        reg = rule["us"] / best["us"] - 1 if rule["us"] else float("inf")
        regrets.setdefault(op, []).append(reg)
        t = torch_us.get((rows, n)) if op == "softmax" else None
        vs = f" torch {t / rule['us']:.2f}x" if t and rule["us"] else ""
        print(
            f"{op:12s} {rows:>6d}x{n:<7d} rule {rule['us']:9.2f}us {rule['tbps'] or 0:5.2f}TB/s"
            f" best {best['us']:9.2f}us {best['tbps']:5.2f}TB/s regret {reg:6.1%}{vs}"
            f"  best={best['plan'][8:]}"
        )
        if a.all:
            for r in sorted(ok, key=lambda r: r["us"]):
                print(f"      {r['us']:9.2f}us {r['tbps']:5.2f}TB/s {r['plan'][8:]}")
    for op, rg in regrets.items():
        rg = sorted(rg)
        p90 = rg[int(0.9 * (len(rg) - 1))]
        print(
            f"{op}: cells {len(rg)} mean regret {statistics.mean(rg):.1%} p90 {p90:.1%}"
            f" over 10%: {sum(r > 0.1 for r in rg)}"
        )


if __name__ == "__main__":
    main()
