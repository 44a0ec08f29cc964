"""GPU sweep of the INT4 grad-input kernel's split over N (issue 11, session 20).

``int4_linear_grad_input`` (dx = dy @ W for a frozen INT4 W, the backward of every adapter-training
step) ran one program per (row tile, weight group) and looped over all of N: 32 programs at
batch 1 with K = 4096. The fwd_bwd run results/20261203-172413-training measured the step at
0.18x dense at 1x4096x4096 and 0.12x at 16x14336x4096. This sweep times the kernel alone in
VARIANTS (the split's programs per SM, the reduction step, the scale folded into dy or into
the decoded weight; "old": no split, the kernel before), beside the dense product dy @ W
(BF16, the dequantized weight), warm (one weight) and cold (weights rotated over > 3x L2), in
CUDA-graph replay; each variant is checked against FP64 before it is timed.

    PYTHONPATH=src python3 experiments/int4grad20_sweep.py --out $OUT/int4grad20.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from warpgauge.kernels import int4 as i4
from warpgauge.quant import quantize_int4

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_timer import bench_graph, l2_bytes  # noqa: E402  (same folder)

SHAPES = [(1, 4096, 4096), (16, 14336, 4096), (1, 14336, 4096), (1, 4096, 14336),
          (4, 4096, 4096), (16, 4096, 4096), (1, 28672, 8192), (1, 8192, 8192),
          (64, 4096, 4096), (64, 14336, 4096), (256, 14336, 4096), (1, 128256, 4096),
          (8, 5120, 2048), (32, 11008, 4096)]  # fmt: skip
# (name, GRAD_FOLD_SCALES, GRAD_BLOCK_N, GRAD_PROGRAMS_PER_SM); "old": the kernel before 2f1bb16
# (a fifth field, GRAD_DECODE, 0 unless given: the nibble decode of the folded path)
VARIANTS = [("old", False, 64, 0), ("w4", False, 64, 4), ("f4", True, 64, 4), ("f8", True, 64, 8),
            ("f4n128", True, 128, 4), ("f8n128", True, 128, 8), ("f2n128", True, 128, 2),
            ("f4n128b", True, 128, 4, 1), ("f4n128p", True, 128, 4, 2)]  # fmt: skip
# --set gemv (prepared in session 21): the streaming FMA grad-input (int4.GRAD_GEMV,
# kernels/int4_grad.py) at batch <= 2 against the default tile kernel (f4n128b); a sixth field
# holds module settings: GRAD_GEMV_GPP, GRAD_GEMV_BLOCK_N, GRAD_GEMV_WARPS, GRAD_PROGRAMS_PER_SM
GEMV_SHAPES = [(1, 4096, 4096), (1, 14336, 4096), (1, 4096, 14336), (1, 8192, 8192),
               (1, 28672, 8192), (1, 128256, 4096), (2, 4096, 4096), (2, 28672, 8192)]  # fmt: skip
GEMV_VARIANTS = [("f4n128b", True, 128, 4, 1, {})] + [
    (f"gemv_g{g}n{bn}w{w}p{per}", True, 128, per, 1,
     {"GRAD_GEMV": True, "GRAD_GEMV_GPP": g, "GRAD_GEMV_BLOCK_N": bn, "GRAD_GEMV_WARPS": w})
    for g, bn, w, per in ((1, 32, 4, 4), (1, 64, 4, 4), (2, 32, 4, 4), (1, 32, 4, 8), (2, 64, 8, 4),
                          (1, 16, 2, 8), (4, 16, 4, 4))
]  # fmt: skip
DEFAULTS = {k: getattr(i4, k) for k in ("GRAD_FOLD_SCALES", "GRAD_BLOCK_N", "GRAD_PROGRAMS_PER_SM",
            "GRAD_DECODE", "GRAD_GEMV", "GRAD_GEMV_GPP", "GRAD_GEMV_BLOCK_N", "GRAD_GEMV_WARPS")}  # fmt: skip


def rotate(fns):
    k = [0]

    def fn():
        k[0] = (k[0] + 1) % len(fns)
        return fns[k[0]]()

    return fn


def one_shape(M, N, K, sm, variants=VARIANTS):
    torch.manual_seed(M + N + K)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    qw = quantize_int4(w, 128)
    exact = qw.dequantize(torch.float32).double()
    l2 = l2_bytes()
    qws = [qw] + [quantize_int4(w.roll(i, 0), 128) for i in range(1, min(-(-6 * l2 // (N * K)), 8))]
    wds = [q.dequantize(torch.bfloat16) for q in qws[: min(len(qws), -(-3 * l2 // (2 * N * K)))]]
    g = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    ref = (g.double() @ exact).float()
    scale = ref.abs().max().item()
    res = {"M": M, "N": N, "K": K, "cold_copies": len(qws), "dense_cold_copies": len(wds)}
    for lane, n in (("warm", 1), ("cold", None)):
        dense = [lambda wd=wd: g @ wd for wd in (wds[:1] if n else wds)]
        res[f"dense_{lane}_us"] = bench_graph(rotate(dense))[0] * 1e6
        for name, fold, bn, per, *dec in variants:
            if name == "old" and (lane == "cold" or M * N * K > 16 * 14336 * 4096):
                continue
            for k, v in DEFAULTS.items():
                setattr(i4, k, v)
            i4.GRAD_FOLD_SCALES, i4.GRAD_BLOCK_N, i4.GRAD_PROGRAMS_PER_SM = fold, bn, per
            i4.GRAD_DECODE = dec[0] if dec else 0
            for k, v in (dec[1] if len(dec) > 1 else {}).items():
                setattr(i4, k, v)
            tiles = -(-M // (16 if M <= i4.GEMV_MAX_M else 64)) * (K // 128)
            if i4.GRAD_GEMV and M <= i4.GRAD_GEMV_MAX_M:  # the streaming kernel's programs
                tiles = M * -(-(K // 128) // i4.GRAD_GEMV_GPP)
            split, _ = i4.grad_input_split(M, N, tiles, sm)
            dx = i4.int4_linear_grad_input(g, qw)
            err = (dx.float() - ref).abs().max().item() / scale
            if not err < 1e-2:
                res[f"{name}_error"] = err
                continue
            calls = [lambda q=q: i4.int4_linear_grad_input(g, q) for q in (qws[:1] if n else qws)]
            res[f"{name}_{lane}_us"] = bench_graph(rotate(calls))[0] * 1e6
            res[f"{name}_split"] = split
    for k, v in DEFAULTS.items():
        setattr(i4, k, v)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget", type=float, default=150.0)
    ap.add_argument("--set", choices=("tile", "gemv"), default="tile")
    a = ap.parse_args()
    shapes, variants = (GEMV_SHAPES, GEMV_VARIANTS) if a.set == "gemv" else (SHAPES, VARIANTS)
    t_end = time.time() + a.budget
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for M, N, K in shapes:
        if time.time() > t_end:
            print("budget spent", flush=True)
            break
        rows.append(one_shape(M, N, K, sm, variants))
        print(json.dumps(rows[-1]), flush=True)
        torch.cuda.empty_cache()
        with open(a.out, "w") as f:  # every shape kept as it finishes
            json.dump({"sm_count": sm, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
