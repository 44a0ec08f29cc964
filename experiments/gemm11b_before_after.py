"""Before / after table of the gemm11b round: per product, the cuBLAS / dispatch ratio (cold lane)
of the gemm11 round (``before``: results/gemm11-h200/g11.json, its ``auto`` or a variant a
``--rule`` file names) next to this round's (``after``: g11b.json ``auto``, or a measured variant
that a ``--rule`` file names for the final rule). Ratios come from inside each run. Any machine:

    python experiments/gemm11b_before_after.py results/gemm11-h200/g11.json \\
        results/gemm11b-h200/g11b.json [--before-rule results/gemm11-h200/rule_after.json] \\
        [--rule results/gemm11b-h200/rule_final.json]
"""

from __future__ import annotations

import argparse
import json
import math


def times(path, rule_path=None):
    """{(group, shape): (cublas_us, ours_us, variant)} for the products with both times."""
    with open(path) as f:
        recs = json.load(f)["records"]
    rule = {}
    if rule_path:
        with open(rule_path) as f:
            rule = json.load(f)
    by: dict = {}
    for r in recs:
        if r.get("ok") and "cold_us" in r:
            by.setdefault((r["group"], r["shape"]), {})[r["variant"]] = r["cold_us"]
    out = {}
    for key, t in by.items():
        pick = rule.get(f"{key[0]} {key[1]}", "auto")
        if "cublas" in t and pick in t:
            out[key] = (t["cublas"], t[pick], pick)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--before-rule", default=None)
    ap.add_argument("--rule", default=None)
    args = ap.parse_args()
    old = times(args.before, args.before_rule)
    new = times(args.after, args.rule)
    print("| product | shape (M x N x K, layout) | before: cuBLAS / ours us (ratio) | "
          "after: cuBLAS / ours us (ratio) | after = variant |")  # fmt: skip
    print("|---|---|---|---|---|")
    logs = {"before": [], "after": []}
    for key, (cb, us, var) in new.items():
        b = old.get(key)
        before = f"{b[0]:.1f} / {b[1]:.1f} ({b[0] / b[1]:.3f})" if b else "-"
        mark = "**" if cb / us < 0.95 else ""
        print(f"| {key[0]} | {key[1]} | {before} | {cb:.1f} / {us:.1f} ({mark}{cb / us:.3f}{mark})"
              f" | `{var}` |")  # fmt: skip
        logs["after"].append(math.log(cb / us))
        if b:
            logs["before"].append(math.log(b[0] / b[1]))
    for k, v in logs.items():
        if v:
            print(f"\n{k}: geomean {math.exp(sum(v) / len(v)):.3f} over {len(v)} products", end="")
    print()


if __name__ == "__main__":
    main()
