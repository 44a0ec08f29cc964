"""The pointer-path tuning log under the GPU tests' conditions (WARPGAUGE_POISON_OUTPUTS=1, the
kernel module's ``gemm`` with ``out=``, the tiny odd products of test_gemm_rules_gpu.py in their
order), printing the autotuner's cache and the log after each call."""

import os

os.environ.setdefault("WARPGAUGE_POISON_OUTPUTS", "1")

import torch  # noqa: E402

from warpgauge.kernels import gemm as gm  # noqa: E402
from warpgauge.kernels.gemm import gemm  # noqa: E402

k = gm._KERNELS["m"]
orig = gm._tuned_launch


def spy(kernel, grid, *args, **meta):
    c0, b0 = len(kernel.cache), getattr(kernel, "bench_time", None)
    orig(kernel, grid, *args, **meta)
    print(
        f"   _tuned_launch: cache {c0}->{len(kernel.cache)} bench {b0}->{getattr(kernel, 'bench_time', None)}"
        f" log {len(gm.tuning_log())}",
        flush=True,
    )


gm._tuned_launch = spy


def rand(*shape, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(torch.bfloat16)


for layout in ("NN", "NT", "TN"):
    for M, N, K in ((127, 255, 65), (65, 255, 127), (127, 65, 255)):
        a = rand(K, M, seed=M).t() if layout[0] == "T" else rand(M, K, seed=M)
        b = rand(N, K, seed=N).t() if layout[1] == "T" else rand(K, N, seed=N)
        out = torch.full((M, N), float("nan"), dtype=torch.bfloat16, device="cuda")
        print(layout, M, N, K, "path", gm._path(a, b, out, "m"), flush=True)
        gemm(a, b, out=out)
torch.cuda.synchronize()
print("final log", gm.tuning_log())
