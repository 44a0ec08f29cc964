"""GEMM for few tokens (``M <= SKINNY_MAX_M``): ``C = A @ B`` computed as ``C^T = B^T A^T``.

With M <= 64 a square tile leaves most of the GPU idle and the work is a stream over B (K*N
elements) that each token reuses. This path puts N on the tensor-core M side (``BLOCK_N`` rows of
``B^T`` per program) and the tokens on the N side (``BLOCK_M`` in 16..64), so one program reads its
``BLOCK_N x K`` panel of B exactly once for all tokens. To have enough programs to stream B at
full bandwidth, K is split: ``split_k`` programs per output tile each reduce a contiguous range of
whole ``BLOCK_K`` steps and write FP32 partials ``[split_k, M, N]``; ``_splitk_reduce_kernel``
adds them in the fixed order ``0, 1, ..., split_k - 1`` and rounds once. No atomics: the result is
bit-identical run to run. With ``split_k == 1`` the program rounds and stores C itself.

Compile keys: M (tokens) and the split geometry are runtime arguments, never specialized, so a new
token count or split never compiles a new binary; N and K (weight dims) keep Triton's
divisibility specialization, and ``HINTS`` (see ``gemm_tile.hints``) restores 16-byte vector loads
for leading strides that are multiples of 8 but not of 16.

Traffic (compulsory): read A (M*K) + B (K*N) + write C (M*N) elements; with ``split_k > 1`` also
write and read ``split_k*M*N`` FP32 partials (small: M <= 64).
"""

from __future__ import annotations

from dataclasses import dataclass

import triton
import triton.language as tl

from ._launch import cdiv, next_pow2

__all__ = ["SkinnyPlan", "SKINNY_MAX_M", "SKINNY_SPLIT_MAX_M", "skinny_kernel", "reduce_kernel"]

SKINNY_MAX_M = 64  # one 64-wide tensor-core N side holds every token: B is read once
# The rule below is read off the H200 sweep (results/gemm-tuning-h200/explore2.json, F.linear
# layout, cuBLAS = 1), in programs = output tiles x split_k:
# - B rows of 64 with 128-deep K steps, 4 stages: the best or within 5% of it for N <= 4096
#   (1x4096x4096: 13.8 us at 256 programs, cuBLAS 13.5; 1x4096x14336: 32.4, cuBLAS 32.5);
#   128 rows, 3 stages, for N >= 8192 (1x14336x4096: 33.8 at 224 programs; 64 rows 36.3).
# - the most programs up to 2 per SM for <= 32 tokens (1x4096x4096 128 / 256 / 512 programs:
#   15.2 / 13.8 / 15.8 us), 1 per SM for 64 tokens, whose tiles hold 4x the shared memory
#   (64x4096x4096 64 / 128 / 256: 14.4 / 13.8 / 16.8 us).
# - 33..64 tokens and N >= 8192: 64-deep K steps 6 stages deep (144 KB of shared memory) instead of
#   128-deep 3 stages: 64x14336x4096 40.4 us cold against 42.1 (cuBLAS 39.8; warm 30.9 / 33.1 /
#   30.9); 64-row B tiles, 2 splits or 4 stages were slower (40.4-52.2; gemm-95-h200/round1.json).
SKINNY_WIDE_N = 8192
SKINNY_PROGRAMS_PER_SM = 2
SKINNY_PROGRAMS_PER_SM_64 = 1
SKINNY_MIN_K_STEPS = 4  # each split reduces >= 4 BLOCK_K steps: its partial write stays small
# 65..128 tokens where the TMA rule would split K (few output tiles, K class 8192: gemm._path):
# 128 tokens per program, 128 rows of B^T, 64-deep K steps 4 stages deep, 8 warps, one program per
# SM. fwd 128x4096x14336 (4 splits): 46.0 us cold against 52.2 for the TMA split-K rule (4 splits
# of 128x256 tiles, 4 stages; 3 stages 50.8) and 48.2-54.8 for other TMA splits (cuBLAS 44.9;
# warm 38.2 / 46.7 / 36.7; gemm11b round, results/gemm11b-h200/g11b.json).
SKINNY_SPLIT_MAX_M = 128


@dataclass(frozen=True)
class SkinnyPlan:
    """block_m: tokens per program (16..64, power of two); block_n: rows of B^T per program;
    block_k: K step; split_k: programs along K; num_warps / num_stages: Triton launch options."""

    block_m: int
    block_n: int
    block_k: int
    split_k: int
    num_warps: int = 4
    num_stages: int = 4

    @classmethod
    def for_shape(cls, M: int, N: int, K: int, sm_count: int) -> SkinnyPlan:
        if M > SKINNY_MAX_M:  # 65..SKINNY_SPLIT_MAX_M tokens (the caller checked the class)
            tiles = cdiv(N, 128) * cdiv(M, SKINNY_SPLIT_MAX_M)
            split = 1
            while tiles * split * 2 <= sm_count and cdiv(K, 64) >= 2 * split * 16:
                split *= 2
            return cls(SKINNY_SPLIT_MAX_M, 128, 64, split, num_warps=8, num_stages=4)
        block_m = max(16, next_pow2(max(int(M), 1)))
        wide = N >= SKINNY_WIDE_N
        block_n, block_k, stages = (128, 128, 3) if wide else (64, 128, 4)
        if wide and block_m > 32:  # 64-step K, 6 stages: more loads in flight per program
            block_k, stages = 64, 6
        per_sm = SKINNY_PROGRAMS_PER_SM_64 if block_m > 32 else SKINNY_PROGRAMS_PER_SM
        tiles = cdiv(N, block_n) * cdiv(M, block_m)
        k_steps = cdiv(K, block_k)
        split = 1
        while tiles * split * 2 <= per_sm * sm_count and k_steps >= 2 * split * SKINNY_MIN_K_STEPS:
            split *= 2
        return cls(block_m, block_n, block_k, split, num_warps=4, num_stages=stages)

    def steps_per_split(self, K: int) -> int:
        """BLOCK_K steps per split (whole steps: every split but the last is unmasked)."""
        return cdiv(cdiv(K, self.block_k), self.split_k)

    def grid(self, M: int, N: int) -> tuple[int, int, int]:
        return (cdiv(N, self.block_n), cdiv(M, self.block_m), self.split_k)


