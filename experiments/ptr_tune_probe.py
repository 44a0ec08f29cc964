"""Why does the 127x65 @ 65x255 pointer-path GEMM leave no ``tuning_log`` entry on the H200
(test_gemm_rules_gpu.py::test_pointer_autotuning_is_logged_with_its_time)? Prints the path, the
autotuner's cache and bench_time around the call, and the log."""

from __future__ import annotations

import torch

import warpgauge as wg
from warpgauge.kernels import gemm as gm

g = torch.Generator(device="cuda").manual_seed(51)
a = torch.randn(127, 65, generator=g, device="cuda").to(torch.bfloat16)
b = torch.randn(65, 255, generator=g, device="cuda").to(torch.bfloat16)
c = torch.empty(127, 255, device="cuda", dtype=torch.bfloat16)
print("path", gm._path(a, b, c, "m"))
k = gm._KERNELS["m"]
print("kernel", type(k), getattr(k, "fn", None))
print(
    "cache before", len(getattr(k, "cache", {})), "bench_time", getattr(k, "bench_time", "absent")
)
orig = gm._tuned_launch


def spy(kernel, grid, *args, **meta):
    print(
        "  _tuned_launch called; cache",
        len(kernel.cache),
        "bench",
        getattr(kernel, "bench_time", None),
    )
    orig(kernel, grid, *args, **meta)
    print(
        "  after; cache",
        len(kernel.cache),
        "bench",
        getattr(kernel, "bench_time", None),
        "best",
        getattr(kernel, "best_config", None),
    )


gm._tuned_launch = spy
y = wg.gemm(a, b)
torch.cuda.synchronize()
print("cache after", len(k.cache), "bench_time", getattr(k, "bench_time", "absent"))
print("log", gm.tuning_log())
y2 = gm.gemm(a, b)
print("direct module gemm; log", len(gm.tuning_log()))
print("err", (y.double() - (a.double() @ b.double())).abs().max().item())
