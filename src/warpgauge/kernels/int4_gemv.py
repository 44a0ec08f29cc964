"""The pipelined FMA GEMV for batch 1 (``Int4Plan(block_m=1, pipeline=S)``, S >= 2): the same
per-step decode as ``int4_kernels._fma_step``, but the K loop is ``tl.range(..., num_stages=S)``,
so Triton's software pipeliner issues the weight / scale / x loads of the next ``S - 1`` steps as
asynchronous copies into shared memory (``cp.async``) while the current step decodes and multiplies.
Loads stay in flight while the program computes, without the registers that a manual prefetch
of several steps would hold."""

from __future__ import annotations

import triton
import triton.language as tl

from .int4_kernels import _fma_step


@triton.jit(do_not_specialize=["M", "magic"])
def _int4_gemv_pipe_kernel(x_ptr, w_ptr, s_ptr, y_ptr, part_ptr, M, N, K, magic,
                           stride_xm, stride_xk, stride_wn, stride_sn, stride_ym, stride_yn,
                           GROUP: tl.constexpr, WPAD: tl.constexpr, BLOCK_N: tl.constexpr,
                           GPI: tl.constexpr, SPLIT_K: tl.constexpr, STAGES: tl.constexpr):  # fmt: skip
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
    pos = ei - 3 * (ei >= 5).to(tl.int32)
    xscale = ((127 - 4 * pos) << 23).to(tl.float32, bitcast=True)  # 2**(-4p), built exactly
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for it in tl.range(it_start, it_end, num_stages=STAGES):
        g0 = it * GPI
        gmask = (g0 + gi) < n_groups
        if WPAD == WORDS:
            wmask = gmask[None, :, None]
            xmask = gmask[:, None, None]
        else:
            wmask = gmask[None, :, None] & (wi < WORDS)[None, None, :]
            xmask = gmask[:, None, None] & (wi < WORDS)[None, :, None]
        b = tl.load(w_base + g0 * WORDS, mask=wmask, other=0)
        xv = tl.load(x_base + (g0 * GROUP).to(tl.int64) * stride_xk, mask=xmask, other=0.0)
        sc = tl.load(s_base + g0, mask=gmask[None, :], other=0.0)
        acc += _fma_step(b, xv, sc, xscale, magic, GPI, WPAD)
    n_mask = offs_n < N
    if SPLIT_K == 1:
        y_ptrs = y_ptr + pid_m.to(tl.int64) * stride_ym + offs_n.to(tl.int64) * stride_yn
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=n_mask)
    else:
        p_ptrs = part_ptr + (pid_k * M + pid_m).to(tl.int64) * N + offs_n
        tl.store(p_ptrs, acc, mask=n_mask)
