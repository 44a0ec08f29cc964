"""One softmax call of a plan at a shape, for ncu (physical DRAM bytes, L2 hit rates).

    ncu --clock-control none -k regex:softmax --metrics dram__bytes_read.sum,... \
        python3 experiments/rows10_ncu_case.py 4096 131072 "coop(16384,8,sub=4096,evict=True,fast_exp=True)"
"""

from __future__ import annotations

import sys

import torch

from warpgauge.kernels import softmax as softmax_k
from warpgauge.kernels.plans import RowPlan


def main():
    rows, n = int(sys.argv[1]), int(sys.argv[2])
    plans = [eval("RowPlan." + s, {"RowPlan": RowPlan}) for s in sys.argv[3:]]  # noqa: S307
    x = torch.randn((rows, n), device="cuda").mul_(3.0).to(torch.bfloat16)
    for p in plans:
        softmax_k.softmax(x, plan=p)  # compile (the sweep's cache) outside the profiled kernels
    torch.cuda.synchronize()
    flush = torch.empty(4 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8,
                        device="cuda")  # fmt: skip
    for p in plans:
        flush.fill_(1)
        torch.cuda.synchronize()
        softmax_k.softmax(x, plan=p)
        torch.cuda.synchronize()
        print(repr(p), flush=True)


if __name__ == "__main__":
    main()
