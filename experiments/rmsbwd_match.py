"""Which S1 candidate (results/rmsbwd-h200/sweep.jsonl, run at f24b5bd) launched exactly what the
current rule launches, per shape: plan (block, warps, rows per step, prefetch), row groups and
finish columns. Prints old / as-run new / the rule's measured time (or "unmeasured") / best.

    PYTHONPATH=src python3 experiments/rmsbwd_match.py results/rmsbwd-h200/sweep.jsonl
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

import triton

from warpgauge.kernels import rmsnorm_backward as bwd
from warpgauge.kernels.plans import RowPlan

SM = 132


def s1_config(rows, n, cand, plan_repr):
    """The (plan fields, groups, finish columns) candidate ``cand`` launched at S1's commit."""
    base = RowPlan.for_shape(rows, n, SM, "rms_bwd")
    if base.kind != "resident" or cand.startswith("dh-"):  # early dh: not the rule's kernel
        return None
    p = eval(plan_repr, {"RowPlan": RowPlan}) if plan_repr != "None" else base  # noqa: S307
    e = {"old": 0, "new": 8192}.get(cand, 8192)
    if cand.startswith("e") and cand[1:].isdigit():
        e = int(cand[1:])
    g = max(1, min(triton.cdiv(rows, p.rows), (p.programs_per_sm or 1) * SM))
    if e:
        g = min(g, max(1, rows * n // e))
    g = triton.cdiv(rows, triton.cdiv(rows, g))
    fc = 64
    if cand != "old":
        fc = 16
        while fc < 64 and 2 * fc <= n // SM:
            fc *= 2
    blk = p.resident_block(n, False)
    return (blk, p.num_warps, p.rows, p.prefetch, g, fc if g > 1 else 0)


def rule_config(rows, n):
    base = RowPlan.for_shape(rows, n, SM, "rms_bwd")
    if base.kind != "resident":
        return None
    p = bwd.resident_rule(n, base)
    g = bwd.row_groups(rows, n, p.rows, p.programs_per_sm or 1, SM)
    fc = bwd.finish_cols(n, SM)
    return (p.resident_block(n, False), p.num_warps, p.rows, p.prefetch, g, fc if g > 1 else 0)


def main(path):
    by = defaultdict(dict)
    with open(path) as fh:
        for line in fh:
            r = json.loads(line)
            if r["kind"] == "bwd" and "rot_us" in r:
                by[(r["rows"], r["width"])][r["cand"]] = r
    print("rotated lane, us; rule = mean over the S1 candidates that launched the rule's config")
    print(f"{'shape':>13} {'old':>8} {'new@S1':>8} {'rule':>8} {'match':>10} {'best':>8} rule cfg")
    for (rows, n), c in by.items():
        want = rule_config(rows, n)
        hit = [k for k, v in c.items() if want and s1_config(rows, n, k, v["plan"]) == want]
        ts = [c[k]["rot_us"] for k in hit]  # the same launches measured len(hit) times
        t = sum(ts) / len(ts) if ts else None
        best = min(v["rot_us"] for v in c.values())
        o, nw = c["old"]["rot_us"], c["new"]["rot_us"]
        tt = f"{t:8.2f}" if t else f"{'unmeas.':>8}"
        print(
            f"{rows:>6}x{n:<6} {o:8.2f} {nw:8.2f} {tt} {(hit or ['-'])[0] + (f'+{len(hit) - 1}' if len(hit) > 1 else ''):>10} {best:8.2f} {want}"
        )


if __name__ == "__main__":
    main(sys.argv[1])
