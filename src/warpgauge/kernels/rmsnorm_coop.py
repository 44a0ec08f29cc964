"""Cooperative add_rms_norm forward with looped chunks (``RowPlan.coop(block, warps, sub=...)``).

As ``softmax_coop.py`` for softmax: each program walks its ``block``-wide chunk of a row in
``sub``-wide slices. Pass 1 reads x and r, writes h (asking L2 to keep it) and folds the chunk's
sum of squares; after the row's sums are exchanged, pass 2 reads h back (from L2: only the chunks
of the programs in flight are live) with w and writes y. The plain cooperative kernel
(``rmsnorm._rms_coop``) holds h in registers instead.

I/O: read x and r, write h and y, read w (as the resident plan), plus an L2 re-read of h and 8
bytes of statistics per program.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._rows import body_span, edge_index, pack2, unpack2, wait_slots


@triton.jit
def _chunk_sumsq(x_ptr, r_ptr, h_ptr, xs, rs, hs, ob, blen, ecol, em, j, WRITE: tl.constexpr,
                 BLOCK: tl.constexpr, SUB: tl.constexpr, STAGES: tl.constexpr,
                 EV_KEEP: tl.constexpr, EV_DROP: tl.constexpr):  # fmt: skip
    """Sum of squares of h over chunk ``j`` (chunk 0 also takes the row's edge); with WRITE,
    also stores h. A program computing a missing chunk for a row-mate passes WRITE=False (the
    owner writes its own h), so both compute the same bits in the same order."""
    emj = em & (ecol < tl.where(j == 0, 1 << 30, 0))
    xe = tl.load(x_ptr + ob + ecol, mask=emj, other=0.0).to(tl.float32)
    re = tl.load(r_ptr + ob + ecol, mask=emj, other=0.0).to(tl.float32)
    he = (xe + re).to(h_ptr.dtype.element_ty)
    if WRITE:
        tl.store(h_ptr + ob + ecol, he, mask=emj)
    hef = he.to(tl.float32)
    acc = tl.zeros([SUB], tl.float32)
    offs = tl.arange(0, SUB)
    for q in tl.range(0, BLOCK, SUB, num_stages=STAGES):
        idx = j * BLOCK + q + offs
        m = idx < blen
        x = tl.load(x_ptr + xs + idx, mask=m, other=0.0, eviction_policy=EV_DROP)
        r = tl.load(r_ptr + rs + idx, mask=m, other=0.0, eviction_policy=EV_DROP)
        h = (x.to(tl.float32) + r.to(tl.float32)).to(h_ptr.dtype.element_ty)
        if WRITE:
            tl.store(h_ptr + hs + idx, h, mask=m, eviction_policy=EV_KEEP)
        hf = h.to(tl.float32)
        acc += hf * hf
    return tl.sum(acc, 0) + tl.sum(hef * hef, 0)


@triton.jit(do_not_specialize=["n_rows", "spin"])
def _rms_coop_loop(
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
    SUB: tl.constexpr,
    G: tl.constexpr,
    GP: tl.constexpr,
    ALIGN: tl.constexpr,
    S8: tl.constexpr,
    STAGES: tl.constexpr,
    EV_KEEP: tl.constexpr,
    EV_DROP: tl.constexpr,
):
    # Program pid takes chunk pid % G of row pid // G (adjacent programs, dispatched together),
    # publishes its sum of squares with a marker word (a slot is never 0), waits for the row's
    # other chunks (computing any still missing after ``spin`` polls itself), adds them in chunk
    # order and writes y from h read back.
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
    ss = _chunk_sumsq(x_ptr, r_ptr, h_ptr, xs, rs, hs, ob, blen, ecol, em, c, True, BLOCK, SUB,
                      STAGES, EV_KEEP, EV_DROP)  # fmt: skip
    slots = slot_ptr + row * G
    one = tl.full([], 1.0, tl.float32)
    tl.atomic_xchg(slots + c, pack2(one, ss))
    v, missing = wait_slots(slots, spin, G, GP)
    k = tl.arange(0, GP)
    if missing > 0:  # row-mates not scheduled in time: compute their sums here
        for j in range(0, G):
            if tl.sum(tl.where(k == j, v, 0), 0) == 0:  # still missing (others keep their bits)
                sj = _chunk_sumsq(x_ptr, r_ptr, h_ptr, xs, rs, hs, ob, blen, ecol, em, j, False,
                                  BLOCK, SUB, STAGES, "", "")  # fmt: skip
                v = tl.where(k == j, pack2(one, sj), v)
    _one, sv = unpack2(v)
    total = tl.sum(tl.where(k < G, sv, 0.0), 0)
    rstd = 1.0 / tl.sqrt(total / N + tl.cast(eps, tl.float32))
    tl.debug_barrier()  # h written above by other threads of this program becomes visible
    offs = tl.arange(0, SUB)
    for q in tl.range(0, BLOCK, SUB, num_stages=STAGES):
        idx = c * BLOCK + q + offs
        m = idx < blen
        hf = tl.load(h_ptr + hs + idx, mask=m, other=0.0, eviction_policy=EV_DROP)
        w = tl.load(w_ptr + head + idx, mask=m, other=0.0, eviction_policy=EV_KEEP)
        y = (hf.to(tl.float32) * rstd * w.to(tl.float32)).to(y_ptr.dtype.element_ty)
        tl.store(y_ptr + hs + idx, y, mask=m, eviction_policy=EV_DROP)
    if ALIGN:
        emc = em & (ecol < tl.where(c == 0, N, 0))
        he = tl.load(h_ptr + ob + ecol, mask=emc, other=0.0).to(tl.float32)
        we = tl.load(w_ptr + ecol, mask=emc, other=0.0).to(tl.float32)
        tl.store(y_ptr + ob + ecol, (he * rstd * we).to(y_ptr.dtype.element_ty), mask=emc)


def launch_args(p) -> dict:
    """Compile-time arguments of ``_rms_coop_loop`` that come from the plan."""
    keep, drop = ("evict_last", "evict_first") if p.evict else ("", "")
    return dict(BLOCK=p.block, SUB=p.sub, STAGES=p.stages or None, EV_KEEP=keep, EV_DROP=drop)


__all__ = ["_rms_coop_loop", "launch_args", "triton"]
