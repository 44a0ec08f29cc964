"""Fused residual add + RMSNorm, forward and backward.

Contract (design.md): ``h = dtype(float32(x) + float32(r))``;
``y = dtype(float32(h) * rsqrt(mean(float32(h)^2) + eps) * float32(w))``; returns ``(y, h)``.
The statistics use the *rounded* ``h``, exactly what the next layer sees.

I/O per forward call: read x, r (rows*width each) and w (width); write y and h:
(4 * rows * width + width) * esize bytes. Looped and split plans read ``h`` back for the second
pass (it was just written by the same program or launch, usually still in L2).

Backward: inputs dy (grad of y), optional dh (grad flowing into the returned h), saved h and w.
rstd is recomputed from h. dx = rstd * (w*dy) - rstd^3 * h * sum(h*w*dy) / width (+ dh), shared by
x and residual. dw = sum over rows of dy * h * rstd, computed deterministically: programs own
blocks of columns and groups of rows and write FP32 partials; a finish kernel adds the groups in
a fixed order and rounds once. No atomics anywhere.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._checks import check_eps, check_same_device, check_same_dtype, check_tensor, rows_view
from .._device import device_info
from ._launch import empty, empty_rows_like, launch, row_plan
from .plans import RowPlan
from .work import Work, esize


def work(rows: int, width: int, dtype: torch.dtype) -> Work:
    # read x, r, w; write y, h; ~6 flops/element
    return Work(bytes=(4 * rows * width + width) * esize(dtype), flops=6 * rows * width)


# ------------------------------------------------------------------------------------ forward


@triton.jit
def _h_chunk(x_ptr, r_ptr, h_ptr, idx, mask):
    x = tl.load(x_ptr + idx, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + idx, mask=mask, other=0.0).to(tl.float32)
    h = (x + r).to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + idx, h, mask=mask)
    return h.to(tl.float32)


@triton.jit
def _rms_resident(
    x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, x_stride, r_stride, eps, N: tl.constexpr, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * x_stride + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * r_stride + offs, mask=mask, other=0.0).to(tl.float32)
    h = (x + r).to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + row * N + offs, h, mask=mask)
    hf = h.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(hf * hf, 0) / N + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * N + offs, (hf * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_looped(
    x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, x_stride, r_stride, eps, N: tl.constexpr, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        idx = start + offs
        m = idx < N
        x = tl.load(x_ptr + row * x_stride + idx, mask=m, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * r_stride + idx, mask=m, other=0.0).to(tl.float32)
        h = (x + r).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + row * N + idx, h, mask=m)
        hf = h.to(tl.float32)
        acc += hf * hf
    rstd = 1.0 / tl.sqrt(tl.sum(acc, 0) / N + eps)
    tl.debug_barrier()  # h written above by other threads of this program becomes visible
    for start in range(0, N, BLOCK):
        idx = start + offs
        m = idx < N
        hf = tl.load(h_ptr + row * N + idx, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + idx, mask=m, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * N + idx, (hf * rstd * w).to(y_ptr.dtype.element_ty), mask=m)


@triton.jit
def _rms_split_stats(
    x_ptr,
    r_ptr,
    h_ptr,
    part_ptr,
    x_stride,
    r_stride,
    chunk,
    n_chunks,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # I/O: read a chunk of x and r; write that chunk of h and one float (sum of squares).
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    lo = c * chunk
    for start in range(lo, lo + chunk, BLOCK):
        idx = start + offs
        m = idx < N
        x = tl.load(x_ptr + row * x_stride + idx, mask=m, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * r_stride + idx, mask=m, other=0.0).to(tl.float32)
        h = (x + r).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + row * N + idx, h, mask=m)
        hf = h.to(tl.float32)
        acc += hf * hf
    tl.store(part_ptr + row * n_chunks + c, tl.sum(acc, 0))


@triton.jit
def _rms_split_write(
    w_ptr,
    y_ptr,
    h_ptr,
    part_ptr,
    eps,
    chunk,
    n_chunks,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    SPLIT_PAD: tl.constexpr,
):
    # I/O: read the row's partial sums, a chunk of h and w; write a chunk of y.
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    k = tl.arange(0, SPLIT_PAD)
    ss = tl.sum(tl.load(part_ptr + row * n_chunks + k, mask=k < n_chunks, other=0.0), 0)
    rstd = 1.0 / tl.sqrt(ss / N + eps)
    offs = tl.arange(0, BLOCK)
    lo = c * chunk
    for start in range(lo, lo + chunk, BLOCK):
        idx = start + offs
        m = idx < N
        hf = tl.load(h_ptr + row * N + idx, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + idx, mask=m, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * N + idx, (hf * rstd * w).to(y_ptr.dtype.element_ty), mask=m)


def validate(x, residual, weight, eps):
    check_tensor("x", x)
    check_tensor("residual", residual)
    check_tensor("weight", weight)
    check_same_device([("x", x), ("residual", residual), ("weight", weight)])
    check_same_dtype([("x", x), ("residual", residual)])
    if residual.shape != x.shape:
        raise ValueError(
            f"residual has shape {tuple(residual.shape)} but x has {tuple(x.shape)}; they must match"
        )
    if weight.dim() != 1 or (x.dim() > 0 and weight.shape[0] != x.shape[-1]):
        raise ValueError(
            f"weight must be 1-D with one entry per column: expected shape ({x.shape[-1] if x.dim() else 1},), "
            f"got {tuple(weight.shape)}"
        )
    if weight.stride(0) != 1 and weight.numel() > 1:
        raise ValueError("weight must be contiguous; pass weight.contiguous()")
    return check_eps(eps)


def add_rms_norm(x, residual, weight, eps: float = 1e-6, plan: RowPlan | None = None):
    """Launcher: returns (y, h), both new contiguous tensors shaped like ``x``."""
    eps = validate(x, residual, weight, eps)
    x2, xs = rows_view("x", x)
    r2, rs = rows_view("residual", residual)
    y = empty_rows_like(x)
    h = empty_rows_like(x)
    rows, n = x2.shape
    if rows == 0:
        return y, h
    p = row_plan(rows, n, x.device, plan)
    if p.kind == "resident":
        p = RowPlan("resident", p.resident_block(n, False), p.num_warps)
        launch(
            _rms_resident,
            (rows,),
            x2,
            r2,
            weight,
            y,
            h,
            xs,
            rs,
            eps,
            N=n,
            BLOCK=p.block,
            num_warps=p.num_warps,
        )
    elif p.kind == "looped":
        launch(
            _rms_looped,
            (rows,),
            x2,
            r2,
            weight,
            y,
            h,
            xs,
            rs,
            eps,
            N=n,
            BLOCK=p.block,
            num_warps=p.num_warps,
        )
    else:
        chunk, n_chunks = p.chunk(n), p.n_chunks(n)
        part = empty((rows, n_chunks), torch.float32, x.device)
        launch(
            _rms_split_stats,
            (rows, n_chunks),
            x2,
            r2,
            h,
            part,
            xs,
            rs,
            chunk,
            n_chunks,
            N=n,
            BLOCK=p.block,
            num_warps=p.num_warps,
        )
        launch(
            _rms_split_write,
            (rows, n_chunks),
            weight,
            y,
            h,
            part,
            eps,
            chunk,
            n_chunks,
            N=n,
            BLOCK=p.block,
            SPLIT_PAD=triton.next_power_of_2(n_chunks),
            num_warps=p.num_warps,
        )
    return y, h


# ----------------------------------------------------------------------------------- backward


@triton.jit
def _dx_math(hf, dy, w, dh_ptr, idx, m, rstd, c, HAS_DH: tl.constexpr):
    dx = rstd * (w * dy) - (rstd * rstd * rstd) * hf * c
    if HAS_DH:
        dx += tl.load(dh_ptr + idx, mask=m, other=0.0).to(tl.float32)
    return dx


@triton.jit
def _rms_bwd_resident(
    dy_ptr,
    dh_ptr,
    h_ptr,
    w_ptr,
    dx_ptr,
    rstd_ptr,
    eps,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_DH: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    m = offs < N
    idx = row * N + offs
    hf = tl.load(h_ptr + idx, mask=m, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + idx, mask=m, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + offs, mask=m, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(hf * hf, 0) / N + eps)
    c = tl.sum(hf * w * dy, 0) / N
    dx = _dx_math(hf, dy, w, dh_ptr, idx, m, rstd, c, HAS_DH)
    tl.store(dx_ptr + idx, dx.to(dx_ptr.dtype.element_ty), mask=m)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def _rms_bwd_looped(
    dy_ptr,
    dh_ptr,
    h_ptr,
    w_ptr,
    dx_ptr,
    rstd_ptr,
    eps,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_DH: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    ss = tl.zeros([BLOCK], tl.float32)
    dot = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        m = cols < N
        hf = tl.load(h_ptr + row * N + cols, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * N + cols, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        ss += hf * hf
        dot += hf * w * dy
    rstd = 1.0 / tl.sqrt(tl.sum(ss, 0) / N + eps)
    c = tl.sum(dot, 0) / N
    for start in range(0, N, BLOCK):
        cols = start + offs
        m = cols < N
        idx = row * N + cols
        hf = tl.load(h_ptr + idx, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + idx, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        dx = _dx_math(hf, dy, w, dh_ptr, idx, m, rstd, c, HAS_DH)
        tl.store(dx_ptr + idx, dx.to(dx_ptr.dtype.element_ty), mask=m)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def _rms_bwd_split_stats(
    dy_ptr, h_ptr, w_ptr, part_ptr, chunk, n_chunks, N: tl.constexpr, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    ss = tl.zeros([BLOCK], tl.float32)
    dot = tl.zeros([BLOCK], tl.float32)
    lo = c * chunk
    for start in range(lo, lo + chunk, BLOCK):
        cols = start + offs
        m = cols < N
        hf = tl.load(h_ptr + row * N + cols, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * N + cols, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        ss += hf * hf
        dot += hf * w * dy
    out = part_ptr + (row * n_chunks + c) * 2
    tl.store(out, tl.sum(ss, 0))
    tl.store(out + 1, tl.sum(dot, 0))


@triton.jit
def _rms_bwd_split_write(
    dy_ptr,
    dh_ptr,
    h_ptr,
    w_ptr,
    dx_ptr,
    rstd_ptr,
    part_ptr,
    eps,
    chunk,
    n_chunks,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    SPLIT_PAD: tl.constexpr,
    HAS_DH: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    k = tl.arange(0, SPLIT_PAD)
    pk = part_ptr + (row * n_chunks + k) * 2
    ss = tl.sum(tl.load(pk, mask=k < n_chunks, other=0.0), 0)
    cdot = tl.sum(tl.load(pk + 1, mask=k < n_chunks, other=0.0), 0) / N
    rstd = 1.0 / tl.sqrt(ss / N + eps)
    offs = tl.arange(0, BLOCK)
    lo = c * chunk
    for start in range(lo, lo + chunk, BLOCK):
        cols = start + offs
        m = cols < N
        idx = row * N + cols
        hf = tl.load(h_ptr + idx, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + idx, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        dx = _dx_math(hf, dy, w, dh_ptr, idx, m, rstd, cdot, HAS_DH)
        tl.store(dx_ptr + idx, dx.to(dx_ptr.dtype.element_ty), mask=m)
    if c == 0:
        tl.store(rstd_ptr + row, rstd)


@triton.jit
def _rms_dw_partial(
    dy_ptr, h_ptr, rstd_ptr, part_ptr, rows, rows_per_group, N: tl.constexpr, BLOCK: tl.constexpr
):
    # Program (column block, row group) sums dy * h * rstd over its rows into FP32 partials.
    cb = tl.program_id(0)
    g = tl.program_id(1)
    cols = cb * BLOCK + tl.arange(0, BLOCK)
    m = cols < N
    acc = tl.zeros([BLOCK], tl.float32)
    r0 = g * rows_per_group
    count = tl.minimum(rows_per_group, rows - r0)
    base = r0.to(tl.int64) * N
    hp = h_ptr + base + cols
    dyp = dy_ptr + base + cols
    rp = rstd_ptr + r0
    for _ in range(0, count):
        hf = tl.load(hp, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dyp, mask=m, other=0.0).to(tl.float32)
        acc += dy * hf * tl.load(rp)
        hp += N
        dyp += N
        rp += 1
    tl.store(part_ptr + g.to(tl.int64) * N + cols, acc, mask=m)


@triton.jit
def _rms_dw_finish(part_ptr, dw_ptr, groups, N: tl.constexpr, BLOCK: tl.constexpr):
    # Adds the row groups' partials in a fixed order (g = 0, 1, ...) and rounds once.
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = cols < N
    acc = tl.zeros([BLOCK], tl.float32)
    for g in range(0, groups):
        acc += tl.load(part_ptr + g * N + cols, mask=m, other=0.0)
    tl.store(dw_ptr + cols, acc.to(dw_ptr.dtype.element_ty), mask=m)


DW_BLOCK = 256  # columns per dw program: 1 KB of FP32 partials per row group


def add_rms_norm_backward(
    dy, dh, h, weight, eps: float, need_dx: bool = True, need_dw: bool = True, plan=None
):
    """Gradients (dx, dw): dx is shared by x and residual (and includes dh, the gradient that
    flowed into the returned h); dw is deterministic (fixed-order FP32 partials, no atomics)."""
    n = h.shape[-1]
    rows = h.numel() // n
    dy = dy.contiguous()
    h = h.contiguous()
    dh = dh.contiguous() if dh is not None else None
    dx = empty(h.shape, h.dtype, h.device) if need_dx else None
    dw = empty(weight.shape, weight.dtype, weight.device) if need_dw else None
    if rows == 0:
        if dw is not None:
            dw.zero_()
        return dx, dw
    rstd = empty((rows,), torch.float32, h.device)
    p = row_plan(rows, n, h.device, plan)
    has_dh = dh is not None
    dh_arg = dh if has_dh else dy  # never read when HAS_DH is False
    dx_arg = dx if dx is not None else empty(h.shape, h.dtype, h.device)
    if p.kind == "resident":
        launch(_rms_bwd_resident, (rows,),
            dy, dh_arg, h, weight, dx_arg, rstd, eps, N=n, BLOCK=p.block, HAS_DH=has_dh,
            num_warps=p.num_warps,
        )  # fmt: skip
    elif p.kind == "looped":
        launch(_rms_bwd_looped, (rows,),
            dy, dh_arg, h, weight, dx_arg, rstd, eps, N=n, BLOCK=p.block, HAS_DH=has_dh,
            num_warps=p.num_warps,
        )  # fmt: skip
    else:
        chunk, n_chunks = p.chunk(n), p.n_chunks(n)
        part = empty((rows, n_chunks, 2), torch.float32, h.device)
        launch(
            _rms_bwd_split_stats,
            (rows, n_chunks),
            dy,
            h,
            weight,
            part,
            chunk,
            n_chunks,
            N=n,
            BLOCK=p.block,
            num_warps=p.num_warps,
        )
        launch(_rms_bwd_split_write, (rows, n_chunks),
            dy, dh_arg, h, weight, dx_arg, rstd, part, eps, chunk, n_chunks, N=n, BLOCK=p.block,
            SPLIT_PAD=triton.next_power_of_2(n_chunks), HAS_DH=has_dh, num_warps=p.num_warps,
        )  # fmt: skip
    if need_dw:
        col_blocks = triton.cdiv(n, DW_BLOCK)
        sm = device_info(h.device).sm_count
        groups = max(1, min(rows, triton.cdiv(4 * sm, col_blocks), 1024))
        rows_per_group = triton.cdiv(rows, groups)
        groups = triton.cdiv(rows, rows_per_group)
        part = empty((groups, n), torch.float32, h.device)
        launch(
            _rms_dw_partial,
            (col_blocks, groups),
            dy,
            h,
            rstd,
            part,
            rows,
            rows_per_group,
            N=n,
            BLOCK=DW_BLOCK,
            num_warps=2,
        )
        launch(_rms_dw_finish, (col_blocks,), part, dw, groups, N=n, BLOCK=DW_BLOCK, num_warps=2)
    return dx, dw
