"""Session 19: the P19 add_rms_norm rule scored on both small-size grid runs by plan identity.

``plans-report`` matches a cell's plans across runs by their key, but where a rule change flips
a plan's ``w_early`` the twin keys swap meaning (the key without a suffix is always the rule's
own plan, ``_x2`` its other ``w_early``): between run 1 (G16 rule) and run 2 (P19 rule) of
``tuning/plans_small19.toml`` that happens in every cell the change touched. This script maps
each run's keys to plans (``RowPlan.candidates`` under the run's rule, the same SM count and L2
size) and reports, per run and lane, the measured regret of both rules (rule's plan time / best
plan time - 1) and the run-to-run movement of each plan matched by identity.

    python3 experiments/plans_small19_check.py RUN1.csv RUN2.csv   # warpgauge export --format csv
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import statistics
import sys

from warpgauge.kernels import plans as P
from warpgauge.kernels.plans import RowPlan

SM, L2 = 132, 50331648


def old_rule(rows: int, width: int) -> RowPlan:
    """The G16 rule's add_rms_norm plan (run 1): ``w_early`` from 8192-wide bodies alone."""
    p = RowPlan.for_shape(rows, width, SM, "rms", l2_bytes=L2, elem_bytes=2)
    if p.kind != "resident":
        return p
    body = p.resident_block(width, True)
    edge = width > body and body > P.RMS_W_EARLY_EDGE_MAX_BODY
    return dataclasses.replace(p, w_early=body >= P.RMS_W_EARLY_MIN_BODY and not edge)


def load(path: str):
    cells = collections.defaultdict(dict)
    with open(path) as f:
        for r in csv.DictReader(f):
            if r["status"] == "ok" and r["op"] == "add_rms_norm":
                key = (int(r["shape_rows"]), int(r["shape_width"]), r["lane"])
                cells[key][r["provider"]] = float(r["device_median_us"])
    return cells


def plans_of(rows: int, width: int, first: RowPlan) -> dict:
    """{key: plan} as the plans mode named them for a run whose rule picked ``first``."""
    from warpgauge.bench.modes.plans import plan_key

    cands = RowPlan.candidates(rows, width, SM, "rms", L2, 2)
    cands = [first] + [c for c in cands if c != first]  # the run's rule's plan first

    out, seen = {}, []
    for p in cands:
        if p in seen:
            continue
        seen.append(p)
        k, n = plan_key(p), 1
        while k in out:
            n += 1
            k = f"{plan_key(p)}_x{n}"
        out[k] = p
    return out


def main(run1: str, run2: str) -> None:
    runs = {"run 1 (G16 rule)": (load(run1), old_rule), "run 2 (P19 rule)": (load(run2), None)}
    by_plan = collections.defaultdict(dict)
    for name, (cells, rule_fn) in runs.items():
        reg = collections.defaultdict(lambda: {"G16": [], "P19": []})
        for (rows, width, lane), times in cells.items():
            new = RowPlan.for_shape(rows, width, SM, "rms", l2_bytes=L2, elem_bytes=2)
            old = old_rule(rows, width)
            first = old if rule_fn else new
            named = plans_of(rows, width, first)
            timed = {repr(p): times[k] for k, p in named.items() if k in times}
            best = min(timed.values())
            for tag, plan in (("G16", old), ("P19", new)):
                if repr(plan) in timed:
                    reg[lane][tag].append(timed[repr(plan)] / best - 1)
            for r, t in timed.items():
                by_plan[(rows, width, lane, r)][name] = t
        for lane, d in sorted(reg.items()):
            g, n = d["G16"], d["P19"]
            print(f"{name} {lane}: G16 rule mean regret {100 * statistics.mean(g):.1f}% "
                  f"(p90 {100 * sorted(g)[int(0.9 * len(g))]:.1f}%), P19 rule "
                  f"{100 * statistics.mean(n):.1f}% (p90 {100 * sorted(n)[int(0.9 * len(n))]:.1f}%), "
                  f"{len(n)} cells")  # fmt: skip
    moves = [abs(v[a] / v[b] - 1) for v in by_plan.values() if len(v) == 2 for a, b in [tuple(v)]]
    moves.sort()
    print(f"same plan, same cell, run 2 against run 1 (matched by plan): median "
          f"{100 * statistics.median(moves):.1f}%, p90 {100 * moves[int(0.9 * len(moves))]:.1f}% "
          f"({len(moves)} plan-cells)")  # fmt: skip


if __name__ == "__main__":
    main(*sys.argv[1:3])
