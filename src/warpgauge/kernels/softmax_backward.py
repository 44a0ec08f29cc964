"""Softmax backward: dx = y * (dy - sum(y * dy)) per row, FP32 math, one rounding.

y and dy are contiguous rows (y is the forward's output). I/O: read y and dy, write dx:
3 * rows * width * esize bytes (looped plans read y and dy twice, the second time from L2 on a
persistent grid; split plans write one FP32 partial dot product per chunk; cooperative plans
read DRAM once and exchange one partial dot product per chunk through L2).

Cooperative plans (``RowPlan.coop(block, warps[, sub])``, ``_softmax_bwd_coop``): a row's ``G``
chunks on ``G`` adjacent programs, as the forward's ``softmax_coop``. Each program computes its
chunk's sum(y * dy), publishes it with a marker word (a slot is never 0), waits for the row's
other chunks, adds the ``G`` partials in chunk order and writes its chunk's dx. Without ``sub``
the chunk's y and dy stay in registers across the exchange; with ``sub`` the chunk is walked in
``sub``-wide slices twice, the second time from L1 / L2 (only the chunks of the programs in
flight are live). The looped plan instead gives each program a whole row, so with hundreds of
rows in flight (a 128256-wide row of y and dy is 500 KB) the second pass no longer fits L2 and
goes back to DRAM (smbwd14 sweep, ``docs/training.md``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._device import device_info
from ._launch import empty, launch, next_pow2
from ._rows import (
    align_for,
    body_span,
    coop_slots,
    coop_spin,
    edge_index,
    pack2,
    plan_for,
    unpack2,
    wait_slots,
)
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


@triton.jit
def _bwd_chunk_dot(y_ptr, dy_ptr, start, base, blen, ecol, em, j, BLOCK: tl.constexpr,
                   SUB: tl.constexpr, EV: tl.constexpr):  # fmt: skip
    """sum(y * dy) over chunk ``j`` of a row in ``SUB``-wide slices (chunk 0 also takes the
    row's edge). The owner of a chunk and a row-mate computing it for a late owner call this with
    the same arguments, so both get the same bits."""
    emj = em & (ecol < tl.where(j == 0, 1 << 30, 0))
    ye = tl.load(y_ptr + base + ecol, mask=emj, other=0.0).to(tl.float32)
    dye = tl.load(dy_ptr + base + ecol, mask=emj, other=0.0).to(tl.float32)
    acc = tl.zeros([SUB], tl.float32)
    offs = tl.arange(0, SUB)
    for q in range(0, tl.minimum(blen - j * BLOCK, BLOCK), SUB):
        idx = j * BLOCK + q + offs
        m = idx < blen
        y = tl.load(y_ptr + start + idx, mask=m, other=0.0, eviction_policy=EV)
        dy = tl.load(dy_ptr + start + idx, mask=m, other=0.0, eviction_policy=EV)
        acc += y.to(tl.float32) * dy.to(tl.float32)
    return tl.sum(acc, 0) + tl.sum(ye * dye, 0)


@triton.jit(do_not_specialize=["n_rows", "spin"])
def _softmax_bwd_coop(
    y_ptr,
    dy_ptr,
    dx_ptr,
    slot_ptr,
    n_rows,
    spin,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    SUB: tl.constexpr,
    G: tl.constexpr,
    GP: tl.constexpr,
    ALIGN: tl.constexpr,
    HOLD: tl.constexpr,
    EV_KEEP: tl.constexpr,
    EV_DROP: tl.constexpr,
):
    # Program pid takes chunk pid % G of row pid // G (a row's programs are adjacent in the grid,
    # so they run together). HOLD: the chunk's y and dy stay in registers (SUB == BLOCK); else
    # they are read again slice by slice after the exchange. A program whose row-mates are not
    # scheduled within ``spin`` polls computes their partials itself (``_bwd_chunk_dot``).
    # I/O: read y and dy once from DRAM (not HOLD: plus an L1 / L2 re-read), write dx once,
    # 8 bytes per program through L2.
    pid = tl.program_id(0)
    c = pid % G
    row = (pid // G).to(tl.int64)
    base = row * N
    if ALIGN:  # y, dy and dx rows share their head (all have row stride N)
        head, start, blen = body_span(base, N)
        ecol, em = edge_index(head, blen, N)
    else:
        start = base
        blen = N
        ecol = tl.arange(0, 16)
        em = ecol < 0
    if HOLD:
        emc = em & (ecol < tl.where(c == 0, 1 << 30, 0))
        ye = tl.load(y_ptr + base + ecol, mask=emc, other=0.0).to(tl.float32)
        dye = tl.load(dy_ptr + base + ecol, mask=emc, other=0.0).to(tl.float32)
        idx = c * BLOCK + tl.arange(0, BLOCK)
        bm = idx < blen
        y = tl.load(y_ptr + start + idx, mask=bm, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + start + idx, mask=bm, other=0.0).to(tl.float32)
        part = tl.sum(y * dy, 0) + tl.sum(ye * dye, 0)
    else:
        part = _bwd_chunk_dot(y_ptr, dy_ptr, start, base, blen, ecol, em, c, BLOCK, SUB, EV_KEEP)
    slots = slot_ptr + row * G
    one = tl.full([], 1.0, tl.float32)
    # relaxed: the slot's value is all a reader takes from it
    tl.atomic_xchg(slots + c, pack2(one, part), sem="relaxed")
    v, missing = wait_slots(slots, spin, G, GP)
    k = tl.arange(0, GP)
    if missing > 0:  # row-mates not scheduled in time: compute their partials here
        for j in range(0, G):
            if tl.sum(tl.where(k == j, v, 0), 0) == 0:  # still missing (others keep their bits)
                pj = _bwd_chunk_dot(y_ptr, dy_ptr, start, base, blen, ecol, em, j, BLOCK, SUB, "")
                v = tl.where(k == j, pack2(one, pj), v)
    _one, pv = unpack2(v)
    dot = tl.sum(tl.where(k < G, pv, 0.0), 0)
    if HOLD:
        tl.store(dx_ptr + start + idx, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=bm)
        tl.store(dx_ptr + base + ecol, (ye * (dye - dot)).to(dx_ptr.dtype.element_ty), mask=emc)
    else:
        offs = tl.arange(0, SUB)
        for q in range(0, tl.minimum(blen - c * BLOCK, BLOCK), SUB):
            idx2 = c * BLOCK + q + offs
            m = idx2 < blen
            y2 = tl.load(y_ptr + start + idx2, mask=m, other=0.0, eviction_policy=EV_DROP)
            dy2 = tl.load(dy_ptr + start + idx2, mask=m, other=0.0, eviction_policy=EV_DROP)
            dx = y2.to(tl.float32) * (dy2.to(tl.float32) - dot)
            tl.store(dx_ptr + start + idx2, dx.to(dx_ptr.dtype.element_ty), mask=m,
                     eviction_policy=EV_DROP)  # fmt: skip
        emc2 = em & (ecol < tl.where(c == 0, 1 << 30, 0))
        ye2 = tl.load(y_ptr + base + ecol, mask=emc2, other=0.0).to(tl.float32)
        dye2 = tl.load(dy_ptr + base + ecol, mask=emc2, other=0.0).to(tl.float32)
        tl.store(dx_ptr + base + ecol, (ye2 * (dye2 - dot)).to(dx_ptr.dtype.element_ty),
                 mask=emc2)  # fmt: skip


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
        if p.programs_per_sm:
            raise ValueError(
                f"plan: the persistent cooperative plan (programs_per_sm={p.programs_per_sm}) is "
                f"forward-only; pass RowPlan.coop({p.block}, {p.num_warps}) (or with sub=...) "
                "or plan=None for the rule"
            )
        align = p.align and align_for(n, n)
        g = p.coop_chunks(n, align)
        keep, drop = ("evict_last", "evict_first") if p.evict else ("", "")
        launch(_softmax_bwd_coop, (rows * g,), y, dy, dx, coop_slots(rows, g, y.device), rows,
            coop_spin(), N=n, BLOCK=p.block, SUB=p.sub or p.block, G=g,
            GP=next_pow2(g), ALIGN=align, HOLD=not p.sub, EV_KEEP=keep,
            EV_DROP=drop, num_warps=p.num_warps,
        )  # fmt: skip
    elif p.kind == "resident":
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
