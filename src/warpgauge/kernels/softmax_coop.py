"""Cooperative softmax with looped chunks (``RowPlan.coop(block, warps, sub=...)``).

The plain cooperative kernel (``softmax._softmax_coop``) holds a program's whole chunk in
registers while the row's statistics are exchanged, so the register file bounds the bytes in
flight. This one walks its ``BLOCK``-wide chunk in ``SUB``-wide slices twice: the first pass folds
the slices into the chunk's (max, sum) and asks L2 to keep the lines (``evict_last``); after the
exchange the second pass reads the chunk again and writes it (``evict_first``). Only the chunks of
the programs in flight are live at once (a few MB, far below L2), so the second read comes from
L2 and DRAM sees one read and one write. ``STAGES`` software-pipelines the slice loops.

I/O: read x once from DRAM (plus one L2 re-read), write y once, 8 bytes of statistics per
program. Two exps per element (the chunk is not kept, so its exps are recomputed).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._rows import body_span, edge_index, pack2, unpack2, wait_slots


@triton.jit
def _online_update(m, s, x):
    """Fold a slice into the running (max, sum) scalars, -inf-safe (see softmax.py)."""
    m_new = tl.maximum(m, tl.max(x, 0))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), 0)
    return m_new, s


@triton.jit
def _chunk_stats(x_ptr, start, xb, blen, ecol, em, j, BLOCK: tl.constexpr, SUB: tl.constexpr,
                 STAGES: tl.constexpr, EV: tl.constexpr):  # fmt: skip
    """(max, sum) of chunk ``j`` of a row (chunk 0 also takes the row's edge), in SUB slices."""
    emj = em & (ecol < tl.where(j == 0, 1 << 30, 0))
    xe = tl.load(x_ptr + xb + ecol, mask=emj, other=float("-inf")).to(tl.float32)
    m = tl.max(xe, 0)
    shift = tl.where(m == float("-inf"), 0.0, m)
    s = tl.sum(tl.exp(xe - shift), 0)
    offs = tl.arange(0, SUB)
    for q in tl.range(0, BLOCK, SUB, num_stages=STAGES):
        idx = j * BLOCK + q + offs
        x = tl.load(x_ptr + start + idx, mask=idx < blen, other=float("-inf"), eviction_policy=EV)
        m, s = _online_update(m, s, x.to(tl.float32))
    return m, s


@triton.jit(do_not_specialize=["n_rows", "spin"])
def _softmax_coop_loop(
    x_ptr,
    y_ptr,
    slot_ptr,
    x_stride,
    n_rows,
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
    # Program pid takes chunk pid % G of row pid // G (a row's programs are adjacent in the
    # grid, so they run together); publishes the chunk's (max, sum) as one int64 (never 0, see
    # softmax._softmax_coop), waits for the row's other chunks (computing any still missing
    # after ``spin`` polls itself), merges them in chunk order and writes its chunk.
    if S8:
        x_stride = x_stride // 8 * 8  # == x_stride (S8); Triton infers divisibility by 8
    pid = tl.program_id(0)
    c = pid % G
    row = (pid // G).to(tl.int64)
    xb = row * x_stride
    if ALIGN:  # x_stride == N (launcher): x and y rows share their head
        head, start, blen = body_span(xb, N)
        ecol, em = edge_index(head, blen, N)
        ys = start
    else:
        start = xb
        blen = N
        ecol = tl.arange(0, 16)
        em = ecol < 0
        ys = row * N
    m, s = _chunk_stats(x_ptr, start, xb, blen, ecol, em, c, BLOCK, SUB, STAGES, EV_KEEP)
    slots = slot_ptr + row * G
    tl.atomic_xchg(slots + c, pack2(m, s))
    v, missing = wait_slots(slots, spin, G, GP)
    k = tl.arange(0, GP)
    if missing > 0:  # row-mates not scheduled in time: compute their statistics here
        for j in range(0, G):
            if tl.sum(tl.where(k == j, v, 0), 0) == 0:  # still missing (others keep their bits)
                mj, sj = _chunk_stats(x_ptr, start, xb, blen, ecol, em, j, BLOCK, SUB, STAGES, "")
                v = tl.where(k == j, pack2(mj, sj), v)
    mv, sv = unpack2(v)
    mv = tl.where(k < G, mv, float("-inf"))
    mt = tl.max(mv, 0)
    shift = tl.where(mt == float("-inf"), 0.0, mt)
    tot = tl.sum(tl.where(k < G, sv, 0.0) * tl.exp(mv - shift), 0)
    inv = tl.where(tot == 0, 0.0, 1.0 / tot)
    offs = tl.arange(0, SUB)
    for q in tl.range(0, BLOCK, SUB, num_stages=STAGES):
        idx = c * BLOCK + q + offs
        bm = idx < blen
        x = tl.load(x_ptr + start + idx, mask=bm, other=float("-inf"), eviction_policy=EV_DROP)
        y = (tl.exp(x.to(tl.float32) - shift) * inv).to(y_ptr.dtype.element_ty)
        tl.store(y_ptr + ys + idx, y, mask=bm, eviction_policy=EV_DROP)
    if ALIGN:
        emc = em & (ecol < tl.where(c == 0, N, 0))
        xe = tl.load(x_ptr + xb + ecol, mask=emc, other=float("-inf")).to(tl.float32)
        tl.store(y_ptr + xb + ecol, (tl.exp(xe - shift) * inv).to(y_ptr.dtype.element_ty), mask=emc)


def launch_args(p) -> dict:
    """Compile-time arguments of ``_softmax_coop_loop`` that come from the plan."""
    keep, drop = ("evict_last", "evict_first") if p.evict else ("", "")
    return dict(BLOCK=p.block, SUB=p.sub, STAGES=p.stages or None, EV_KEEP=keep, EV_DROP=drop)


__all__ = ["_softmax_coop_loop", "launch_args", "triton"]
