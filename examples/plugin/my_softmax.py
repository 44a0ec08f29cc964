"""Benchmark your own softmax against warpgauge and PyTorch: a provider plug-in.

Run it on a CUDA machine from the repository root (the example directory on the path):

    PYTHONPATH=src:examples/plugin python -m warpgauge bench --suite examples/plugin/suite.toml \\
        --provider my_softmax:register --only warpgauge,torch,my_softmax

The harness gives your kernel the same seeded inputs as every other provider, gates its output
against the FP64 reference (NaN-poisoned memory, so an element it forgets to write fails), and
only then times it: CUDA-graph replay, cold and warm L2, interleaved with warpgauge and PyTorch.
The run directory holds validated, checksummed artifacts (``warpgauge report RUN`` renders them).

A package can publish the same function in the ``warpgauge.providers`` entry-point group instead:

    [project.entry-points."warpgauge.providers"]
    my_softmax = "my_softmax:register"
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from warpgauge.bench.operators import Built


@triton.jit
def _softmax_rows(x_ptr, y_ptr, stride, n_cols, BLOCK: tl.constexpr):
    """One program per row, the whole row in registers (rows up to BLOCK wide)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    y = num / tl.sum(num, axis=0)
    tl.store(y_ptr + row * stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def my_softmax(x: torch.Tensor) -> torch.Tensor:
    rows, n = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(n)
    _softmax_rows[(rows,)](x, y, x.stride(0), n, BLOCK=block, num_warps=4 if block <= 2048 else 8)
    return y


def _fits(ctx) -> str | None:
    if ctx.device.type != "cuda":
        return "my_softmax is a CUDA kernel"
    if ctx.shape["width"] > 16384:
        return "my_softmax holds a row in registers: widths up to 16384"
    return None


def register(reg) -> None:
    """Called once by ``warpgauge bench --provider my_softmax:register``."""

    @reg.provider("softmax", "my_softmax", "my Triton softmax (one row per program)",
                  available=_fits)  # fmt: skip
    def build(inputs, ctx):
        x = inputs["x"]  # seeded random (rows, width) input, the same for every provider
        return Built(lambda: my_softmax(x))  # setup here; only the closure is timed
