"""Cooperative softmax: a row's ``G`` chunks on ``G`` programs that exchange (max, sum).

``_softmax_coop`` (``RowPlan.coop(block, warps)``) keeps a program's chunk in registers while the
row's statistics are exchanged, so the register file bounds the bytes in flight. One exp per
element. ``_softmax_coop_loop`` (``RowPlan.coop(block, warps, sub=...)``) walks its chunk in
``SUB``-wide slices twice: the first pass folds the slices into the chunk's (max, sum) and asks L2
to keep the lines (``evict_last``); after the exchange the second pass reads the chunk again and
writes it (``evict_first``). Only the chunks of the programs in flight are live at once, so the
second read comes from L2 and DRAM sees one read and one write. ``STAGES`` software-pipelines
the slice loops; a ragged last chunk walks only its slices that hold elements.

The looped kernel needs two exps per element. With ``tl.exp`` (range fix-ups around each
MUFU.EX2) and two block reductions per slice it compiled to ~24 SASS instructions per element on
sm_90, more than an SM issues at DRAM speed (~17 per element at 4 TB/s). ``fast_exp`` plans use
``ex2`` (one ``ex2.approx.ftz`` each, the scaling in one multiply-add), per-lane sums in the
statistics pass and the division folded into the write pass's exponent: ~12 per element.
Flushing exps below 2^-126 is harmless in sums that hold the maximum's 1; written values are
computed as 2^(t + 24) * 2^-24 so outputs below 2^-126 stay exact. ``fma_exp`` slices of each
chunk compute their statistics exps with a polynomial on the FMA pipe (``_exp2_fma``, relative
error below 3e-7) to offload the MUFU (16 exp2 per SM per clock).

I/O: read x once from DRAM (looped: plus one L2 re-read), write y once, 8 bytes of statistics per
program.
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


LOG2E = tl.constexpr(1.4426950408889634)
TWO_M24 = tl.constexpr(5.960464477539063e-08)  # 2^-24


@triton.jit
def ex2(t, ASM: tl.constexpr):
    """2^t as one MUFU instruction (``ex2.approx.ftz.f32``: no range fix-ups, which cost three
    more instructions per element than ``tl.exp``; results below 2^-126 flush to 0, so callers
    that write such values compute 2^(t + 24) and scale by 2^-24). The interpreter (``ASM``
    off): ``tl.exp2``."""
    if ASM:
        return tl.inline_asm_elementwise(
            "ex2.approx.ftz.f32 $0, $1;", "=r,r", [t], dtype=tl.float32, is_pure=True, pack=1
        )
    else:
        return tl.exp2(t)


@triton.jit
def publish(slot, v, RELAXED: tl.constexpr):
    """Write a chunk's packed statistics with one atomic. The slot's value is all a reader
    takes from it (no other data is published through it), so ``RELAXED`` (fast_exp plans) drops
    the acq_rel ordering and the memory barrier that comes with it."""
    if RELAXED:
        tl.atomic_xchg(slot, v, sem="relaxed")
    else:
        tl.atomic_xchg(slot, v)


@triton.jit
def exp_scaled(d, FAST: tl.constexpr, ASM: tl.constexpr):
    """(e, unit) with exp(d) = e * unit for d <= 0: ``FAST``: e = 2^(d log2(e) + 24) by one
    ``ex2`` (so e stays normal down to exp(d) = 2^-150) and unit = 2^-24; else tl.exp(d), 1."""
    if FAST:
        return ex2(d * LOG2E + 24.0, ASM), TWO_M24
    else:
        return tl.exp(d), 1.0


@triton.jit
def _online_update_fast(m, s, x, ASM: tl.constexpr):
    """``_online_update`` with one FADD, one FMUL and one MUFU per element (``ex2``; terms
    below 2^-126 flush to 0, negligible next to the chunk maximum's 1)."""
    m_new = tl.maximum(m, tl.max(x, 0))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    s = s * tl.exp(m - shift) + tl.sum(ex2((x - shift) * LOG2E, ASM), 0)
    return m_new, s


@triton.jit
def _exp2_fma(t):
    """2^t for t <= 0 (and -inf, NaN) without the MUFU: t = j + f with j = round(t) (the 1.5 *
    2^23 trick), 2^f on [-0.5, 0.5] by a degree-5 polynomial (relative error < 3e-7 in FP32),
    2^j built in the exponent bits. Below -126 it returns 0; NaN stays NaN (through f)."""
    tc = tl.where(t < -127.0, -127.0, t)  # a comparison, so NaN passes through
    r = tc + 12582912.0
    j = r - 12582912.0
    f = tc - j
    p = 0.0013276466634124517 * f + 0.009675540961325169
    p = p * f + 0.05550713464617729
    p = p * f + 0.24022120237350464
    p = p * f + 0.6931469440460205
    p = p * f + 1.0000001192092896
    ji = r.to(tl.int32, bitcast=True) - 0x4B400000  # round(t) as an integer, in [-127, 0]
    scale = ((ji + 127) << 23).to(tl.float32, bitcast=True)
    return tl.where(t < -126.0, 0.0, p * scale)


@triton.jit
def _online_update_fma(m, s, x):
    """``_online_update`` with the slice's exps on the FMA pipe (``_exp2_fma``)."""
    m_new = tl.maximum(m, tl.max(x, 0))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    s = s * tl.exp(m - shift) + tl.sum(_exp2_fma((x - shift) * LOG2E), 0)
    return m_new, s


@triton.jit
def _merge(m_vec, s_vec):
    """Merge per-chunk (max, sum) pairs into the row's (shift, 1/sum); -inf-safe, an all -inf
    row gives 1/sum = 0 (so its output is zeros)."""
    m = tl.max(m_vec, 0)
    shift = tl.where(m == float("-inf"), 0.0, m)
    s = tl.sum(s_vec * tl.exp(m_vec - shift), 0)
    inv = tl.where(s == 0, 0.0, 1.0 / s)
    return shift, inv


@triton.jit
def _chunk_len(j, blen, BLOCK: tl.constexpr):
    """Body elements of chunk ``j`` (all chunks but a ragged last one: BLOCK)."""
    return tl.minimum(blen - j * BLOCK, BLOCK)


@triton.jit
def _chunk_stats(x_ptr, start, xb, blen, ecol, em, j, BLOCK: tl.constexpr, SUB: tl.constexpr,
                 STAGES: tl.constexpr, EV: tl.constexpr, FMA: tl.constexpr, FAST: tl.constexpr,
                 ASM: tl.constexpr):  # fmt: skip
    """(max, sum) of chunk ``j`` of a row (chunk 0 also takes the row's edge), in SUB slices
    (only the slices that hold elements); the first ``FMA`` slices use ``_exp2_fma``, the
    others ``ex2`` (``FAST``) or ``tl.exp``."""
    emj = em & (ecol < tl.where(j == 0, 1 << 30, 0))
    xe = tl.load(x_ptr + xb + ecol, mask=emj, other=float("-inf")).to(tl.float32)
    m = tl.max(xe, 0)
    shift = tl.where(m == float("-inf"), 0.0, m)
    s = tl.sum(tl.exp(xe - shift), 0)
    offs = tl.arange(0, SUB)
    if FAST and FMA == 0:
        # per-lane sums (one multiply-add per element), one block reduction per slice (the max)
        sv = tl.zeros([SUB], tl.float32)
        for q in tl.range(0, _chunk_len(j, blen, BLOCK), SUB, num_stages=STAGES):
            idx = j * BLOCK + q + offs
            x = tl.load(x_ptr + start + idx, mask=idx < blen, other=float("-inf"),
                        eviction_policy=EV).to(tl.float32)  # fmt: skip
            m_new = tl.maximum(m, tl.max(x, 0))
            sh = tl.where(m_new == float("-inf"), 0.0, m_new)
            f = tl.exp(m - sh)  # 0 while nothing finite was seen (m = -inf), else <= 1
            sv = sv * f + ex2((x - sh) * LOG2E, ASM)
            s = s * f
            m = m_new
        return m, s + tl.sum(sv, 0)
    for q in tl.range(0, _chunk_len(j, blen, BLOCK), SUB, num_stages=STAGES):
        idx = j * BLOCK + q + offs
        x = tl.load(x_ptr + start + idx, mask=idx < blen, other=float("-inf"), eviction_policy=EV)
        x = x.to(tl.float32)
        if FMA > 0:
            if q < FMA * SUB:  # uniform over the program
                m, s = _online_update_fma(m, s, x)
            elif FAST:
                m, s = _online_update_fast(m, s, x, ASM)
            else:
                m, s = _online_update(m, s, x)
        elif FAST:
            m, s = _online_update_fast(m, s, x, ASM)
        else:
            m, s = _online_update(m, s, x)
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
    FMA: tl.constexpr = 0,
    FAST: tl.constexpr = False,
    ASM: tl.constexpr = False,
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
    m, s = _chunk_stats(x_ptr, start, xb, blen, ecol, em, c, BLOCK, SUB, STAGES, EV_KEEP, FMA, FAST,
                        ASM)  # fmt: skip
    slots = slot_ptr + row * G
    publish(slots + c, pack2(m, s), FAST)
    v, missing = wait_slots(slots, spin, G, GP)
    k = tl.arange(0, GP)
    if missing > 0:  # row-mates not scheduled in time: compute their statistics here
        for j in range(0, G):
            if tl.sum(tl.where(k == j, v, 0), 0) == 0:  # still missing (others keep their bits)
                mj, sj = _chunk_stats(
                    x_ptr, start, xb, blen, ecol, em, j, BLOCK, SUB, STAGES, "", FMA, FAST, ASM
                )
                v = tl.where(k == j, pack2(mj, sj), v)
    mv, sv = unpack2(v)
    mv = tl.where(k < G, mv, float("-inf"))
    mt = tl.max(mv, 0)
    shift = tl.where(mt == float("-inf"), 0.0, mt)
    tot = tl.sum(tl.where(k < G, sv, 0.0) * tl.exp(mv - shift), 0)
    inv = tl.where(tot == 0, 0.0, 1.0 / tot)
    # FAST: y = 2^((x - shift) * log2(e) - log2(tot) + 24) * 2^-24, the division folded into
    # the exponent and the 2^24 keeping outputs below 2^-126 exact; tot == 0 (an all -inf row):
    # an exponent of -inf, zeros; tot NaN: NaN.
    lt = tl.where(tot == 0, float("inf"), tl.log2(tot)) - 24.0
    offs = tl.arange(0, SUB)
    for q in tl.range(0, _chunk_len(c, blen, BLOCK), SUB, num_stages=STAGES):
        idx = c * BLOCK + q + offs
        bm = idx < blen
        x = tl.load(x_ptr + start + idx, mask=bm, other=float("-inf"), eviction_policy=EV_DROP)
        if FAST:
            y = ex2((x.to(tl.float32) - shift) * LOG2E - lt, ASM) * TWO_M24
        else:
            y = tl.exp(x.to(tl.float32) - shift) * inv
        tl.store(y_ptr + ys + idx, y.to(y_ptr.dtype.element_ty), mask=bm, eviction_policy=EV_DROP)
    if ALIGN:
        emc = em & (ecol < tl.where(c == 0, N, 0))
        xe = tl.load(x_ptr + xb + ecol, mask=emc, other=float("-inf")).to(tl.float32)
        tl.store(y_ptr + xb + ecol, (tl.exp(xe - shift) * inv).to(y_ptr.dtype.element_ty), mask=emc)


@triton.jit
def _coop_chunk(x_ptr, start, xb, blen, ecol, em, j, BLOCK: tl.constexpr, FAST: tl.constexpr,
                ASM: tl.constexpr):  # fmt: skip
    """Chunk ``j`` of a row (chunk 0 also takes the row's edge): ``exp(x - chunk max)`` of its
    elements and edge (``FAST``: 2^24 times that, one ``ex2`` each, so values below 2^-126
    stay exact until the final scaling), and its (max, sum)."""
    idx = j * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + start + idx, mask=idx < blen, other=float("-inf")).to(tl.float32)
    xe = tl.load(
        x_ptr + xb + ecol, mask=em & (ecol < tl.where(j == 0, 1 << 30, 0)), other=float("-inf")
    ).to(tl.float32)
    m = tl.maximum(tl.max(x, 0), tl.max(xe, 0))
    shift = tl.where(m == float("-inf"), 0.0, m)
    if FAST:
        e = ex2((x - shift) * LOG2E + 24.0, ASM)
        ee = ex2((xe - shift) * LOG2E + 24.0, ASM)
        s = (tl.sum(e, 0) + tl.sum(ee, 0)) * TWO_M24
    else:
        e = tl.exp(x - shift)
        ee = tl.exp(xe - shift)
        s = tl.sum(e, 0) + tl.sum(ee, 0)
    return e, ee, m, s


