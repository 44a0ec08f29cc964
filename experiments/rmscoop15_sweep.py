"""add_rms_norm's cooperative backward (``_rms_bwd_coop``, a forced plan) against the rule's plan
(GPU; written in session 14, run in session 15: results/rows15-h200/rmscoop15; the cooperative
backward failed its GPU tests there and lost to the split plan, and was removed after that run, so
this script now documents that measurement and runs only on commit 35d1811 or earlier).

The training run 20261202-064216-training had add_rms_norm forward + backward at 64x131072 in
66.8 us against ~61 for torch.compile max-autotune (0.91x). Few wide rows take the split backward
there: a stats pass over h and dy, then a write pass that reads them again (dw folded in), then
the finish kernel. The cooperative plan exchanges each row's (sum h^2, sum h*w*dy) between the
programs of a row group through L2 instead, so one launch reads h and dy once. This sweep times
the backward alone (with dh, BF16) per shape for the rule and cooperative variants, cold (a 4x-L2
write and a 2x-L2 read of another buffer before each sample), one CUDA-graph replay per sample,
variants interleaved in rotated order, median of ``--samples``; every variant is checked against
FP64 (dx and dw) before timing.

    PYTHONPATH=src python3 experiments/rmscoop15_sweep.py --out $OUT/rmscoop15.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from warpgauge.kernels import rmsnorm_backward as bwd
from warpgauge.kernels.plans import RowPlan
from warpgauge.reference import assert_close

BF = torch.bfloat16
VARIANTS = {
    "rule": None,
    "c1024w4": RowPlan.coop(1024, 4),
    "c2048w8": RowPlan.coop(2048, 8),
    "c2048w4": RowPlan.coop(2048, 4),
    "c4096w8": RowPlan.coop(4096, 8),
}
CELLS = [(64, 131072), (16, 262144), (1, 131072), (4, 65544), (32, 65544), (128, 65544),
         (64, 20000), (128, 151936), (8, 1048576), (256, 131072), (1024, 32768)]  # fmt: skip


def reference(dy, dh, h, w, eps=1e-6):
    h64 = h.double().requires_grad_()
    w64 = w.double().requires_grad_()
    (h64 * torch.rsqrt(h64.square().mean(-1, keepdim=True) + eps) * w64).backward(dy.double())
    return (h64.grad + dh.double()).to(h.dtype), w64.grad.to(w.dtype)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--samples", type=int, default=21)
    ap.add_argument("--budget-s", type=float, default=150.0)
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(4 * l2, dtype=torch.uint8, device="cuda")
    clean = torch.ones(2 * l2 // 4, dtype=torch.float32, device="cuda").view(-1, 1024)
    sink = torch.empty(1024, dtype=torch.float32, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(15)
    with args.out.open("w") as f:
        for rows, n in CELLS:
            if time.time() - t0 > args.budget_s:
                print("budget reached", flush=True)
                return
            h, dy, dh = (torch.randn(rows, n, device="cuda", generator=g).to(BF) for _ in range(3))
            w = (1 + 0.1 * torch.randn(n, device="cuda", generator=g)).to(BF)
            dx_ref, dw_ref = reference(dy, dh, h, w)
            graphs = {}
            for name, plan in VARIANTS.items():
                fn = lambda plan=plan, dy=dy, dh=dh, h=h, w=w: bwd.add_rms_norm_backward(  # noqa: E731
                    dy, dh, h, w, 1e-6, plan=plan
                )
                try:
                    dx, dw = fn()
                    assert_close(dx, dx_ref, msg=f"{name} {rows}x{n} dx")
                    assert_close(dw, dw_ref, msg=f"{name} {rows}x{n} dw")
                except Exception as e:  # record, keep going
                    print(f"{rows}x{n} {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                    continue
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
            rule = bwd.bwd_plan(rows, n, h.device)
            row = {"rows": rows, "width": n, "rule": str(rule),
                   "us": {k: statistics.median(v) for k, v in times.items()}}  # fmt: skip
            f.write(json.dumps(row) + "\n")
            f.flush()
            best = min(row["us"], key=row["us"].get)
            print(f"{rows}x{n} [{rule.kind}]: " + " ".join(f"{k} {v:.1f}" for k, v in row["us"].items())
                  + f" | best {best}", flush=True)  # fmt: skip
            del graphs


if __name__ == "__main__":
    main()
