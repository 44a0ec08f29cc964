"""add_rms_norm's split backward for few wide rows, in tiles of fewer warps (GPU; session 15).

The training run 20261202-141552-training has add_rms_norm forward + backward at 64x131072 in
65.8 us against 57.8 for torch.compile max-autotune (0.88x); the backward (split: a stats pass,
then the write pass with dw folded in, then the finish kernel) is ~43 us of it. The folded write
tile was chosen in rmsfold13 from five tiles of 4-8 warps (2048 x 2 rows, 8 warps, 8 programs per
SM: 16 elements a thread per tensor). Session 15 found the forward row plans faster with 64
elements a thread in programs of 1-2 warps (results/rows15-h200/), so this sweep times the write
tile with fewer warps and more rows or columns per program, and the stats pass's split chunking,
at the shapes where the rule takes the split backward. Backward alone (with dh, BF16), timing by
``_cold.ColdLane``; every variant is checked against FP64 (dx and dw) before timing and again
after it (outputs poisoned with NaN, graph replayed).

    PYTHONPATH=src python3 experiments/rmsbwd15_sweep.py --out $OUT/rmsbwd15.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _cold import ColdLane  # noqa: E402

from warpgauge.kernels import rmsnorm_backward as bwd  # noqa: E402
from warpgauge.kernels.plans import RowPlan  # noqa: E402
from warpgauge.reference import assert_close  # noqa: E402

BF = torch.bfloat16
# name -> ((block, rows, warps, per_sm) of the folded write tile, stats split (block, per_sm) or None)
VARIANTS = {
    "rule": ((2048, 2, 8, 8), None),
    "t2048r2w4k8": ((2048, 2, 4, 8), None),
    "t2048r2w4k16": ((2048, 2, 4, 16), None),
    "t2048r4w4k8": ((2048, 4, 4, 8), None),
    "t2048r2w2k16": ((2048, 2, 2, 16), None),
    "t4096r2w4k8": ((4096, 2, 4, 8), None),
    "t1024r4w2k16": ((1024, 4, 2, 16), None),
    "t2048r2w8k16": ((2048, 2, 8, 16), None),
    "rule_s8192k4": ((2048, 2, 8, 8), (8192, 4)),
    "rule_s4096k16": ((2048, 2, 8, 8), (4096, 16)),
}
CELLS = [(64, 131072), (16, 262144), (32, 65544), (128, 65544), (128, 151936), (8, 131072),
         (64, 20000), (1, 131072), (100, 32768), (4, 262144)]  # fmt: skip


def configure(tile) -> None:
    bwd.SPLIT_FOLD_BLOCK, bwd.SPLIT_FOLD_ROWS, bwd.SPLIT_FOLD_WARPS, bwd.SPLIT_FOLD_PER_SM = tile


def reference(dy, dh, h, w, eps=1e-6):
    h64 = h.double().requires_grad_()
    w64 = w.double().requires_grad_()
    (h64 * torch.rsqrt(h64.square().mean(-1, keepdim=True) + eps) * w64).backward(dy.double())
    return (h64.grad + dh.double()).to(h.dtype), w64.grad.to(w.dtype)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--samples", type=int, default=21)
    ap.add_argument("--budget-s", type=float, default=120.0)
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    lane = ColdLane()
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    g = torch.Generator(device="cuda").manual_seed(1516)
    default = VARIANTS["rule"][0]
    with args.out.open("w") as f:
        for rows, n in CELLS:
            if time.time() - t0 > args.budget_s:
                print("budget reached", flush=True)
                break
            h, dy, dh = (torch.randn(rows, n, device="cuda", generator=g).to(BF) for _ in range(3))
            w = (1 + 0.1 * torch.randn(n, device="cuda", generator=g)).to(BF)
            ref = reference(dy, dh, h, w)
            rule = bwd.bwd_plan(rows, n, h.device)
            graphs, outs = {}, {}
            for name, (tile, stats) in VARIANTS.items():
                plan = None if stats is None else RowPlan.split_for(rows, n, sm, *stats)
                configure(tile)  # module constants read at launch: captured into the graph

                def fn(plan=plan, dy=dy, dh=dh, h=h, w=w):
                    return bwd.add_rms_norm_backward(dy, dh, h, w, 1e-6, plan=plan)

                try:
                    for o, r in zip(fn(), ref, strict=True):
                        assert_close(o, r, msg=f"{name} {rows}x{n}")
                    graphs[name], outs[name] = lane.graph(fn)
                except Exception as e:  # record, keep going
                    print(f"{rows}x{n} {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            configure(default)
            us = lane.medians(graphs, args.samples)
            bad = []
            for name, gr in graphs.items():
                for o in outs[name]:
                    o.fill_(float("nan"))
                gr.replay()
                torch.cuda.synchronize()
                try:
                    for o, r in zip(outs[name], ref, strict=True):
                        assert_close(o, r, msg=f"{name} {rows}x{n} after timing")
                except AssertionError as e:
                    print(str(e)[:200], flush=True)
                    bad.append(name)
            row = {
                "rows": rows,
                "width": n,
                "rule": str(rule),
                "us": us,
                "failed_after_timing": bad,
            }
            f.write(json.dumps(row) + "\n")
            f.flush()
            best = min(us, key=us.get) if us else "-"
            print(f"{rows}x{n} [{rule.kind}]: " + " ".join(f"{k} {v:.1f}" for k, v in us.items())
                  + f" | best {best}", flush=True)  # fmt: skip
            del graphs, outs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