@triton.jit
def bits_f32(x):
    """A 16-bit float's value in FP32 through its bits for BF16 (a 16-bit shift into the high
    half), else ``x.to(float32)``. The same value as the conversion, but an expression LLVM does
    not merge with it: a kernel that converts the held chunk before and after the exchange so
    keeps the 16-bit values live across it, not the FP32 copies."""
    if x.dtype == tl.bfloat16:
        return (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
    else:
        return x.to(tl.float32)


@triton.jit
def bits_f32_asm(x, ASM: tl.constexpr):
    """``bits_f32`` by inline PTX (a third expression no compiler pass merges with the other
    two); the interpreter (``ASM`` off) and non-BF16 inputs: ``bits_f32``."""
    if ASM and x.dtype == tl.bfloat16:
        b = x.to(tl.int16, bitcast=True).to(tl.int32)
        return tl.inline_asm_elementwise("shl.b32 $0, $1, 16;", "=r,r", [b], dtype=tl.float32,
                                         is_pure=True, pack=1)  # fmt: skip
    else:
        return bits_f32(x)


@triton.jit
def _coop_chunk_hold(x_ptr, start, xb, blen, ecol, em, j, BLOCK: tl.constexpr, FAST: tl.constexpr,
                     ASM: tl.constexpr):  # fmt: skip
    """Chunk ``j`` of a row as loaded (its input dtype: half the registers of FP32 exps for a
    16-bit input) with its edge (FP32) and (max, sum): the ``hold_x`` plans, which compute the
    exps again after the exchange (``ex2``, one instruction each)."""
    idx = j * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + start + idx, mask=idx < blen, other=float("-inf"))
    xe = tl.load(
        x_ptr + xb + ecol, mask=em & (ecol < tl.where(j == 0, 1 << 30, 0)), other=float("-inf")
    ).to(tl.float32)
    # the max and the sum convert the chunk by different expressions, so neither pass keeps an
    # FP32 copy of the whole chunk live (each converts an element, uses it and drops it)
    m = tl.maximum(tl.max(x.to(tl.float32), 0), tl.max(xe, 0))
    shift = tl.where(m == float("-inf"), 0.0, m)
    if FAST:  # terms below 2^-126 of the chunk maximum's 1 flush to 0 (ftz): negligible
        s = tl.sum(ex2((bits_f32(x) - shift) * LOG2E, ASM), 0) + tl.sum(tl.exp(xe - shift), 0)
    else:
        s = tl.sum(tl.exp(bits_f32(x) - shift), 0) + tl.sum(tl.exp(xe - shift), 0)
    return x, xe, m, s


