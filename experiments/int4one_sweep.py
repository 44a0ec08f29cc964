"""GPU sweep of the batch-1 INT4 FMA GEMV with the folded decode (issue 11, ``int4.FMA_FOLD``).

For each weight shape of real models: the exact and the folded decode (FMA_FOLD) on the rule's
plan and on neighbouring plans (rows per program, groups per step, warps, stages, split), beside
tinygemm; cold (weights rotated over copies > 2.5x L2),
CUDA-graph replay; each variant is checked against an FP64 (FP32 for the vocabulary head)
reference before it is timed; the copy ceiling is measured in the same process.

    PYTHONPATH=src python3 experiments/int4one_sweep.py --out $OUT --budget 100
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import triton

from warpgauge.kernels import int4 as i4

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_timer import bench_graph, l2_bytes  # noqa: E402  (same folder)
from int4_gemv_sweep import build  # noqa: E402

SHAPES = [(28672, 8192), (128256, 4096), (8192, 8192), (14336, 4096), (4096, 14336),
          (4096, 4096), (8192, 28672), (6144, 4096), (1024, 4096)]  # fmt: skip
# (block_n, groups_per_iter, warps, stages): the rule's (32, 4, 2, 3) first
CONFIGS = [(32, 4, 2, 3), (64, 4, 4, 3), (32, 8, 2, 3), (64, 2, 2, 3), (16, 8, 2, 3),
           (32, 4, 2, 4), (32, 4, 4, 3), (64, 4, 2, 3)]  # fmt: skip


def copy_rate():
    a = torch.empty(1 << 29, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    med, _, _ = bench_graph(lambda: b.copy_(a), target_s=5e-3, calls=8)
    return 2 * a.numel() / med


def variants(N, K, sm):
    rule = i4.Int4Plan.for_shape(1, N, K, sm)
    out = [("tinygemm", None, None), ("exact-rule", rule, False), ("fold-rule", rule, True)]
    for bn, gpi, w, st in CONFIGS:
        gpi = min(gpi, triton.next_power_of_2(K // 128))
        base = i4.Int4Plan(block_m=1, block_n=bn, groups_per_iter=gpi, split_k=1, num_warps=w,
                           pipeline=st, num_stages=1)  # fmt: skip
        tiles = triton.cdiv(N, bn)
        for per_sm in (0, 3, 6):  # 0: no split (one kernel, no reduction launch)
            sp = i4._split(tiles, sm, per_sm, K // 128, 2 * gpi, i4.MAX_SPLIT_K)
            if per_sm == 0 and ((bn, w) not in ((16, 2), (32, 2)) or N * K > 8192 * 8192):
                continue
            p = i4.Int4Plan(**{**base.__dict__, "split_k": sp})
            name = f"fold-{bn}x{gpi}-w{w}-st{st}-s{sp}"
            if all(v[0] != name for v in out) and p != rule:
                out.append((name, p, True))
            if (bn, gpi, w, st) == CONFIGS[0] and per_sm == 6 and p != rule:
                out.append((f"exact-{bn}x{gpi}-w{w}-st{st}-s{sp}", p, False))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=float, default=100.0)
    a = ap.parse_args()
    t0 = time.time()
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    l2 = l2_bytes()
    rate = copy_rate()
    print(f"copy {rate / 1e12:.2f} TB/s, {sm} SMs, L2 {l2 >> 20} MiB", flush=True)
    rows = []
    path = os.path.join(a.out, "int4one.json")
    for N, K in SHAPES:
        cbytes = N * K // 2 + N * K // 128 * 2 + 2 * K + 2 * N
        for name, plan, fold in variants(N, K, sm):
            if time.time() - t0 > a.budget:
                print("budget reached", flush=True)
                break
            v = "tinygemm" if plan is None else (
                f"p:1,{plan.block_n},{plan.groups_per_iter},{plan.split_k},{plan.num_warps},1,0,"
                f"{plan.pipeline}"
            )  # fmt: skip
            rec = dict(N=N, K=K, variant=name, fold=fold)
            try:
                if fold is not None:
                    i4.FMA_FOLD = fold
                fn, check = build(dict(M=1, N=N, K=K, variant=v), l2)
                err, ok = check(fn())
                med, mn, n = bench_graph(fn)
                rec.update(us=med * 1e6, min_us=mn * 1e6, calls=n, rel_err=err, ok=bool(ok),
                           copy_frac=cbytes / med / rate)  # fmt: skip
            except Exception as e:  # a variant that fails is recorded, the sweep goes on
                rec.update(error=f"{type(e).__name__}: {e}"[:300])
            finally:
                i4.FMA_FOLD = False
            rows.append(rec)
            print(json.dumps(rec), flush=True)
            with open(path, "w") as f:
                json.dump(dict(copy_rate=rate, sm=sm, l2=l2, rows=rows), f, indent=1)
    # summary: per shape, tinygemm, the exact rule, the best folded variant
    print(
        f"\n{'shape':>14} {'tinygemm':>9} {'exact':>8} {'fold1':>8} {'best f2':>8} {'copy%':>6}  best"
    )
    for N, K in SHAPES:
        rs = [r for r in rows if r["N"] == N and r["K"] == K and "us" in r]
        if not rs:
            continue
        get = {r["variant"]: r for r in rs}
        f2 = [r for r in rs if r["fold"] and r["ok"]]
        best = min(f2, key=lambda r: r["us"]) if f2 else None
        tg = get.get("tinygemm", {}).get("us", float("nan"))
        ex = get.get("exact-rule", {}).get("us", float("nan"))
        f1 = get.get("fold-rule", {}).get("us", float("nan"))
        print(f"{N:>7}x{K:<6} {tg:9.1f} {ex:8.1f} {f1:8.1f} "
              f"{best['us'] if best else float('nan'):8.1f} "
              f"{100 * best['copy_frac'] if best else float('nan'):6.0f}  "
              f"{best['variant'] if best else '-'}")  # fmt: skip


if __name__ == "__main__":
    main()
