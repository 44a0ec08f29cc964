"""Summaries of an int4_gemv_sweep.py result file (no GPU needed).

    python experiments/int4_summarize.py results/int4-gemv-h200/r1.json

Per shape: the baselines, the current default ('wg'), the best variant, the copy-ceiling fraction
of the best; then, per M bucket, each variant family (everything but split_k) ranked by the
geometric mean of (best time of the shape / family's best split on the shape).
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict

COPY_TBS = 4.37  # the H200 copy ceiling measured in the host-cost / roofline runs (brief)


def cbytes(M, N, K):
    return N * K // 2 + N * K // 128 * 2 + 2 * M * (N + K)


def family(v):
    if not v.startswith("p:"):
        return v
    f = v[2:].split(",")  # bm, bn, gpi, split, warps, stages, flags[, pipeline]
    f[3] = "*"
    return "p:" + ",".join(f)


def main(path):
    global COPY_TBS
    with open(path) as f:
        recs = json.load(f)
    for r in recs:  # the int4-pipe runs measure the ceiling in the same run
        if r.get("variant") == "copy_ceiling" and r.get("tbs"):
            COPY_TBS = r["tbs"]
            print(f"copy ceiling measured in this run: {COPY_TBS:.2f} TB/s")
    recs = [r for r in recs if "M" in r]
    bad = [r for r in recs if "us" not in r]
    by = defaultdict(list)
    for r in recs:
        by[(r["M"], r["N"], r["K"])].append(r)
    print(f"{len(recs)} records, {len(bad)} without a time (errors / failed checks)")
    for r in bad[:20]:
        print("  ", r["M"], r["N"], r["K"], r["variant"], r.get("err"), r.get("error", "")[:100])
    hdr = f"{'shape':20} {'tiny':>7} {'dense':>7} {'deq':>7} {'wg':>7} {'best':>7} {'%copy':>6}"
    print("\n" + hdr + "  best variant   [vs tiny, vs dense]")
    for (M, N, K), rs in by.items():
        t = {r["variant"]: r["us"] for r in rs if "us" in r}
        ours = [r for r in rs if r["variant"].startswith("p:") and "us" in r]
        if not ours:
            continue
        b = min(ours, key=lambda r: r["us"])
        frac = cbytes(M, N, K) / b["us"] / 1e6 / COPY_TBS
        vt = t.get("tinygemm", float("nan")) / b["us"]
        vd = t.get("dense", float("nan")) / b["us"]
        print(f"{M}x{N}x{K:<10} {t.get('tinygemm', 0):7.1f} {t.get('dense', 0):7.1f} "
              f"{t.get('deq', 0):7.1f} {t.get('wg', 0):7.1f} {b['us']:7.1f} {100 * frac:5.0f}%  "
              f"{b['variant']:22} [{vt:.2f}, {vd:.2f}]")  # fmt: skip
    buckets = defaultdict(lambda: defaultdict(dict))
    for (M, N, K), rs in by.items():
        ours = [r for r in rs if r["variant"].startswith("p:") and "us" in r]
        if not ours:
            continue
        best = min(r["us"] for r in ours)
        for r in ours:
            f = family(r["variant"])
            cur = buckets[M][f].get((N, K))
            if cur is None or r["us"] < cur[0]:
                buckets[M][f][(N, K)] = (r["us"], r["variant"], best)
    for M, fams in buckets.items():
        n_shapes = max(len(v) for v in fams.values())
        rows = []
        for f, shapes in fams.items():
            if len(shapes) < n_shapes:
                continue
            g = math.exp(sum(math.log(b / us) for us, _, b in shapes.values()) / len(shapes))
            rows.append((g, f, [v for _, v, _ in shapes.values()]))
        rows.sort(reverse=True)
        print(f"\nM={M}: families over {n_shapes} shapes (geomean of best/family)")
        for g, f, vs in rows[:8]:
            print(f"  {g:.3f} {f:26} splits: {' '.join(v.split(',')[3] for v in vs)}")


if __name__ == "__main__":
    main(sys.argv[1])