@triton.jit
def _coop_fallback(x_ptr, start, xb, blen, ecol, em, v, G: tl.constexpr, BLOCK: tl.constexpr):
    """Every chunk's (max, sum), computed by this program in slices of BLOCK // 8 (few
    registers: this path runs only when a row-mate is not scheduled within ``spin`` polls; the
    slices sum in another order than the owner's block reduction, within rounding)."""
    k = tl.arange(0, v.shape[0])
    offs = tl.arange(0, BLOCK // 8)
    for j in range(0, G):  # every chunk, but only the missing ones are replaced
        emj = em & (ecol < tl.where(j == 0, 1 << 30, 0))
        xe = tl.load(x_ptr + xb + ecol, mask=emj, other=float("-inf")).to(tl.float32)
        m = tl.max(xe, 0)
        shift = tl.where(m == float("-inf"), 0.0, m)
        s = tl.sum(tl.exp(xe - shift), 0)
        for q in range(0, BLOCK, BLOCK // 8):
            idx = j * BLOCK + q + offs
            x = tl.load(x_ptr + start + idx, mask=idx < blen, other=float("-inf"))
            m, s = _online_update(m, s, x.to(tl.float32))
        v = tl.where((k == j) & (v == 0), pack2(m, s), v)
    return v


@triton.jit(do_not_specialize=["n_rows", "spin"])
def _softmax_coop(
    x_ptr,
    y_ptr,
    slot_ptr,
    x_stride,
    n_rows,
    spin,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    G: tl.constexpr,
    GP: tl.constexpr,
    ALIGN: tl.constexpr,
    S8: tl.constexpr,
    FAST: tl.constexpr = False,
    ASM: tl.constexpr = False,
    HOLD: tl.constexpr = False,
    NAP: tl.constexpr = 0,
):
    # Cooperative split: program pid takes chunk pid % G of row pid // G and keeps it in
    # registers; it publishes the chunk's (max, sum) as one int64 (never 0: a chunk with a finite
    # max has sum >= 1, an empty or all -inf one has max -inf), waits for the row's other
    # chunks, merges them in chunk order and writes its chunk. The G programs of a row are
    # adjacent in the grid, so they run together.
    # I/O: read x once, write y once (+ 8 bytes of statistics per program, in L2). One exp per
    # element: the chunk keeps exp(x - its max) in registers and rescales it.
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
    if HOLD:  # e: the chunk as loaded (its exps again after the exchange)
        e, ee, m, s = _coop_chunk_hold(x_ptr, start, xb, blen, ecol, em, c, BLOCK, FAST, ASM)
    else:
        e, ee, m, s = _coop_chunk(x_ptr, start, xb, blen, ecol, em, c, BLOCK, FAST, ASM)
    slots = slot_ptr + row * G
    publish(slots + c, pack2(m, s), FAST)
    v, missing = wait_slots(slots, spin, G, GP, NAP)
    k = tl.arange(0, GP)
    if missing > 0:  # row-mates not scheduled in time: compute their statistics here
        v = _coop_fallback(x_ptr, start, xb, blen, ecol, em, v, G, BLOCK)
    mv, sv = unpack2(v)
    shift, inv = _merge(tl.where(k < G, mv, float("-inf")), tl.where(k < G, sv, 0.0))
    # y = exp(x - chunk max) * exp(chunk max - row max) / sum: one exp per element. A chunk of
    # only -inf has e = 0 and scale 0 (exp(0 - shift) could overflow for a very negative row),
    # or NaN when the row's sum is NaN (a NaN elsewhere in the row: the whole row is NaN).
    scale = tl.where(m == float("-inf"), inv * 0.0, tl.exp(m - shift) * inv)
    idx = c * BLOCK + tl.arange(0, BLOCK)
    if HOLD and not FAST:
        y = tl.exp(bits_f32_asm(e, ASM) - shift) * inv
        ye = (tl.exp(ee - shift) * inv).to(y_ptr.dtype.element_ty)
    elif HOLD:
        # y = 2^((x - shift) log2(e) - log2(sum) + 24) * 2^-24 as in the looped kernel's write
        # pass (an all -inf row: sum 0, exponent -inf, zeros; a NaN sum: NaN)
        mt = tl.where(k < G, mv, float("-inf"))
        tot = tl.sum(tl.where(k < G, sv, 0.0) * tl.exp(mt - shift), 0)  # _merge's sum
        lt = tl.where(tot == 0, float("inf"), tl.log2(tot)) - 24.0
        y = ex2((bits_f32_asm(e, ASM) - shift) * LOG2E - lt, ASM) * TWO_M24
        ye = (tl.exp(ee - shift) * inv).to(y_ptr.dtype.element_ty)
    elif FAST:  # e holds 2^24 exp(x - chunk max): (e * scale) rounds once more only below 2^-126
        y = (e * scale) * TWO_M24
        ye = ((ee * scale) * TWO_M24).to(y_ptr.dtype.element_ty)
    else:
        y = e * scale
        ye = (ee * scale).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + ys + idx, y.to(y_ptr.dtype.element_ty), mask=idx < blen)
    if ALIGN:
        tl.store(y_ptr + xb + ecol, ye, mask=em & (ecol < tl.where(c == 0, N, 0)))


@triton.jit
def _pf_geometry(row, x_stride, N: tl.constexpr, ALIGN: tl.constexpr):
    """(xb, start, blen, ecol, em, ys) of ``row`` (int64) as ``_softmax_coop`` computes them."""
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
    return xb, start, blen, ecol, em, ys


@triton.jit
def _pf_load(x_ptr, start, xb, blen, ecol, em, c, ok, BLOCK: tl.constexpr):
    """Chunk ``c`` of a row and its edge (chunk 0 only) as loaded; nothing where ``ok`` is
    false (past the last row): the prefetch of a program's next row."""
    idx = c * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + start + idx, mask=idx < tl.where(ok, blen, 0), other=float("-inf"))
    lim = tl.where(ok & (c == 0), 1 << 30, 0)
    xe = tl.load(x_ptr + xb + ecol, mask=em & (ecol < lim), other=float("-inf"))
    return x, xe


