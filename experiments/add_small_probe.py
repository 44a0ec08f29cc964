"""Small elementwise adds in a warm CUDA graph: block and warp choices (GPU probe, session 19).

The default run 20261203-115220-default has add 257 warm at 2.19 us against 1.11 us for
``torch.compile`` max-autotune (torch.add 2.43, default compile 2.37). This probe times, per size,
one CUDA graph per variant (warm: no flush; cold: ``_cold.ColdLane``), variants rotated sample by
sample, 61 samples: ``_add_flat`` at (BLOCK, num_warps) in {(4096, 8) (the launcher's), (1024, 4),
(512, 4), (256, 2), (128, 1)}, ``torch.add``, and max-autotune's compiled add. Each variant's
output is checked against x + y in FP32 rounded once. Prints one line per size.
"""

from __future__ import annotations

import statistics
import sys

import torch
import triton

sys.path.insert(0, "experiments")
from _cold import ColdLane  # noqa: E402

from warpgauge.kernels.add import _add_flat  # noqa: E402

VARIANTS = ((4096, 8), (1024, 4), (512, 4), (256, 2), (128, 1))


def warm(graphs, samples):
    times = {k: [] for k in graphs}
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    names = list(graphs)
    for i in range(samples):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            ev[0].record()
            graphs[name].replay()
            ev[1].record()
            torch.cuda.synchronize()
            times[name].append(ev[0].elapsed_time(ev[1]) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def one_size(lane: ColdLane, n: int) -> None:
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn_like(x)
    ref = (x.float() + y.float()).to(torch.bfloat16)
    fns = {}
    for block, warps in VARIANTS:

        def f(block=block, warps=warps):
            out = torch.empty_like(x)
            _add_flat[(triton.cdiv(n, block),)](x, y, out, n, BLOCK=block, num_warps=warps)
            return out

        fns[f"b{block}w{warps}"] = f
    fns["torch"] = lambda: torch.add(x, y)
    compiled = torch.compile(lambda a, b: a + b, mode="max-autotune-no-cudagraphs")
    fns["max_autotune"] = lambda: compiled(x, y)
    graphs = {}
    for name, fn in fns.items():
        g, out = lane.graph(fn)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, ref), name
        graphs[name] = g
    w = warm(graphs, 61)
    c = lane.medians(graphs, 61)
    print(f"add {n}: warm " + " ".join(f"{k} {v:.2f}" for k, v in w.items()), flush=True)
    print(f"add {n}: cold " + " ".join(f"{k} {v:.2f}" for k, v in c.items()), flush=True)


def main() -> None:
    lane = ColdLane()
    for n in (257, 4097, 65537, 1 << 20):
        one_size(lane, n)


if __name__ == "__main__":
    main()
