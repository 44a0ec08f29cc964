"""Fused residual add + RMSNorm, forward and backward.

Contract (design.md): ``h = dtype(float32(x) + float32(r))``;
``y = dtype(float32(h) * rsqrt(mean(float32(h)^2) + tl.cast(eps, tl.float32)) * float32(w))``; returns ``(y, h)``.
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
from ._launch import empty, empty_rows_like, launch, next_pow2
from ._rows import (
    align_for,
    body_span,
    coop_slots,
    coop_spin,
    edge_index,
    pack2,
    plan_for,
    stride8,
    unpack2,
    wait_slots,
)
from .plans import RowPlan
from .rmsnorm_coop import _rms_coop_loop
from .rmsnorm_coop import launch_args as coop_loop_args
from .softmax_coop import reg_cap
from .work import Work, esize


def work(rows: int, width: int, dtype: torch.dtype) -> Work:
    # read x, r, w; write y, h; ~6 flops/element
    return Work(bytes=(4 * rows * width + width) * esize(dtype), flops=6 * rows * width)


# ------------------------------------------------------------------------------------ forward


@triton.jit(do_not_specialize=["n_rows"])
def _rms_resident(
    x_ptr,
    r_ptr,
    w_ptr,
    y_ptr,
    h_ptr,
    x_stride,
    r_stride,
    n_rows,
    eps,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
    ALIGN: tl.constexpr,
    S8: tl.constexpr,
    W_EARLY: tl.constexpr = False,
):
    # I/O: read ROWS rows of x and r, w once per program; write ROWS rows of h and y.
    # W_EARLY issues w's load with x and r (its latency hidden behind theirs) instead of after
    # the row's reduction.
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = (rows < n_rows)[:, None]
    if S8:
        x_stride = x_stride // 8 * 8  # == x_stride (S8); Triton infers divisibility by 8
        r_stride = r_stride // 8 * 8
    offs = tl.arange(0, BLOCK)[None, :]
    if ALIGN:  # x_stride == r_stride == N (launcher): every tensor's rows share their head
        base = rows * N
        head, start, blen = body_span(base, N)
        head, start, blen = head[:, None], start[:, None], blen[:, None]
        bm = rmask & (offs < blen)
        ecol, em = edge_index(head, blen, N)
        em = em & rmask
        if W_EARLY:
            w = tl.load(w_ptr + head + offs, mask=bm, other=0.0)
            we = tl.load(w_ptr + ecol, mask=em, other=0.0)
        x = tl.load(x_ptr + start + offs, mask=bm, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + start + offs, mask=bm, other=0.0).to(tl.float32)
        h = (x + r).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + start + offs, h, mask=bm)
        hf = h.to(tl.float32)
        eo = base[:, None] + ecol
        xe = tl.load(x_ptr + eo, mask=em, other=0.0).to(tl.float32)
        re = tl.load(r_ptr + eo, mask=em, other=0.0).to(tl.float32)
        he = (xe + re).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + eo, he, mask=em)
        hef = he.to(tl.float32)
        rstd = (
            1.0
            / tl.sqrt((tl.sum(hf * hf, 1) + tl.sum(hef * hef, 1)) / N + tl.cast(eps, tl.float32))
        )[:, None]
        if not W_EARLY:
            w = tl.load(w_ptr + head + offs, mask=bm, other=0.0)
            we = tl.load(w_ptr + ecol, mask=em, other=0.0)
        y = (hf * rstd * w.to(tl.float32)).to(y_ptr.dtype.element_ty)
        tl.store(y_ptr + start + offs, y, mask=bm)
        tl.store(y_ptr + eo, (hef * rstd * we.to(tl.float32)).to(y_ptr.dtype.element_ty), mask=em)
    else:
        cm = offs < N
        mask = rmask & cm
        if W_EARLY:
            w = tl.load(w_ptr + offs, mask=cm, other=0.0)
        x = tl.load(x_ptr + (rows * x_stride)[:, None] + offs, mask=mask, other=0.0)
        r = tl.load(r_ptr + (rows * r_stride)[:, None] + offs, mask=mask, other=0.0)
        h = (x.to(tl.float32) + r.to(tl.float32)).to(h_ptr.dtype.element_ty)
        ob = (rows * N)[:, None]
        tl.store(h_ptr + ob + offs, h, mask=mask)
        hf = h.to(tl.float32)
        rstd = (1.0 / tl.sqrt(tl.sum(hf * hf, 1) / N + tl.cast(eps, tl.float32)))[:, None]
        if not W_EARLY:
            w = tl.load(w_ptr + offs, mask=cm, other=0.0)
        y = (hf * rstd * w.to(tl.float32)).to(y_ptr.dtype.element_ty)
        tl.store(y_ptr + ob + offs, y, mask=mask)


@triton.jit(do_not_specialize=["n_rows"])
def _rms_resident_pf(
    x_ptr,
    r_ptr,
    w_ptr,
    y_ptr,
    h_ptr,
    x_stride,
    r_stride,
    n_rows,
    eps,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    S8: tl.constexpr,
):
    # Persistent resident plan: rows pid, pid + programs, ...; the next row's x and r are loaded
    # before the current row is computed and written. I/O as _rms_resident (w read once).
    if S8:
        x_stride = x_stride // 8 * 8  # == x_stride (S8); Triton infers divisibility by 8
        r_stride = r_stride // 8 * 8
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs = tl.arange(0, BLOCK)
    cm = offs < N
    w = tl.load(w_ptr + offs, mask=cm, other=0.0).to(tl.float32)
    row = pid.to(tl.int64)
    lim = tl.where(row < n_rows, N, 0)
    x_n = tl.load(x_ptr + row * x_stride + offs, mask=offs < lim, other=0.0)
    r_n = tl.load(r_ptr + row * r_stride + offs, mask=offs < lim, other=0.0)
    for _ in range(0, tl.cdiv(n_rows - pid, nprog)):
        h = (x_n.to(tl.float32) + r_n.to(tl.float32)).to(h_ptr.dtype.element_ty)
        ob = row * N
        row += nprog
        lim = tl.where(row < n_rows, N, 0)
        x_n = tl.load(x_ptr + row * x_stride + offs, mask=offs < lim, other=0.0)
        r_n = tl.load(r_ptr + row * r_stride + offs, mask=offs < lim, other=0.0)
        tl.store(h_ptr + ob + offs, h, mask=cm)
        hf = h.to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(hf * hf, 0) / N + tl.cast(eps, tl.float32))
        tl.store(y_ptr + ob + offs, (hf * rstd * w).to(y_ptr.dtype.element_ty), mask=cm)


@triton.jit(do_not_specialize=["n_rows"])
def _rms_looped(
    x_ptr,
    r_ptr,
    w_ptr,
    y_ptr,
    h_ptr,
    x_stride,
    r_stride,
    n_rows,
    eps,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    ALIGN: tl.constexpr,
    S8: tl.constexpr,
    EV_KEEP: tl.constexpr,
    EV_DROP: tl.constexpr,
):
    # I/O: read x and r, write h; then read h back (L2 when few rows are in flight) and w,
    # write y. Rows pid, pid + programs, ... (persistent grid when programs < rows).
    if S8:
        x_stride = x_stride // 8 * 8  # == x_stride (S8); Triton infers divisibility by 8
        r_stride = r_stride // 8 * 8
    offs = tl.arange(0, BLOCK)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    first = pid.to(tl.int64)
    for i in range(0, tl.cdiv(n_rows - pid, nprog)):
        row = first + i * nprog
        ob = row * N
        if ALIGN:
            head, start, blen = body_span(ob, N)
            xs = start
            rs = start
            hs = start
            ecol, em = edge_index(head, blen, N)
            xe = tl.load(x_ptr + ob + ecol, mask=em, other=0.0).to(tl.float32)
            re = tl.load(r_ptr + ob + ecol, mask=em, other=0.0).to(tl.float32)
            he = (xe + re).to(h_ptr.dtype.element_ty)
            tl.store(h_ptr + ob + ecol, he, mask=em)
            hef = he.to(tl.float32)
            ss = tl.sum(hef * hef, 0)
        else:
            head = 0
            blen = N
            xs = row * x_stride
            rs = row * r_stride
            hs = ob
            ss = tl.zeros([], tl.float32)
        acc = tl.zeros([BLOCK], tl.float32)
        for c in range(0, blen, BLOCK):
            idx = c + offs
            m = idx < blen
            x = tl.load(x_ptr + xs + idx, mask=m, other=0.0, eviction_policy=EV_DROP)
            r = tl.load(r_ptr + rs + idx, mask=m, other=0.0, eviction_policy=EV_DROP)
            h = (x.to(tl.float32) + r.to(tl.float32)).to(h_ptr.dtype.element_ty)
            tl.store(h_ptr + hs + idx, h, mask=m, eviction_policy=EV_KEEP)
            hf = h.to(tl.float32)
            acc += hf * hf
        rstd = 1.0 / tl.sqrt((tl.sum(acc, 0) + ss) / N + tl.cast(eps, tl.float32))
        tl.debug_barrier()  # h written above by other threads of this program becomes visible
        for c in range(0, blen, BLOCK):
            idx = c + offs
            m = idx < blen
            hf = tl.load(h_ptr + hs + idx, mask=m, other=0.0, eviction_policy=EV_DROP)
            w = tl.load(w_ptr + head + idx, mask=m, other=0.0, eviction_policy=EV_KEEP)
            y = (hf.to(tl.float32) * rstd * w.to(tl.float32)).to(y_ptr.dtype.element_ty)
            tl.store(y_ptr + hs + idx, y, mask=m, eviction_policy=EV_DROP)
        if ALIGN:
            we = tl.load(w_ptr + ecol, mask=em, other=0.0).to(tl.float32)
            tl.store(y_ptr + ob + ecol, (hef * rstd * we).to(y_ptr.dtype.element_ty), mask=em)


@triton.jit
def _coop_chunk(x_ptr, r_ptr, xs, rs, ob, blen, ecol, em, j, h_ty, BLOCK: tl.constexpr):
    """Chunk ``j`` of a row: h (rounded to the output dtype), h's edge (chunk 0 only) and the
    chunk's sum of squares of h; the same code for the owner and for a program that computes a
    missing chunk itself, so both get the same bits."""
    idx = j * BLOCK + tl.arange(0, BLOCK)
    m = idx < blen
    x = tl.load(x_ptr + xs + idx, mask=m, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + rs + idx, mask=m, other=0.0).to(tl.float32)
    h = (x + r).to(h_ty)
    emj = em & (ecol < tl.where(j == 0, 1 << 30, 0))
    xe = tl.load(x_ptr + ob + ecol, mask=emj, other=0.0).to(tl.float32)
    re = tl.load(r_ptr + ob + ecol, mask=emj, other=0.0).to(tl.float32)
    he = (xe + re).to(h_ty)
    hf = h.to(tl.float32)
    hef = he.to(tl.float32)
    return h, he, tl.sum(hf * hf, 0) + tl.sum(hef * hef, 0)


@triton.jit
def _coop_fallback(x_ptr, r_ptr, xs, rs, ob, blen, ecol, em, v, h_ty, G: tl.constexpr,
                   BLOCK: tl.constexpr):  # fmt: skip
    """Every chunk's sum of squares, computed by this program in slices of BLOCK // 8 (few
    registers: this path runs only when a row-mate is not scheduled within ``spin`` polls; the
    slices sum in another order than the owner's block reduction, within rounding)."""
    k = tl.arange(0, v.shape[0])
    offs = tl.arange(0, BLOCK // 8)
    for j in range(0, G):
        if tl.sum(tl.where(k == j, v, 0), 0) == 0:  # still missing (others keep their bits)
            emj = em & (ecol < tl.where(j == 0, 1 << 30, 0))
            xe = tl.load(x_ptr + ob + ecol, mask=emj, other=0.0).to(tl.float32)
            re = tl.load(r_ptr + ob + ecol, mask=emj, other=0.0).to(tl.float32)
            he = (xe + re).to(h_ty).to(tl.float32)
            acc = tl.zeros([BLOCK // 8], tl.float32)
            for q in range(0, BLOCK, BLOCK // 8):
                idx = j * BLOCK + q + offs
                x = tl.load(x_ptr + xs + idx, mask=idx < blen, other=0.0).to(tl.float32)
                r = tl.load(r_ptr + rs + idx, mask=idx < blen, other=0.0).to(tl.float32)
                h = (x + r).to(h_ty).to(tl.float32)
                acc += h * h
            ss = tl.sum(acc, 0) + tl.sum(he * he, 0)
            v = tl.where(k == j, pack2(tl.full([], 1.0, tl.float32), ss), v)
    return v


@triton.jit(do_not_specialize=["n_rows", "spin"])
def _rms_coop(
    x_ptr,
    r_ptr,
    w_ptr,
    y_ptr,
    h_ptr,
    slot_ptr,
    x_stride,
    r_stride,
    n_rows,
    eps,
    spin,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    G: tl.constexpr,
    GP: tl.constexpr,
    ALIGN: tl.constexpr,
    S8: tl.constexpr,
    W_EARLY: tl.constexpr = False,
):
    # W_EARLY: w's chunk is loaded before the exchange, so its latency hides behind the wait.
    # Cooperative split: program pid takes chunk pid % G of row pid // G, keeps h in registers,
    # publishes the chunk's sum of squares (with a marker word, so a slot is never 0), waits for
    # the row's other chunks, adds them in chunk order and writes y. The G programs of a row are
    # adjacent in the grid, so they run together.
    # I/O: read x and r, write h and y, read w: as the resident plan (+ 8 bytes per program).
    if S8:
        x_stride = x_stride // 8 * 8  # == x_stride (S8); Triton infers divisibility by 8
        r_stride = r_stride // 8 * 8
    pid = tl.program_id(0)
    c = pid % G
    row = (pid // G).to(tl.int64)
    ob = row * N
    if ALIGN:  # x_stride == r_stride == N (launcher): every tensor's rows share their head
        head, start, blen = body_span(ob, N)
        xs = start
        rs = start
        hs = start
        ecol, em = edge_index(head, blen, N)
    else:
        head = 0
        blen = N
        xs = row * x_stride
        rs = row * r_stride
        hs = ob
        ecol = tl.arange(0, 16)
        em = ecol < 0
    h_ty = h_ptr.dtype.element_ty
    idx = c * BLOCK + tl.arange(0, BLOCK)
    m = idx < blen
    emc = em & (ecol < tl.where(c == 0, N, 0))
    if W_EARLY:
        w = tl.load(w_ptr + head + idx, mask=m, other=0.0)
        we = tl.load(w_ptr + ecol, mask=emc, other=0.0)
    h, he, ss = _coop_chunk(x_ptr, r_ptr, xs, rs, ob, blen, ecol, em, c, h_ty, BLOCK)
    slots = slot_ptr + row * G
    tl.atomic_xchg(slots + c, pack2(tl.full([], 1.0, tl.float32), ss))
    tl.store(h_ptr + hs + idx, h, mask=m)
    tl.store(h_ptr + ob + ecol, he, mask=emc)
    v, missing = wait_slots(slots, spin, G, GP)
    k = tl.arange(0, GP)
    if missing > 0:  # row-mates not scheduled in time: compute their sums here
        v = _coop_fallback(x_ptr, r_ptr, xs, rs, ob, blen, ecol, em, v, h_ty, G, BLOCK)
    _one, sv = unpack2(v)
    total = tl.sum(tl.where(k < G, sv, 0.0), 0)
    rstd = 1.0 / tl.sqrt(total / N + tl.cast(eps, tl.float32))
    if not W_EARLY:
        w = tl.load(w_ptr + head + idx, mask=m, other=0.0)
    y = (h.to(tl.float32) * rstd * w.to(tl.float32)).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + hs + idx, y, mask=m)
    if ALIGN:
        if not W_EARLY:
            we = tl.load(w_ptr + ecol, mask=emc, other=0.0)
        ye = (he.to(tl.float32) * rstd * we.to(tl.float32)).to(y_ptr.dtype.element_ty)
        tl.store(y_ptr + ob + ecol, ye, mask=emc)


@triton.jit(do_not_specialize=["chunk", "n_chunks"])
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
    nb = chunk // BLOCK  # chunk is a multiple of BLOCK: lo keeps its divisibility (vectors)
    lo = c * nb * BLOCK
    for start in range(lo, lo + nb * BLOCK, BLOCK):
        idx = start + offs
        m = idx < N
        x = tl.load(x_ptr + row * x_stride + idx, mask=m, other=0.0).to(tl.float32)
        r = tl.load(r_ptr + row * r_stride + idx, mask=m, other=0.0).to(tl.float32)
        h = (x + r).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + row * N + idx, h, mask=m)
        hf = h.to(tl.float32)
        acc += hf * hf
    tl.store(part_ptr + row * n_chunks + c, tl.sum(acc, 0))


@triton.jit(do_not_specialize=["chunk", "n_chunks"])
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
    rstd = 1.0 / tl.sqrt(ss / N + tl.cast(eps, tl.float32))
    offs = tl.arange(0, BLOCK)
    nb = chunk // BLOCK  # chunk is a multiple of BLOCK: lo keeps its divisibility (vectors)
    lo = c * nb * BLOCK
    for start in range(lo, lo + nb * BLOCK, BLOCK):
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
    if x.dim() == 0:
        raise ValueError(
            "x is 0-D; add_rms_norm normalizes over the last dimension, so x needs at least one "
            "dimension (e.g. x.reshape(1, -1) for a single row)"
        )
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
    p = plan_for(rows, n, x.device, plan, "rms", x.element_size())
    align = p.align and align_for(n, xs, rs, n)
    s8 = stride8(xs, rs)
    if p.kind == "resident" and p.programs_per_sm and p.rows == 1 and not align:
        grid = (max(1, min(rows, p.programs_per_sm * device_info(x.device).sm_count)),)
        launch(_rms_resident_pf, grid, x2, r2, weight, y, h, xs, rs, rows, eps,
            N=n, BLOCK=p.resident_block(n, False), S8=s8, num_warps=p.num_warps,
        )  # fmt: skip
    elif p.kind == "resident":
        block = p.resident_block(n, align)
        launch(_rms_resident, (p.programs(rows, 1),), x2, r2, weight, y, h, xs, rs, rows, eps,
            N=n, BLOCK=block, ROWS=p.rows, ALIGN=align, S8=s8, W_EARLY=p.w_early,
            num_warps=p.num_warps,
        )  # fmt: skip
    elif p.kind == "coop" and p.sub:
        g = p.coop_chunks(n, align)
        launch(_rms_coop_loop, (rows * g,), x2, r2, weight, y, h, coop_slots(rows, g, x.device),
            xs, rs, rows, eps, coop_spin(), N=n, G=g, GP=next_pow2(g), ALIGN=align,
            S8=s8, num_warps=p.num_warps, **coop_loop_args(p),
        )  # fmt: skip
    elif p.kind == "coop":
        g = p.coop_chunks(n, align)
        launch(_rms_coop, (rows * g,), x2, r2, weight, y, h, coop_slots(rows, g, x.device),
            xs, rs, rows, eps, coop_spin(), N=n, BLOCK=p.block, G=g,
            GP=next_pow2(g), ALIGN=align, S8=s8, W_EARLY=p.w_early,
            num_warps=p.num_warps, **reg_cap(p),
        )  # fmt: skip
    elif p.kind == "looped":
        grid = (p.programs(rows, device_info(x.device).sm_count),)
        keep, drop = ("evict_last", "evict_first") if p.evict else ("", "")
        launch(_rms_looped, grid, x2, r2, weight, y, h, xs, rs, rows, eps,
            N=n, BLOCK=p.block, ALIGN=align, S8=s8, EV_KEEP=keep, EV_DROP=drop,
            num_warps=p.num_warps,
        )  # fmt: skip
    else:
        chunk, n_chunks = p.chunk(n), p.n_chunks(n)
        part = empty((rows, n_chunks), torch.float32, x.device)
        launch(_rms_split_stats, (rows, n_chunks), x2, r2, h, part, xs, rs, chunk, n_chunks,
            N=n, BLOCK=p.block, num_warps=p.num_warps,
        )  # fmt: skip
        launch(_rms_split_write, (rows, n_chunks), weight, y, h, part, eps, chunk, n_chunks,
            N=n, BLOCK=p.block, SPLIT_PAD=p.split_pad(n), num_warps=p.num_warps,
        )  # fmt: skip
    return y, h


from .rmsnorm_backward import add_rms_norm_backward  # noqa: E402  (re-export)

__all__ = ["work", "validate", "add_rms_norm", "add_rms_norm_backward"]