@triton.jit(do_not_specialize=["n_rows", "spin"])
def _softmax_coop_pf(
    x_ptr,
    y_ptr,
    slot_ptr,
    x_stride,
    n_rows,
    spin,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    G: tl.constexpr,
    GP: tl.constexpr,
    ALIGN: tl.constexpr,
    S8: tl.constexpr,
    FAST: tl.constexpr = False,
    ASM: tl.constexpr = False,
    DEPTH: tl.constexpr = 1,
):
    # Persistent cooperative plan (``RowPlan.coop(..., programs_per_sm=k)``): the grid is
    # ``lanes * G`` programs (at most k per SM, all resident at once); program pid takes chunk
    # pid % G of rows lane, lane + lanes, ... (lane = pid // G), so a row's G programs are
    # adjacent and walk the same rows. Per row it works as ``_softmax_coop`` (chunk in
    # registers, one exp per element, statistics through the row's slots), but it loads its
    # chunk of the next row (``DEPTH`` 2: of the next two rows) before it publishes and waits:
    # DRAM stays busy through the exchange, which in the one-shot grid leaves a program idle
    # once per chunk.
    # I/O: read x once, write y once, 8 bytes of statistics per chunk.
    if S8:
        x_stride = x_stride // 8 * 8  # == x_stride (S8); Triton infers divisibility by 8
    pid = tl.program_id(0)
    lanes = tl.num_programs(0) // G
    c = pid % G
    lane = pid // G
    k = tl.arange(0, GP)
    idx = c * BLOCK + tl.arange(0, BLOCK)
    row = lane.to(tl.int64)
    xb, start, blen, ecol, em, ys = _pf_geometry(row, x_stride, N, ALIGN)
    x_n, xe_n = _pf_load(x_ptr, start, xb, blen, ecol, em, c, row < n_rows, BLOCK)
    if DEPTH == 2:  # a second row ahead in flight too
        nxt = row + lanes
        xb, start, blen, ecol, em, ys = _pf_geometry(nxt, x_stride, N, ALIGN)
        x_m, xe_m = _pf_load(x_ptr, start, xb, blen, ecol, em, c, nxt < n_rows, BLOCK)
    for _ in range(0, tl.cdiv(n_rows - lane, lanes)):
        x = x_n.to(tl.float32)
        xe = xe_n.to(tl.float32)
        cur = row
        cur_xb, cur_start, cur_blen, cur_ecol, cur_em, cur_ys = _pf_geometry(cur, x_stride, N,
                                                                             ALIGN)  # fmt: skip
        row += lanes
        nxt = row + lanes * (DEPTH - 1)  # the row this iteration starts loading
        xb, start, blen, ecol, em, ys = _pf_geometry(nxt, x_stride, N, ALIGN)
        if DEPTH == 2:
            x_n, xe_n = x_m, xe_m
            x_m, xe_m = _pf_load(x_ptr, start, xb, blen, ecol, em, c, nxt < n_rows, BLOCK)
        else:
            x_n, xe_n = _pf_load(x_ptr, start, xb, blen, ecol, em, c, nxt < n_rows, BLOCK)
        m = tl.maximum(tl.max(x, 0), tl.max(xe, 0))
        shift = tl.where(m == float("-inf"), 0.0, m)
        if FAST:  # 2^24 exp(x - chunk max), as _coop_chunk
            e = ex2((x - shift) * LOG2E + 24.0, ASM)
            ee = ex2((xe - shift) * LOG2E + 24.0, ASM)
            s = (tl.sum(e, 0) + tl.sum(ee, 0)) * TWO_M24
        else:
            e = tl.exp(x - shift)
            ee = tl.exp(xe - shift)
            s = tl.sum(e, 0) + tl.sum(ee, 0)
        slots = slot_ptr + cur * G
        publish(slots + c, pack2(m, s), FAST)
        v, missing = wait_slots(slots, spin, G, GP)
        if missing > 0:  # row-mates not scheduled in time: compute their statistics here
            v = _coop_fallback(x_ptr, cur_start, cur_xb, cur_blen, cur_ecol, cur_em, v, G, BLOCK)
        mv, sv = unpack2(v)
        shift, inv = _merge(tl.where(k < G, mv, float("-inf")), tl.where(k < G, sv, 0.0))
        scale = tl.where(m == float("-inf"), inv * 0.0, tl.exp(m - shift) * inv)
        if FAST:
            y = (e * scale) * TWO_M24
            ye = ((ee * scale) * TWO_M24).to(y_ptr.dtype.element_ty)
        else:
            y = e * scale
            ye = (ee * scale).to(y_ptr.dtype.element_ty)
        tl.store(y_ptr + cur_ys + idx, y.to(y_ptr.dtype.element_ty), mask=idx < cur_blen)
        if ALIGN:
            tl.store(y_ptr + cur_xb + cur_ecol, ye,
                     mask=cur_em & (cur_ecol < tl.where(c == 0, N, 0)))  # fmt: skip


def use_asm() -> bool:
    """Inline PTX (``ex2``) on a GPU; the interpreter cannot run it."""
    from .._device import interpreter_enabled

    return not interpreter_enabled()


def reg_cap(p) -> dict:
    """Launch option of a plan's register cap (``maxnreg``; none when 0)."""
    return {"maxnreg": p.maxnreg} if p.maxnreg else {}


def launch_args(p) -> dict:
    """Compile-time arguments of ``_softmax_coop_loop`` that come from the plan."""
    keep, drop = ("evict_last", "evict_first") if p.evict else ("", "")
    return dict(BLOCK=p.block, SUB=p.sub, STAGES=p.stages or None, EV_KEEP=keep, EV_DROP=drop,
                FMA=p.fma_exp, FAST=p.fast_exp, ASM=p.fast_exp and use_asm())  # fmt: skip


__all__ = [
    "_softmax_coop",
    "_softmax_coop_pf",
    "_softmax_coop_loop",
    "launch_args",
    "use_asm",
    "reg_cap",
    "bits_f32_asm",
    "ex2",
    "LOG2E",
    "TWO_M24",
    "triton",
]
