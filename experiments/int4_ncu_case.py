"""One INT4 GEMV call per plan on 1x28672x8192 (BF16), for Nsight Compute: which stalls and
which throughput limit each kernel (the default FMA GEMV, two pipelined FMA GEMVs, a
pipelined tensor-core GEMV, tinygemm).

    ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        python3 experiments/int4_ncu_case.py
"""

from __future__ import annotations

import torch

from warpgauge.bench.providers import tinygemm_layout
from warpgauge.kernels import int4 as i4
from warpgauge.quant import Int4Weight


def main():
    N, K = 28672, 8192
    g = torch.Generator(device="cuda").manual_seed(0)
    packed = torch.randint(0, 256, (N, K // 2), generator=g, device="cuda", dtype=torch.uint8)
    scales = (torch.rand(N, K // 128, generator=g, device="cuda") * 0.02 + 0.001).bfloat16()
    x = torch.randn(1, K, generator=g, device="cuda").bfloat16()
    plans = [None, i4.Int4Plan(block_m=1, block_n=64, split_k=2, num_warps=2, pipeline=3),
             i4.Int4Plan(block_m=1, block_n=16, groups_per_iter=8, split_k=1, num_warps=2,
                         pipeline=3),
             i4.Int4Plan(block_m=16, block_n=64, groups_per_iter=4, split_k=2, num_warps=4,
                         pipeline=3)]  # fmt: skip
    for p in plans:  # compile outside the profiled launches (ncu filters on the kernel name)
        i4.int4_linear_packed(x, packed, scales, 128, p)
    tg = tinygemm_layout(Int4Weight(packed, scales, (N, K), 128))
    torch.ops.aten._weight_int4pack_mm(x, *tg)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("profiled")
    for p in plans:
        i4.int4_linear_packed(x, packed, scales, 128, p)
    torch.ops.aten._weight_int4pack_mm(x, *tg)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


if __name__ == "__main__":
    main()
