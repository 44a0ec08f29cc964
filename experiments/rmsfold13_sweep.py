"""The add_rms_norm backward's split plan with dw folded into its write pass, against the separate
dw pass it replaces (GPU; session 13).

The training run 20261202-043734-training measured add_rms_norm forward + backward at 64x131072
in 82.0 us against 56.6 for torch.compile max-autotune (0.69x). Few wide rows take the split
backward there: a stats kernel (sum h^2, sum h*w*dy per chunk), a write kernel (dx), then a
separate dw pass reading h and dy again, then the finish. ``SPLIT_FOLD_DW`` computes dw's
partials inside the write pass (``_rms_bwd_split_write_dw``); this sweep times the backward
alone, per shape where the rule picks the split plan, for the old path and folded variants
(tile columns, rows per step, warps, programs per SM), cold: before each sample a write of 4x L2
and a read of a separate 2x-L2 buffer, then one CUDA-graph replay of one backward between
events; variants interleaved sample by sample; median of ``--samples``. Every variant is checked
against an FP64 reference (dx and dw) before timing.

    PYTHONPATH=src python3 experiments/rmsfold13_sweep.py --out $OUT/rmsfold13.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from warpgauge.kernels import rmsnorm_backward as bwd
from warpgauge.reference import assert_close

BF = torch.bfloat16
# name -> (fold, block, rows, warps, per_sm)
VARIANTS = {
    "old": (False, 1024, 4, 8, 8),
    "f1024r4w8k8": (True, 1024, 4, 8, 8),
    "f1024r4w8k4": (True, 1024, 4, 8, 4),
    "f1024r4w8k16": (True, 1024, 4, 8, 16),
    "f2048r2w8k8": (True, 2048, 2, 8, 8),
    "f512r4w4k8": (True, 512, 4, 4, 8),
}
ROWS = (1, 4, 16, 32, 64, 100, 128)
WIDTHS = (20000, 32769, 65537, 131072, 151936, 262144)


def configure(v) -> None:
    fold, block, rows, warps, per_sm = v
    bwd.SPLIT_FOLD_DW = fold
    bwd.SPLIT_FOLD_ALIGN = 1  # every width folds in the folded variants (as at b635fd4)
    bwd.SPLIT_FOLD_BLOCK, bwd.SPLIT_FOLD_ROWS = block, rows
    bwd.SPLIT_FOLD_WARPS, bwd.SPLIT_FOLD_PER_SM = warps, per_sm


def reference(dy, dh, h, w, eps=1e-6):
    h64 = h.double().requires_grad_()
    w64 = w.double().requires_grad_()
    y = h64 * torch.rsqrt(h64.square().mean(-1, keepdim=True) + eps) * w64
    y.backward(dy.double())
    return (h64.grad + dh.double()).to(h.dtype), w64.grad.to(w.dtype)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--samples", type=int, default=21)
    ap.add_argument("--budget-s", type=float, default=200.0)
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(4 * l2, dtype=torch.uint8, device="cuda")
    clean = torch.ones(2 * l2 // 4, dtype=torch.float32, device="cuda").view(-1, 1024)
    sink = torch.empty(1024, dtype=torch.float32, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(13)
    with args.out.open("w") as f:
        for n in WIDTHS:
            for rows in ROWS:
                if time.time() - t_start > args.budget_s:
                    print("budget reached", flush=True)
                    return
                plan = bwd.bwd_plan(rows, n, torch.device("cuda"))
                if plan.kind != "split":
                    continue
                h, dy, dh = (torch.randn(rows, n, device="cuda", generator=g).to(BF)
                             for _ in range(3))  # fmt: skip
                w = (1 + 0.1 * torch.randn(n, device="cuda", generator=g)).to(BF)
                dx_ref, dw_ref = reference(dy, dh, h, w)
                graphs = {}
                for name, v in VARIANTS.items():
                    configure(v)
                    fn = lambda dy=dy, dh=dh, h=h, w=w: bwd.add_rms_norm_backward(
                        dy, dh, h, w, 1e-6
                    )  # noqa: E731
                    dx, dw = fn()
                    assert_close(dx, dx_ref, msg=f"{name} {rows}x{n} dx")
                    assert_close(dw, dw_ref, msg=f"{name} {rows}x{n} dw")
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):
                        fn()
                        gr = torch.cuda.CUDAGraph()
                        with torch.cuda.graph(gr, stream=s):
                            fn()
                    torch.cuda.current_stream().wait_stream(s)
                    torch.cuda.synchronize()
                    graphs[name] = gr
                times = {k: [] for k in graphs}
                ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
                for i in range(args.samples):
                    names = list(graphs)
                    names = names[i % len(names) :] + names[: i % len(names)]
                    for name in names:
                        flush.fill_(0x5A)
                        torch.sum(clean, dim=0, out=sink)
                        ev[0].record()
                        graphs[name].replay()
                        ev[1].record()
                        torch.cuda.synchronize()
                        times[name].append(ev[0].elapsed_time(ev[1]) * 1e3)
                row = {"rows": rows, "width": n, "plan": str(plan),
                       "us": {k: statistics.median(v) for k, v in times.items()}}  # fmt: skip
                f.write(json.dumps(row) + "\n")
                f.flush()
                best = min(row["us"], key=row["us"].get)
                print(f"{rows}x{n}: " + " ".join(f"{k} {v:.1f}" for k, v in row["us"].items())
                      + f" | best {best}", flush=True)  # fmt: skip
                del graphs
    configure(VARIANTS["f2048r2w8k8"])
    bwd.SPLIT_FOLD_ALIGN = 8


if __name__ == "__main__":
    main()
