"""A first look at speed on a CUDA GPU (issue 2's acceptance check, before the full harness).

Device time by CUDA-graph replay (triton.testing.do_bench_cudagraph, median) for DRAM-bound
shapes whose data exceed L2; the INT4 GEMV against dense F.linear with L2 flushed before every
call (triton.testing.do_bench, median), since its weight fits in L2. TB/s counts compulsory bytes
from each kernel's work model. Writes JSON and a text table to --out.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import subprocess
import time

import torch
import torch.nn.functional as F
import triton
import triton.testing as tt

import warpgauge as wg
from warpgauge.kernels import gemm as gemm_k
from warpgauge.kernels import int4 as int4_k
from warpgauge.kernels import rmsnorm as rms_k
from warpgauge.kernels import softmax as softmax_k


def graph_us(fn):
    return tt.do_bench_cudagraph(fn, rep=200, return_mode="median") * 1e3


def cold_us(fn):
    return tt.do_bench(fn, warmup=50, rep=300, return_mode="median") * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda")
    torch.manual_seed(0)
    rows = []

    # clock warm-up: ~300 ms of matmuls
    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    t0 = time.time()
    while time.time() - t0 < 0.3:
        a @ a
    torch.cuda.synchronize()

    R, N = 32768, 8192
    x = torch.randn(R, N, device=dev, dtype=torch.bfloat16)
    r = torch.randn(R, N, device=dev, dtype=torch.bfloat16)
    w = torch.randn(N, device=dev, dtype=torch.bfloat16)
    sm_bytes = softmax_k.work(R, N, torch.bfloat16).bytes
    rms_bytes = rms_k.work(R, N, torch.bfloat16).bytes
    for name, fn, ref_fn, nbytes in [
        (
            "softmax 32768x8192 bf16",
            lambda: wg.softmax(x),
            lambda: torch.softmax(x.float(), -1).to(x.dtype),
            sm_bytes,
        ),
        ("add_rms_norm 32768x8192 bf16", lambda: wg.add_rms_norm(x, r, w), None, rms_bytes),
    ]:
        us = graph_us(fn)
        row = {"case": name, "warpgauge_us": us, "tbps": nbytes / us / 1e6}
        if ref_fn is not None:
            ref_us = graph_us(ref_fn)
            row.update(torch_us=ref_us, torch_tbps=nbytes / ref_us / 1e6)
        rows.append(row)

    if True:
        M, Nn, K = 4096, 4096, 4096
        A = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
        B = torch.randn(K, Nn, device=dev, dtype=torch.bfloat16)
        wg.gemm(A, B)
        us, mm_us = graph_us(lambda: wg.gemm(A, B)), graph_us(lambda: torch.mm(A, B))
        fl = gemm_k.work(M, Nn, K, torch.bfloat16).flops
        rows.append(
            {
                "case": f"gemm {M}x{Nn}x{K} bf16",
                "warpgauge_us": us,
                "torch_us": mm_us,
                "tflops": fl / us / 1e6,
                "torch_tflops": fl / mm_us / 1e6,
                "ratio_vs_torch": mm_us / us,
            }
        )

    Nn, K = 8192, 8192
    W = torch.randn(Nn, K, device=dev, dtype=torch.bfloat16)
    q = wg.quantize_int4(W)
    Wd = q.dequantize()
    xv = torch.randn(1, K, device=dev, dtype=torch.bfloat16)
    wg.int4_linear(xv, q)
    us = cold_us(lambda: wg.int4_linear(xv, q))
    dense_us = cold_us(lambda: F.linear(xv, Wd))
    rows.append(
        {
            "case": "int4_linear 1x8192x8192 bf16, L2 flushed",
            "warpgauge_us": us,
            "dense_bf16_linear_us": dense_us,
            "tbps_int4_bytes": int4_k.work(1, Nn, K, 128, torch.bfloat16).bytes / us / 1e6,
            "speedup_vs_dense": dense_us / us,
        }
    )

    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    meta = {
        "gpu": torch.cuda.get_device_name(),
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "commit": commit,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (out / "first_look.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    lines = [f"{k}: {v}" for k, v in meta.items()]
    for row in rows:
        lines.append(
            "  ".join(
                f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()
            )
        )
    (out / "first_look.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