@triton.jit(do_not_specialize=["M", "steps_per_split", "M_BUCKET", "K_BUCKET", "LAYOUT"])
def skinny_kernel(
    a_ptr, b_ptr, c_ptr, p_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    steps_per_split, M_BUCKET, K_BUCKET, LAYOUT,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PARTIAL: tl.constexpr, HINTS: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    # I/O: read B^T panel BLOCK_N x (steps_per_split * BLOCK_K) + the matching A^T slice; write a
    # BLOCK_N x BLOCK_M tile of C (or of the FP32 partials).
    if HINTS & 1:
        stride_am = tl.multiple_of(stride_am, 8)
    if HINTS & 2:
        stride_ak = tl.multiple_of(stride_ak, 8)
    if HINTS & 4:
        stride_bk = tl.multiple_of(stride_bk, 8)
    if HINTS & 8:
        stride_bn = tl.multiple_of(stride_bn, 8)
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    pid_k = tl.program_id(2)
    # In whole BLOCK_K steps, so Triton knows k_lo is a multiple of BLOCK_K: the loads along K stay
    # 16-byte vectors (a runtime split length in elements made them scalar: 2x slower on the H200).
    k_lo = pid_k * steps_per_split * BLOCK_K
    k_hi = tl.minimum(k_lo + steps_per_split * BLOCK_K, K)
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N  # wrapped: only the store is masked
    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    if HINTS & 64:  # M % 8 == 0: wrapped runs of 8 stay contiguous and aligned
        offs_m = tl.max_contiguous(tl.multiple_of(offs_m, 8), 8)
    if HINTS & 128:
        offs_n = tl.max_contiguous(tl.multiple_of(offs_n, 8), 8)
    offs_k = tl.arange(0, BLOCK_K)
    bt_ptrs = (
        b_ptr
        + offs_n.to(tl.int64)[:, None] * stride_bn
        + (k_lo + offs_k).to(tl.int64)[None, :] * stride_bk
    )
    at_ptrs = (
        a_ptr
        + (k_lo + offs_k).to(tl.int64)[:, None] * stride_ak
        + offs_m.to(tl.int64)[None, :] * stride_am
    )
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    n_full = (k_hi - k_lo) // BLOCK_K
    for _ in range(0, n_full):
        bt = tl.load(bt_ptrs)
        at = tl.load(at_ptrs)
        if UPCAST:  # interpreter only: its BF16 tl.dot is wrong; FP32 products of BF16 are exact
            bt = bt.to(tl.float32)
            at = at.to(tl.float32)
        acc = tl.dot(bt, at, acc)
        bt_ptrs += BLOCK_K * stride_bk
        at_ptrs += BLOCK_K * stride_ak
    rem = k_hi - k_lo - n_full * BLOCK_K
    if rem > 0:  # the K tail (last split only): one masked step, zeros beyond K
        bt = tl.load(bt_ptrs, mask=offs_k[None, :] < rem, other=0.0)
        at = tl.load(at_ptrs, mask=offs_k[:, None] < rem, other=0.0)
        if UPCAST:
            bt = bt.to(tl.float32)
            at = at.to(tl.float32)
        acc = tl.dot(bt, at, acc)
    on = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    om = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    mask = (on[:, None] < N) & (om[None, :] < M)
    if PARTIAL:
        p_ptrs = p_ptr + (pid_k * M + om).to(tl.int64)[None, :] * N + on.to(tl.int64)[:, None]
        tl.store(p_ptrs, acc, mask=mask)
    else:
        c_ptrs = c_ptr + om.to(tl.int64)[None, :] * stride_cm + on.to(tl.int64)[:, None] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)  # the one rounding


@triton.jit(do_not_specialize=["M", "split_k"])
def reduce_kernel(p_ptr, c_ptr, M, N, split_k, stride_cm, stride_cn, BLOCK: tl.constexpr):
    # I/O: read split_k*M*N FP32 partials, write M*N outputs. Fixed order 0..split_k-1.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    total = M.to(tl.int64) * N
    mask = offs < total
    acc = tl.load(p_ptr + offs, mask=mask, other=0.0)
    for s in range(1, split_k):
        acc += tl.load(p_ptr + s * total + offs, mask=mask, other=0.0)
    m = offs // N
    n = offs % N
    tl.store(c_ptr + m * stride_cm + n * stride_cn, acc.to(c_ptr.dtype.element_ty), mask=mask)
