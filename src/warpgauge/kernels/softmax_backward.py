"""Softmax backward: dx = y * (dy - sum(y * dy)) per row, FP32 math, one rounding.

y and dy are contiguous rows (y is the forward's output). I/O: read y and dy, write dx:
3 * rows * width * esize bytes (looped plans read y and dy twice, the second time from L2 on a
persistent grid; split plans write one FP32 partial dot product per chunk).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._device import device_info
from ._launch import empty, launch
from ._rows import align_for, body_span, edge_index, plan_for
from .plans import RowPlan

# dx = y * (dy - sum(y * dy)); y and dy are contiguous rows (y is the forward's output).


@triton.jit(do_not_specialize=["n_rows"])
def _softmax_bwd_resident(
    y_ptr,
    dy_ptr,
    dx_ptr,
    n_rows,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
    ALIGN: tl.constexpr,
):
    # I/O: read ROWS rows of y and dy once, write ROWS rows of dx.
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = (rows < n_rows)[:, None]
    base = rows * N
    offs = tl.arange(0, BLOCK)[None, :]
    if ALIGN:
        head, start, blen = body_span(base, N)
        head, start, blen = head[:, None], start[:, None], blen[:, None]
        bm = rmask & (offs < blen)
        y = tl.load(y_ptr + start + offs, mask=bm, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + start + offs, mask=bm, other=0.0).to(tl.float32)
        ecol, em = edge_index(head, blen, N)
        em = em & rmask
        eo = base[:, None] + ecol
        ye = tl.load(y_ptr + eo, mask=em, other=0.0).to(tl.float32)
        dye = tl.load(dy_ptr + eo, mask=em, other=0.0).to(tl.float32)
        dot = (tl.sum(y * dy, 1) + tl.sum(ye * dye, 1))[:, None]
        tl.store(dx_ptr + start + offs, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=bm)
        tl.store(dx_ptr + eo, (ye * (dye - dot)).to(dx_ptr.dtype.element_ty), mask=em)
    else:
        mask = rmask & (offs < N)
        idx = base[:, None] + offs
        y = tl.load(y_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        dot = tl.sum(y * dy, 1)[:, None]
        tl.store(dx_ptr + idx, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n_rows"])
def _softmax_bwd_looped(
    y_ptr,
    dy_ptr,
    dx_ptr,
    n_rows,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    EV_KEEP: tl.constexpr,
    EV_DROP: tl.constexpr,
):
    # I/O: read y and dy twice (the second pass from L2 with a persistent grid), write dx.
    offs = tl.arange(0, BLOCK)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    first = pid.to(tl.int64)
    for i in range(0, tl.cdiv(n_rows - pid, nprog)):
        base = (first + i * nprog) * N
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, N, BLOCK):
            idx = start + offs
            y = tl.load(y_ptr + base + idx, mask=idx < N, other=0.0, eviction_policy=EV_KEEP)
            dy = tl.load(dy_ptr + base + idx, mask=idx < N, other=0.0, eviction_policy=EV_KEEP)
            acc += y.to(tl.float32) * dy.to(tl.float32)
        dot = tl.sum(acc, 0)
        for start in range(0, N, BLOCK):
            idx = start + offs
            y = tl.load(y_ptr + base + idx, mask=idx < N, other=0.0, eviction_policy=EV_DROP)
            dy = tl.load(dy_ptr + base + idx, mask=idx < N, other=0.0, eviction_policy=EV_DROP)
            dx = y.to(tl.float32) * (dy.to(tl.float32) - dot)
            tl.store(dx_ptr + base + idx, dx.to(dx_ptr.dtype.element_ty), mask=idx < N,
                     eviction_policy=EV_DROP)  # fmt: skip


@triton.jit(do_not_specialize=["chunk", "n_chunks"])
def _softmax_bwd_split_stats(
    y_ptr, dy_ptr, part_ptr, chunk, n_chunks, N: tl.constexpr, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    base = row * N
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    nb = chunk // BLOCK  # chunk is a multiple of BLOCK: lo keeps its divisibility (vectors)
    lo = c * nb * BLOCK
    for start in range(lo, lo + nb * BLOCK, BLOCK):
        idx = start + offs
        y = tl.load(y_ptr + base + idx, mask=idx < N, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + base + idx, mask=idx < N, other=0.0).to(tl.float32)
        acc += y * dy
    tl.store(part_ptr + row * n_chunks + c, tl.sum(acc, 0))


@triton.jit(do_not_specialize=["chunk", "n_chunks"])
def _softmax_bwd_split_write(
    y_ptr,
    dy_ptr,
    dx_ptr,
    part_ptr,
    chunk,
    n_chunks,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    SPLIT_PAD: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    k = tl.arange(0, SPLIT_PAD)
    dot = tl.sum(tl.load(part_ptr + row * n_chunks + k, mask=k < n_chunks, other=0.0), 0)
    base = row * N
    offs = tl.arange(0, BLOCK)
    nb = chunk // BLOCK  # chunk is a multiple of BLOCK: lo keeps its divisibility (vectors)
    lo = c * nb * BLOCK
    for start in range(lo, lo + nb * BLOCK, BLOCK):
        idx = start + offs
        y = tl.load(y_ptr + base + idx, mask=idx < N, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + base + idx, mask=idx < N, other=0.0).to(tl.float32)
        tl.store(dx_ptr + base + idx, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=idx < N)


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, plan: RowPlan | None = None):
    """Gradient of softmax given its output ``y`` and the incoming gradient ``dy``."""
    y = y.contiguous()
    dy = dy.contiguous()
    dx = empty(y.shape, y.dtype, y.device)
    n = y.shape[-1] if y.dim() else 1
    rows = y.numel() // n if n else 0
    if rows == 0:
        return dx
    p = plan_for(rows, n, y.device, plan, "softmax_bwd")
    if p.kind == "coop":
        raise ValueError(
            "plan: cooperative (coop) plans are forward-only; pass a resident, looped or split "
            "plan, or plan=None for the rule"
        )
    if p.kind == "resident":
        align = p.align and align_for(n, n)
        launch(_softmax_bwd_resident, (p.programs(rows, 1),), y, dy, dx, rows,
            N=n, BLOCK=p.resident_block(n, align), ROWS=p.rows, ALIGN=align,
            num_warps=p.num_warps,
        )  # fmt: skip
    elif p.kind == "looped":
        grid = (p.programs(rows, device_info(y.device).sm_count),)
        keep, drop = ("evict_last", "evict_first") if p.evict else ("", "")
        launch(_softmax_bwd_looped, grid, y, dy, dx, rows,
            N=n, BLOCK=p.block, EV_KEEP=keep, EV_DROP=drop, num_warps=p.num_warps,
        )  # fmt: skip
    else:
        chunk, n_chunks = p.chunk(n), p.n_chunks(n)
        part = empty((rows, n_chunks), torch.float32, y.device)
        launch(
            _softmax_bwd_split_stats,
            (rows, n_chunks),
            y,
            dy,
            part,
            chunk,
            n_chunks,
            N=n,
            BLOCK=p.block,
            num_warps=p.num_warps,
        )
        launch(
            _softmax_bwd_split_write,
            (rows, n_chunks),
            y,
            dy,
            dx,
            part,
            chunk,
            n_chunks,
            N=n,
            BLOCK=p.block,
            SPLIT_PAD=p.split_pad(n),
            num_warps=p.num_warps,
        )
    return dx
