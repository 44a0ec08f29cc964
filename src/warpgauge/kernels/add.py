"""Elementwise add: FP32 math, one rounding to the inputs' dtype.

I/O: read x and y, write out: 3 * numel * esize bytes. The element count is a runtime argument,
so a new size never compiles a new kernel. Contiguous inputs take a flat 1-D kernel; inputs
whose rows are strided (a slice of a wider tensor) take a 2-D kernel that reads each row through
its stride, without a copy.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._checks import check_same_device, check_same_dtype, check_tensor, rows_view
from ._launch import cdiv, empty, launch, next_pow2
from .work import Work, esize

BLOCK = 4096  # 16 elements per thread at 8 warps: 2-4 16-byte vectors in flight per thread
NUM_WARPS = 8
# At most SMALL_N elements (contiguous): blocks of SMALL_BLOCK in SMALL_WARPS warps. Cold, 257
# elements, one CUDA graph per variant, rotated (results/h200-session19/add_probe.log): 3.46 us
# in 256-wide blocks of 2 warps against 3.78 for 4096 x 8 warps (max-autotune's add 3.30);
# at 4097 the 4096 x 8 block was the fastest (3.78 against 3.94). One more compiled variant,
# whatever the size.
SMALL_N = 1024
SMALL_BLOCK = 256
SMALL_WARPS = 2


def work(numel: int, dtype: torch.dtype) -> Work:
    return Work(bytes=3 * numel * esize(dtype), flops=numel)


@triton.jit
def _add_flat(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n:
        # A full block, unmasked: the loads are 16-byte vectors whatever n is. With one masked
        # body, an n that Triton cannot prove a multiple of 16 (3000017) makes every access
        # scalar: 0.61x torch.add there (results/20261201-091514-default).
        x = tl.load(x_ptr + offs).to(tl.float32)
        y = tl.load(y_ptr + offs).to(tl.float32)
        tl.store(out_ptr + offs, (x + y).to(out_ptr.dtype.element_ty))
    else:  # the last, partial block
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
        y = tl.load(y_ptr + offs, mask=m).to(tl.float32)
        tl.store(out_ptr + offs, (x + y).to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def _add_rows(x_ptr, y_ptr, out_ptr, width, x_stride, y_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = cols < width
    x = tl.load(x_ptr + row * x_stride + cols, mask=m).to(tl.float32)
    y = tl.load(y_ptr + row * y_stride + cols, mask=m).to(tl.float32)
    tl.store(out_ptr + row * width + cols, (x + y).to(out_ptr.dtype.element_ty), mask=m)


def validate(x, y):
    check_tensor("x", x)
    check_tensor("y", y)
    check_same_device([("x", x), ("y", y)])
    check_same_dtype([("x", x), ("y", y)])
    if x.shape != y.shape:
        raise ValueError(
            f"y has shape {tuple(y.shape)} but x has {tuple(x.shape)}; add needs equal shapes "
            "(broadcast first with torch.broadcast_tensors(x, y) and .contiguous())"
        )


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    validate(x, y)
    out = empty(x.shape, x.dtype, x.device)
    n = x.numel()
    if n == 0:
        return out
    if x.is_contiguous() and y.is_contiguous():
        blk, warps = (SMALL_BLOCK, SMALL_WARPS) if n <= SMALL_N else (BLOCK, NUM_WARPS)
        launch(_add_flat, (cdiv(n, blk),), x, y, out, n, BLOCK=blk, num_warps=warps)
        return out
    x2, xs = rows_view("x", x)
    y2, ys = rows_view("y", y)
    rows, width = x2.shape
    blk = min(BLOCK, next_pow2(width))
    launch(
        _add_rows,
        (rows, cdiv(width, blk)),
        x2,
        y2,
        out,
        width,
        xs,
        ys,
        BLOCK=blk,
        num_warps=max(1, min(NUM_WARPS, blk // 512)),
    )
    return out
