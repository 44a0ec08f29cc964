"""The pipelined GEMV loops (``Int4Plan.pipeline = S >= 2``) and their launcher.

The FMA GEMV for batch 1 (``Int4Plan(block_m=1, pipeline=S)``): the same per-step decode as
``int4_kernels._fma_step``, but the K loop is ``tl.range(..., num_stages=S)``, so Triton's
software pipeliner issues the weight and x loads of the next ``S - 1`` steps as asynchronous
copies into shared memory (``cp.async``) while the current step decodes and multiplies (the
2-byte scale loads, too narrow for ``cp.async``, are prefetched by hand one step ahead).
Loads stay in flight while the program computes, without the registers that a manual prefetch
of several steps would hold. The tensor-core GEMV (``Int4Plan(block_m=16, pipeline=S)``) steps
``groups_per_iter`` groups at a time in the same kind of loop. Measured on the H200:
``docs/gemm-int4.md``, "Batch 1, pipelined loops"."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._launch import launch, next_pow2
from .int4_kernels import _MAGIC_F32, _XOR8, _dequant_halves, _fma_step, _fold_offset, _nib
from .int4_tile import _counters, _tracing, fused_ok

_MAGIC_ONE = 0x3F800000  # 1.0 in FP32: the magic of the folded decode (``_fma_step_fold``)


@triton.jit
def _nib1(w, K: tl.constexpr, one):
    # the nibble u at bits K..K+3 of w (K = 12 or 16) in 1.0's mantissa, one LOP3: exactly
    # 1 + u * 2**(K - 23). (Folding the XOR by 8 into the same LOP3, (w & M) ^ (one | 8 << K),
    # compiled to two LOP3s per value on sm_90: the word is XORed once instead.)
    return ((w & (0xF << K)) | one).to(tl.float32, bitcast=True)


@triton.jit
def _fma_step_fold(b, xv, sc, one, GPI: tl.constexpr, WPAD: tl.constexpr):
    """``_fma_step`` with the offset folded out of the inner loop (``int4.FMA_FOLD``): every
    nibble is moved by one shift (shared by two nibbles) to bit 12 or 16 of its word and decoded
    in one LOP3 as v = 1 + u * 2**(k - 23), u = q + 8 (exact), multiplied by x' = x * 2**(23 - k)
    (exact, one per x value, shared by the rows of a thread): v * x' = x' + u * x. The constant
    part sum(x' + 8 * x) depends on x alone: each word's FFMA chain starts at minus its word's
    part (no extra instruction; subtracted once per group instead, the sums grow 16x larger and
    FP16 outputs failed the two-ulp tolerance at K = 4096 with x of mean 4). Per weight value:
    LOP3 + FFMA + 3/8 shift + 1/8 XOR, against 1/8 XOR + 1/8 shift + LOP3 + FADD + FFMA in ``_fma_step``.
    Rounding: the chains carry x' = x * 2**11 or 2**7 beside q * x, so they round at about 2**-13
    of |x| per term (the exact decode: 2**-24); per word that stays within the output's two-ulp
    tolerance in BF16 and FP16 (tests/test_int4_pipe.py, x of mean 4 over K = 4096)."""
    x = xv.to(tl.float32)
    ei = tl.arange(0, 8)
    odd = (ei % 2) == 1  # even word positions sit at bit 16, odd ones at bit 12
    xs = x * tl.where(odd, 2048.0, 128.0)[None, None, :]  # x * 2**(23 - k)
    corr = tl.sum(x * tl.where(odd, 2056.0, 136.0)[None, None, :], axis=2)  # [GPI, WPAD]
    xa, xb = tl.split(tl.reshape(xs, (GPI, WPAD, 4, 2)))  # i even / odd
    xa0, xa1 = tl.split(tl.reshape(xa, (GPI, WPAD, 2, 2)))  # i in {0, 4} / {2, 6}
    xb0, xb1 = tl.split(tl.reshape(xb, (GPI, WPAD, 2, 2)))  # i in {1, 5} / {3, 7}
    x0, x4 = tl.split(xa0)
    x2, x6 = tl.split(xa1)
    x1, x5 = tl.split(xb0)
    x3, x7 = tl.split(xb1)
    w = b ^ _XOR8  # u = q + 8 in every nibble
    wu = w.to(tl.uint32, bitcast=True)
    rot = ((wu << 16) | (wu >> 16)).to(tl.int32, bitcast=True)  # nibble 0 -> bit 16, 7 -> 12
    lo = w << 8  # nibbles 1, 2 -> bits 12, 16
    hi = w >> 8  # nibbles 5, 6 -> bits 12, 16
    t = _nib1(rot, 16, one) * x0[None, :, :] - corr[None, :, :]
    t += _nib1(lo, 12, one) * x1[None, :, :]
    t += _nib1(lo, 16, one) * x2[None, :, :]
    t += _nib1(w, 12, one) * x3[None, :, :]
    t += _nib1(w, 16, one) * x4[None, :, :]
    t += _nib1(hi, 12, one) * x5[None, :, :]
    t += _nib1(hi, 16, one) * x6[None, :, :]
    t += _nib1(rot, 12, one) * x7[None, :, :]
    p = tl.sum(t, axis=2)  # [BN, GPI]: one group's sum of q * x per row
    return tl.sum(p * sc.to(tl.float32), axis=1)


@triton.jit
def _xr_load(x_ptrs, mask):
    """x[k = 8w + i] for the 8 nibble positions i, each a [GPI, WPAD] tensor (``XR``)."""
    return (tl.load(x_ptrs, mask=mask, other=0.0), tl.load(x_ptrs + 1, mask=mask, other=0.0),
            tl.load(x_ptrs + 2, mask=mask, other=0.0), tl.load(x_ptrs + 3, mask=mask, other=0.0),
            tl.load(x_ptrs + 4, mask=mask, other=0.0), tl.load(x_ptrs + 5, mask=mask, other=0.0),
            tl.load(x_ptrs + 6, mask=mask, other=0.0), tl.load(x_ptrs + 7, mask=mask, other=0.0))  # fmt: skip


@triton.jit
def _fma_step_xr(b, xs, sc, magic):
    """``_fma_step`` with x given per nibble position (``_xr_load``: [GPI, WPAD] tensors read
    straight from global memory, L1 / L2: x is small and every program reads it). Tensors with
    fewer elements than the program has threads are loaded by Triton in the layout their use
    needs, so x meets the weight words without the shared-memory round trips and barriers of
    ``_fma_step`` (which converts 8 x pieces per step). Same products as ``_fma_step``."""
    w = b ^ _XOR8
    wh = w >> 12
    t = _nib(w, 0xF, magic, 8388616.0) * xs[0].to(tl.float32)[None, :, :]
    t += _nib(w, 0xF0, magic, 8388736.0) * (xs[1].to(tl.float32) * 0.0625)[None, :, :]
    t += _nib(w, 0xF00, magic, 8390656.0) * (xs[2].to(tl.float32) * 0.00390625)[None, :, :]
    t += _nib(w, 0xF000, magic, 8421376.0) * (xs[3].to(tl.float32) * 0.000244140625)[None, :, :]
    t += _nib(w, 0xF0000, magic, 8912896.0) * (xs[4].to(tl.float32) * 1.52587890625e-05)[None, :, :]
    t += _nib(wh, 0xF00, magic, 8390656.0) * (xs[5].to(tl.float32) * 0.00390625)[None, :, :]
    t += _nib(wh, 0xF000, magic, 8421376.0) * (xs[6].to(tl.float32) * 0.000244140625)[None, :, :]
    t += (
        _nib(wh, 0xF0000, magic, 8912896.0) * (xs[7].to(tl.float32) * 1.52587890625e-05)[None, :, :]
    )
    p = tl.sum(t, axis=2)  # [BN, GPI]
    return tl.sum(p * sc.to(tl.float32), axis=1)


@triton.jit(do_not_specialize=["M", "magic"])
def _int4_gemv_pipe_kernel(x_ptr, w_ptr, s_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, magic,
                           stride_xm, stride_xk, stride_wn, stride_sn, stride_ym, stride_yn,
                           GROUP: tl.constexpr, WPAD: tl.constexpr, BLOCK_N: tl.constexpr,
                           GPI: tl.constexpr, SPLIT_K: tl.constexpr, STAGES: tl.constexpr,
                           FOLD: tl.constexpr = False, FUSED: tl.constexpr = False,
                           XR: tl.constexpr = False):  # fmt: skip
    # FOLD: the folded decode ``_fma_step_fold`` (magic 1.0), else the exact one (``_fma_step``,
    # magic 2**23). FUSED (SPLIT_K > 1): the last split of each output block to finish (an int32
    # counter per block in cnt_ptr, reset by that program) adds the partials in the fixed order
    # 0 .. SPLIT_K - 1 and stores y: the additions of ``_splitk_reduce_kernel`` in its order
    # (the same bits), one launch less; as ``int4_tile``'s FUSED.
    # I/O (compulsory): read packed N*K/2 B (as int32 words) + scales N*K/GROUP + x K per row,
    # write y M*N; SPLIT_K > 1 also writes SPLIT_K*M*N FP32 partials. FLOPs 2*M*N*K.
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = pid % M
    pid_n = pid // M
    WORDS: tl.constexpr = GROUP // 8
    n_groups = K // GROUP
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = (offs_n % N).to(tl.int64)  # wrapped: the last tile re-reads valid rows
    n_iters = tl.cdiv(n_groups, GPI)
    per_split = tl.cdiv(n_iters, SPLIT_K)
    it_start = pid_k * per_split
    it_end = tl.minimum(it_start + per_split, n_iters)
    gi = tl.arange(0, GPI)
    wi = tl.arange(0, WPAD)
    ei = tl.arange(0, 8)
    w_base = (
        w_ptr + rows[:, None, None] * stride_wn + (gi[None, :, None] * WORDS + wi[None, None, :])
    )
    s_base = s_ptr + rows[:, None] * stride_sn + gi[None, :]
    koff = gi[:, None, None] * GROUP + wi[None, :, None] * 8 + ei[None, None, :]
    x_base = x_ptr + pid_m.to(tl.int64) * stride_xm + koff.to(tl.int64) * stride_xk
    xr_base = x_ptr + pid_m.to(tl.int64) * stride_xm + (gi[:, None] * GROUP + wi[None, :] * 8)
    pos = ei - 3 * (ei >= 5).to(tl.int32)
    xscale = ((127 - 4 * pos) << 23).to(tl.float32, bitcast=True)  # 2**(-4p), built exactly
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    # The scales are 2-byte loads per row, too narrow for cp.async, so the pipeliner leaves them
    # synchronous: they are prefetched by hand, one step ahead, in registers.
    g_lim = tl.minimum(it_end * GPI, n_groups)  # this split's groups end here
    sc_nx = tl.load(s_base + it_start * GPI, mask=(it_start * GPI + gi < g_lim)[None, :], other=0.0)
    wlane = (wi < WORDS)[None, :]
    if XR:  # x per nibble position, prefetched by hand one step ahead (2-byte loads)
        xr_nx = _xr_load(xr_base + it_start * GPI * GROUP,
                         (it_start * GPI + gi < g_lim)[:, None] & wlane)  # fmt: skip
    for it in tl.range(it_start, it_end, num_stages=STAGES):
        g0 = it * GPI
        sc = sc_nx
        sc_nx = tl.load(s_base + g0 + GPI, mask=(g0 + GPI + gi < g_lim)[None, :], other=0.0)
        if XR:
            xr = xr_nx
            xr_nx = _xr_load(xr_base + (g0 + GPI) * GROUP, (g0 + GPI + gi < g_lim)[:, None] & wlane)
        gmask = (g0 + gi) < n_groups
        if WPAD == WORDS:
            wmask = gmask[None, :, None]
            xmask = gmask[:, None, None]
        else:
            wmask = gmask[None, :, None] & (wi < WORDS)[None, None, :]
            xmask = gmask[:, None, None] & (wi < WORDS)[None, :, None]
        b = tl.load(w_base + g0 * WORDS, mask=wmask, other=0)
        if XR:  # stride_xk == 1 (the launcher passes XR only then)
            acc += _fma_step_xr(b, xr, sc, magic)
        elif FOLD:
            xv = tl.load(x_base + (g0 * GROUP).to(tl.int64) * stride_xk, mask=xmask, other=0.0)
            acc += _fma_step_fold(b, xv, sc, magic, GPI, WPAD)
        else:
            xv = tl.load(x_base + (g0 * GROUP).to(tl.int64) * stride_xk, mask=xmask, other=0.0)
            acc += _fma_step(b, xv, sc, xscale, magic, GPI, WPAD)
    n_mask = offs_n < N
    if SPLIT_K == 1:
        y_ptrs = y_ptr + pid_m.to(tl.int64) * stride_ym + offs_n.to(tl.int64) * stride_yn
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=n_mask)
    else:
        p_row = part_ptr + pid_m.to(tl.int64) * N + offs_n  # split 0's partials of this block
        tl.store(p_row + (pid_k * M).to(tl.int64) * N, acc, mask=n_mask)
        if FUSED:
            tl.debug_barrier()  # every thread's partial is stored before the counter moves
            done = tl.atomic_add(cnt_ptr + pid, 1, sem="acq_rel", scope="gpu")
            if done == SPLIT_K - 1:  # the last split of this block: reduce in the fixed order
                out = tl.load(p_row, mask=n_mask, other=0.0, cache_modifier=".cg")
                for s in tl.static_range(1, SPLIT_K):
                    out += tl.load(p_row + (s * M).to(tl.int64) * N, mask=n_mask, other=0.0,
                                   cache_modifier=".cg")  # fmt: skip
                y_ptrs = y_ptr + pid_m.to(tl.int64) * stride_ym + offs_n.to(tl.int64) * stride_yn
                tl.store(y_ptrs, out.to(y_ptr.dtype.element_ty), mask=n_mask)
                tl.atomic_xchg(cnt_ptr + pid, 0)  # ready for the next call


@triton.jit(do_not_specialize=["M"])
def _int4_gemv_dot_kernel(x_ptr, w_ptr, s_ptr, y_ptr, part_ptr, M, N, K,
                          stride_xm, stride_xk, stride_wn, stride_sn, stride_ym, stride_yn,
                          GROUP: tl.constexpr, HALF_PAD: tl.constexpr, BLOCK_M: tl.constexpr,
                          BLOCK_N: tl.constexpr, GPI: tl.constexpr, SPLIT_K: tl.constexpr,
                          STAGES: tl.constexpr, EVEN: tl.constexpr, ONE_ROW: tl.constexpr,
                          X_BF16: tl.constexpr, UPCAST: tl.constexpr, ASM: tl.constexpr,
                          FOLD: tl.constexpr = False):  # fmt: skip
    # The tensor-core GEMV (Int4Plan(block_m=16, pipeline=S)) with GPI groups per loop step:
    # each row's GPI * GROUP / 2 weight bytes of a step are contiguous, so the DRAM sees runs of
    # GPI * 64 B per row instead of 64 B (read_probe.json: 16 rows x 512 B read at 4.0 TB/s,
    # 128 rows x 64 B at 2.7). Per group: the PTX (or Triton-op) decode into the even-k and odd-k
    # halves, two dots against x[even k] / x[odd k] (the weight is the dot's B side), and
    # acc += part * scale. The loop is pipelined by Triton in STAGES stages (cp.async).
    # I/O (compulsory): read packed N*K/2 B + scales N*K/GROUP + x M*K, write y M*N (+ SPLIT_K
    # FP32 partials). ONE_ROW (M == 1): x is loaded once per group and broadcast to the 16 rows.
    # FOLD: the decode skips its subtract (values q + offset, exact) and each group's product is
    # corrected by offset * sum(x) (``int4_kernels._DECODE_FOLD``).
    HALF: tl.constexpr = GROUP // 2
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % num_pid_m
    pid_n = pid // num_pid_m
    n_groups = K // GROUP
    n_iters = tl.cdiv(n_groups, GPI)
    per_split = tl.cdiv(n_iters, SPLIT_K)
    it_start = pid_k * per_split
    it_end = tl.minimum(it_start + per_split, n_iters)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows = (offs_n % N).to(tl.int64)
    jj = tl.arange(0, HALF_PAD)
    cc = tl.arange(0, 2 * HALF_PAD)
    w_base = w_ptr + rows[:, None] * stride_wn + jj[None, :]
    s_base = s_ptr + rows * stride_sn
    if ONE_ROW:
        x_base = x_ptr + (cc.to(tl.int64) * stride_xk)[None, :]
    else:
        x_base = (
            x_ptr
            + (offs_m % M).to(tl.int64)[:, None] * stride_xm
            + (cc.to(tl.int64) * stride_xk)[None, :]
        )
    lanes_w = (jj < HALF)[None, :]
    lanes_x = (cc < GROUP)[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # The scales of a step ([BLOCK_N, GPI], 2 * GPI contiguous bytes per row) are prefetched by
    # hand one step ahead in registers (2-byte loads are too narrow for the pipeliner's cp.async).
    gi = tl.arange(0, GPI)
    s_step = s_base[:, None] + gi[None, :]
    g_lim = tl.minimum(it_end * GPI, n_groups)  # this split's groups end here
    sc_nx = tl.load(s_step + it_start * GPI, mask=(it_start * GPI + gi < g_lim)[None, :], other=0.0)
    for it in tl.range(it_start, it_end, num_stages=STAGES):
        sc_all = sc_nx.to(tl.float32)
        sc_nx = tl.load(s_step + (it + 1) * GPI, mask=((it + 1) * GPI + gi < g_lim)[None, :],
                        other=0.0)  # fmt: skip
        for g in tl.static_range(GPI):
            grp = it * GPI + g
            if EVEN and HALF_PAD == HALF:
                b = tl.load(w_base + grp * HALF)
                xt = tl.load(x_base + (grp * GROUP).to(tl.int64) * stride_xk)
            else:
                b = tl.load(w_base + grp * HALF, mask=lanes_w & (jj * 0 + grp < n_groups)[None, :],
                            other=0)  # fmt: skip
                xt = tl.load(x_base + (grp * GROUP).to(tl.int64) * stride_xk,
                             mask=lanes_x & (cc * 0 + grp < n_groups)[None, :], other=0.0)  # fmt: skip
            if FOLD:
                xs = tl.sum(xt.to(tl.float32), axis=1)  # [BLOCK_M] (or [1]: one row)
            if ONE_ROW:
                xt = tl.broadcast_to(xt, (BLOCK_M, 2 * HALF_PAD))
            xe, xo = tl.split(tl.reshape(xt, (BLOCK_M, HALF_PAD, 2)))
            if UPCAST:
                xe = xe.to(tl.float32)
                xo = xo.to(tl.float32)
            lo, hi = _dequant_halves(b, X_BF16, UPCAST, ASM, FOLD)
            part = tl.dot(xe, tl.trans(lo))
            part = tl.dot(xo, tl.trans(hi), part)
            if FOLD:
                part -= _fold_offset(X_BF16) * xs[:, None]
            if GPI == 1:
                sc = tl.reshape(sc_all, (BLOCK_N,))
            else:  # column g of the step's scales
                sc = tl.sum(tl.where(gi[None, :] == g, sc_all, 0.0), axis=1)
            acc += part * sc[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if SPLIT_K == 1:
        y_ptrs = (
            y_ptr
            + offs_m.to(tl.int64)[:, None] * stride_ym
            + offs_n.to(tl.int64)[None, :] * stride_yn
        )
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        p_ptrs = (
            part_ptr + (pid_k * M + offs_m).to(tl.int64)[:, None] * N + offs_n.to(tl.int64)[None, :]
        )
        tl.store(p_ptrs, acc, mask=mask)


def launch_pipelined(
    plan, grid, x2, w, scales, y, part, group_size, upcast, asm, fold, fma_fold=False, xr=False
) -> bool:
    """Launch the pipelined GEMV of ``plan`` (``plan.pipeline >= 2``; ``int4.int4_linear_packed``
    has checked the operands, sliced x into rows and viewed the weight as int32 words for
    ``block_m == 1``). ``asm`` / ``fold``: the tensor-core GEMV's PTX decode and offset fold;
    ``fma_fold``: the FMA GEMV's folded decode; ``xr``: its x read per nibble position
    (``_fma_step_xr``; unit-stride x, exact decode only). Returns whether the kernel reduced the split-K
    partials itself (``plan.fused``, FMA GEMV; else the caller launches the reduction)."""
    M, K = x2.shape
    N = y.shape[1]
    strides = (x2.stride(0), x2.stride(1), w.stride(0), scales.stride(0), y.stride(0), y.stride(1))
    common = dict(GROUP=group_size, BLOCK_N=plan.block_n, GPI=plan.groups_per_iter,
                  SPLIT_K=plan.split_k, STAGES=plan.pipeline, num_warps=plan.num_warps,
                  num_stages=plan.pipeline)  # fmt: skip
    if plan.block_m == 16:
        launch(_int4_gemv_dot_kernel, grid, x2, w, scales, y, part, M, N, K, *strides,
               HALF_PAD=max(8, next_pow2(group_size // 2)), BLOCK_M=16,
               EVEN=(K // group_size) % plan.groups_per_iter == 0, ONE_ROW=M == 1,
               X_BF16=x2.dtype == torch.bfloat16, UPCAST=upcast, ASM=asm, FOLD=fold,
               **common)  # fmt: skip
    else:
        magic = _MAGIC_ONE if fma_fold else _MAGIC_F32
        fused = plan.split_k > 1 and plan.fused and fused_ok(grid[0])
        cnt = _counters(x2.device, grid[0], _tracing(x2)) if fused else part
        launch(_int4_gemv_pipe_kernel, grid, x2, w, scales, y, part, cnt, M, N, K, magic,
               *strides, WPAD=next_pow2(max(group_size // 8, 1)),
               FOLD=bool(fma_fold), FUSED=fused, XR=bool(xr) and x2.stride(1) == 1 and not fma_fold,
               **common)  # fmt: skip
        return fused
    return False
