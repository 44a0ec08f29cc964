"""Quick device-time sweep of the row operators' plans on a CUDA GPU (graph replay, median).

For each shape: warpgauge with the automatic plan, each forced plan that applies, and PyTorch
eager, with TB/s on compulsory bytes. A tuning aid for plans.py; the harness produces the claims.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import torch
import triton.testing as tt

import warpgauge as wg
from warpgauge.kernels import rmsnorm as rms_k
from warpgauge.kernels import softmax as softmax_k
from warpgauge.kernels.plans import RowPlan

SHAPES = [
    (32, 127),
    (1024, 1024),
    (512, 4097),
    (4, 32769),
    (64, 131072),
    (8, 16384),
    (16384, 4096),
    (32768, 8192),
    (8192, 32000),
    (4096, 131072),
]


def us(fn):
    return tt.do_bench_cudagraph(fn, rep=100, return_mode="median") * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()
    dt = getattr(torch, args.dtype)
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    rows_out = []
    for R, N in SHAPES:
        x = torch.randn(R, N, device="cuda", dtype=dt)
        r = torch.randn(R, N, device="cuda", dtype=dt)
        w = torch.randn(N, device="cuda", dtype=dt)
        sb = softmax_k.work(R, N, dt).bytes
        rb = rms_k.work(R, N, dt).bytes
        plans = {
            "auto": None,
            "looped4096": RowPlan.looped(4096),
            "looped8192": RowPlan.looped(8192),
            "looped2048": RowPlan.looped(2048),
            "split": RowPlan.split_for(R, N, sm),
        }
        if N <= 32768:
            plans["resident"] = RowPlan.resident(N)
        rec = {"shape": f"{R}x{N}", "auto_plan": str(RowPlan.for_shape(R, N, sm))}
        rec["torch_softmax_tbps"] = sb / us(lambda: torch.softmax(x, -1)) / 1e6
        rec["torch_rms_tbps"] = (
            rb / us(lambda: torch.nn.functional.rms_norm(x + r, (N,), w, 1e-6)) / 1e6
        )
        for name, p in plans.items():
            try:
                rec[f"softmax_{name}_tbps"] = (
                    sb / us(lambda p=p: softmax_k.softmax(x, plan=p)) / 1e6
                )
                rec[f"rms_{name}_tbps"] = (
                    rb / us(lambda p=p: rms_k.add_rms_norm(x, r, w, 1e-6, plan=p)) / 1e6
                )
            except Exception as e:  # a forced plan that cannot compile (registers) is reported
                rec[f"{name}_error"] = repr(e)[:200]
        rec["row_sum_tbps"] = (R * N * x.element_size()) / us(lambda: wg.row_sum(x)) / 1e6
        rows_out.append(rec)
        print(
            json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in rec.items()}),
            flush=True,
        )
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"row_sweep_{args.dtype}.json").write_text(json.dumps(rows_out, indent=1))


if __name__ == "__main__":
    main()
