"""Summaries of an int4s sweep file (``experiments/int4s_sweep.py``; no GPU needed).

    python experiments/int4s_summarize.py results/int4s-h200/int4s.json [--lane cold|rot]

1. Per shape: tinygemm, dense, the default (``wg``, with its plan), the fastest forced plan and
   ratios (the default against the reference provider: tinygemm for M <= 16, dense above).
2. Per plan family (a variant without its split, i.e. tile, warps, stages, loop, flags) and batch
   class: over the shapes where it ran, the geometric mean of wg / (the family's best split) and of
   wg / (the family at each split), with the programs per SM that split gave (132 SMs unless
   --sm), so a split rule can be read off.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict

import triton


def fam(variant):
    if not variant.startswith("p:"):
        return variant, None
    f = variant[2:].split(",")
    split = int(f[3])
    return "p:" + ",".join(f[:3] + ["S"] + f[4:]), split


def programs(variant, M, N):
    f = [int(v) if v.lstrip("-").isdigit() else v for v in variant[2:].split(",")]
    bm, bn, split = f[0], f[1], f[3]
    tiles = (M if bm == 1 else triton.cdiv(M, bm)) * triton.cdiv(N, bn)
    return tiles * split


def batch_class(M):
    return "1" if M == 1 else "2-8" if M <= 8 else "16-64" if M <= 64 else "128-256"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--lane", default="cold", choices=["cold", "rot"])
    ap.add_argument("--sm", type=int, default=132)
    args = ap.parse_args()
    key = f"us_{args.lane}"
    with open(args.path) as f:
        recs = [r for r in json.load(f) if "M" in r]
    bad = [r for r in recs if r.get("ok") is False or r.get("ok_after") is False or "error" in r]
    print(f"{len(recs)} records; {len(bad)} failed / errored: "
          f"{sorted({r['variant'] for r in bad})}")  # fmt: skip
    by = defaultdict(dict)
    for r in recs:
        if key in r:
            by[(r["M"], r["N"], r["K"])][r["variant"]] = r
    print(f"\nlane {args.lane}, us\n{'shape':18} {'tiny':>7} {'dense':>7} {'wg':>7} {'best':>7} "
          f"{'wg/b':>5} {'ref/wg':>6} {'ref/b':>6}  wg plan -> best")  # fmt: skip
    fam_rows = defaultdict(lambda: defaultdict(dict))  # class -> family -> shape -> {split: us}
    for (M, N, K), d in by.items():
        if "wg" not in d:
            continue
        t = {v: r[key] for v, r in d.items()}
        ours = {v: x for v, x in t.items() if v.startswith("p:") or v == "wg"}
        b = min(ours, key=ours.get)
        ref = t.get("tinygemm" if M <= 16 else "dense", float("nan"))
        print(f"{M}x{N}x{K:<8} {t.get('tinygemm', 0):7.1f} {t.get('dense', 0):7.1f} "
              f"{t['wg']:7.1f} {t[b]:7.1f} {t['wg'] / t[b]:5.2f} {ref / t['wg']:6.2f} "
              f"{ref / t[b]:6.2f}  {d['wg'].get('plan')} -> {b}")  # fmt: skip
        for v, x in ours.items():
            if v == "wg":
                v = d["wg"]["plan"]
            f, sp = fam(v)
            fam_rows[batch_class(M)][f][(M, N, K)] = fam_rows[batch_class(M)][f].get(
                (M, N, K), {}
            ) | {sp: (x, programs(v, M, N) / args.sm)}
    for cls, fams in fam_rows.items():
        print(f"\nbatch {cls}: family, shapes, geomean wg/(family best split), per shape best "
              "split (programs per SM) and wg/us")  # fmt: skip
        wg_of = {s: by[s]["wg"][key] for f in fams.values() for s in f}
        rows = []
        for f, shapes in fams.items():
            ratios, parts = [], []
            for s, splits in shapes.items():
                sp, (x, pps) = min(splits.items(), key=lambda kv: kv[1][0])
                ratios.append(wg_of[s] / x)
                parts.append(f"{s[0]}x{s[1]}x{s[2]}:s{sp}({pps:.1f})={wg_of[s] / x:.2f}")
            g = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            rows.append((g, f, len(ratios), parts))
        for g, f, n, parts in sorted(rows, reverse=True):
            print(f"  {f:24} n={n:2} geo {g:5.2f}  " + " ".join(parts))


if __name__ == "__main__":
    main()
