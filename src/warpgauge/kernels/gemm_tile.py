"""GEMM, pointer path: ``C = A @ B`` for any strides, one program per ``BLOCK_M x BLOCK_N`` tile.

One program computes a tile of C with ``tl.dot`` (wgmma on Hopper) into an FP32 accumulator,
walking K in ``BLOCK_K`` steps that Triton software-pipelines ``num_stages`` deep. Programs are
numbered along a 1-D grid in grouped order (``GROUP_M`` row-tiles share each column sweep) so the B
panels a wave touches stay in L2. Operands are addressed through both of their strides, so
``w.t()`` or a sliced view is read in place, never copied; a unit stride is specialized by Triton
(it becomes a compile-time 1), which gives contiguous, vectorized loads along whichever dimension
is contiguous. ``HINTS`` (see ``hints``) adds the 16-byte alignment Triton cannot see.

Out-of-range rows/columns of the last tiles are *wrapped* (``offs % M``) for loads, so the main
loop carries no M/N masks; the K loop runs unmasked over whole ``BLOCK_K`` steps and finishes with
one masked step for the K tail. Only the final store is masked.

Two thin entry points share the body (``_gemm_tile``): ``_gemm_kernel`` with M unspecialized
(forward, dA: tokens in M) and ``_gemm_kernel_kred`` with K unspecialized (dB: tokens in K).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._launch import next_pow2

M_BUCKET_MAX = 4096  # beyond this the best tile no longer changes with M (tiles are <= 256 wide)


def _bucket(n: int) -> int:
    """Power-of-two bucket of a dimension for the autotuning key: 1, 2, 4, ..., M_BUCKET_MAX.

    A symbolic size (torch.compile with dynamic shapes) gets M_BUCKET_MAX instead of a guard on
    its value: there Inductor tunes the kernel itself, and every config stays eligible."""
    if isinstance(n, torch.SymInt):
        return M_BUCKET_MAX
    return min(next_pow2(max(int(n), 1)), M_BUCKET_MAX)


def _layout(a: torch.Tensor, b: torch.Tensor) -> int:
    """Which operand dims are contiguous (bit 0: A along K, 1: A along M, 2: B along N, 3: B along K).
    Part of the autotuning key: the best tile differs between, e.g., A and A^T."""
    # bool(): under torch.compile with dynamic shapes the comparisons are SymBools (guarded here).
    return (
        int(bool(a.stride(1) == 1))
        | int(bool(a.stride(0) == 1)) << 1
        | int(bool(b.stride(1) == 1)) << 2
        | int(bool(b.stride(0) == 1)) << 3
    )


def hints(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, token_dim: str = "m") -> int:
    """Alignment facts Triton's specialization misses (it only marks ints divisible by 16).

    Bits 0-5: strides of A, B, C (am, ak, bk, bn, cm, cn) that are multiples of 8 elements
    (16 bytes) but not of 16; bit 6: M % 16 == 8 (only where M is a weight dimension, the "k"
    entry point); bit 7: N % 16 == 8. The kernel turns each into ``tl.multiple_of(.., 8)`` so the
    loads stay 16-byte vectors. Without them an N of 8 mod 16 ran at 0.12x cuBLAS (issue 11)."""
    bits = 0
    strides = (a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    for i, s in enumerate(strides):
        if s % 8 == 0 and s % 16:
            bits |= 1 << i
    M, N = c.shape
    if token_dim == "k" and M % 8 == 0 and M % 16:
        bits |= 64
    if N % 8 == 0 and N % 16:
        bits |= 128
    return bits


# Hopper (sm_90) configs: 228 KB of shared memory per SM allows 128x256x64 tiles 3 stages deep
# ((128*64 + 64*256) * 2 B * 3 = 144 KB); 8 warps = two warpgroups issuing wgmma. Smaller tiles are
# for small or skinny problems where the big tiles leave most SMs idle.
def _cfg(bm, bn, bk, stages, warps):
    return triton.Config(
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
        num_stages=stages,
        num_warps=warps,
    )


_CONFIGS = [
    _cfg(128, 256, 64, 3, 8),
    _cfg(256, 128, 64, 3, 8),
    _cfg(128, 128, 64, 4, 8),
    _cfg(128, 128, 64, 4, 4),
    _cfg(64, 256, 64, 4, 4),
    _cfg(64, 128, 64, 4, 4),
    _cfg(128, 64, 64, 4, 4),
    _cfg(64, 64, 64, 4, 4),
    # 32-row tiles, only for small problems (_prune): 127x255x65 ran 8.0 us cold against 9.8 for
    # 64x64 and 9.6 for cuBLAS (warm 3.9 / 5.7 / 5.3; results/gemm-shapes-h200/round1.json).
    _cfg(32, 64, 64, 4, 4),
    # 32x32 tiles, 128- or 64-deep K steps (a K of 65-255 in one or few steps, more programs):
    # 127x255x65 7.1 us cold against 7.9 for 32x64x64 (cuBLAS 9.0), its dB (65x255x127) 7.0 vs
    # 9.0 (cuBLAS 10.3), its dA (127x65x255) 8.9 with 64-deep steps vs 10.0 (cuBLAS 10.2); warm
    # 3.4-4.1 vs 4.0-5.0 (results/gemm-95-h200/round1.json).
    _cfg(32, 32, 128, 2, 4),
    _cfg(32, 32, 64, 3, 4),
]
SMALL_WORK = 1 << 18  # M_BUCKET * N up to this: 32-row tiles are tried too

# Under the interpreter (no autotuning there) one small fixed config: every program is numpy work.
_INTERPRETER_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 4}

_KEY = ["M_BUCKET", "N", "K_BUCKET", "LAYOUT"]


def quick_bench(fn, quantiles=None):
    """The autotuner's timer: 5 warm-up and ~25 ms of timed calls per config (Triton's default is
    25 + 100 ms). Tile configs worth choosing between differ by more than its noise, and tuning a
    new key then costs ~0.3 s plus compilation instead of ~1 s."""
    return triton.testing.do_bench(fn, warmup=5, rep=25, quantiles=quantiles)


def _prune(configs, named_args, **kwargs):
    """Skip tiles far wider than the problem (they only add idle lanes and benchmarking time), and
    32-row tiles unless the problem is small."""
    m_cap = max(64, named_args["M_BUCKET"])
    n_cap = max(64, next_pow2(named_args["N"]))
    small = named_args["M_BUCKET"] * named_args["N"] <= SMALL_WORK
    kept = [
        c
        for c in configs
        if c.kwargs["BLOCK_M"] <= m_cap
        and c.kwargs["BLOCK_N"] <= n_cap
        and (small or c.kwargs["BLOCK_M"] >= 64)
    ]
    return kept or [configs[-2]]


@triton.jit
def _gemm_tile(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
    HINTS: tl.constexpr,
):
    # I/O: read A (M*K) + read B (K*N) + write C (M*N), elements of a.dtype; 2*M*N*K FLOPs.
    # HINTS (see hints()): leading strides / sizes known to be multiples of 8 elements (16 bytes)
    # but not of 16, which Triton's specialization would miss: without them the loads go scalar.
    if HINTS & 1:
        stride_am = tl.multiple_of(stride_am, 8)
    if HINTS & 2:
        stride_ak = tl.multiple_of(stride_ak, 8)
    if HINTS & 4:
        stride_bk = tl.multiple_of(stride_bk, 8)
    if HINTS & 8:
        stride_bn = tl.multiple_of(stride_bn, 8)
    if HINTS & 16:
        stride_cm = tl.multiple_of(stride_cm, 8)
    if HINTS & 32:
        stride_cn = tl.multiple_of(stride_cn, 8)
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # Grouped order: GROUP_M row-tiles walk the column tiles together, so the B panels they
    # share are read from DRAM once per group rather than once per row-tile.
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # Wrapped row/column offsets: the last tile re-reads valid rows instead of masking every load.
    offs_am = ((pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M).to(tl.int64)
    offs_bn = ((pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N).to(tl.int64)
    if HINTS & 64:  # M % 8 == 0: the wrapped rows still come in aligned runs of 8
        offs_am = tl.max_contiguous(tl.multiple_of(offs_am, 8), 8)
    if HINTS & 128:
        offs_bn = tl.max_contiguous(tl.multiple_of(offs_bn, 8), 8)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :].to(tl.int64) * stride_ak
    b_ptrs = b_ptr + offs_k[:, None].to(tl.int64) * stride_bk + offs_bn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_full = K // BLOCK_K
    for _ in range(0, k_full):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        if UPCAST:  # interpreter only: its BF16 tl.dot is wrong; FP32 products of BF16 are exact
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    k_rem = K - k_full * BLOCK_K
    if k_rem > 0:  # the K tail: one masked step, zeros beyond K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_rem, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_rem, other=0.0)
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)

    c = acc.to(c_ptr.dtype.element_ty)  # the one rounding
    offs_cm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_cn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = (
        c_ptr
        + offs_cm[:, None].to(tl.int64) * stride_cm
        + offs_cn[None, :].to(tl.int64) * stride_cn
    )
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


@triton.autotune(
    configs=_CONFIGS,
    key=_KEY,
    prune_configs_by={"early_config_prune": _prune},
    do_bench=quick_bench,
)
@triton.jit(do_not_specialize=["M", "M_BUCKET", "K_BUCKET", "LAYOUT"])
def _gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    M_BUCKET,
    K_BUCKET,
    LAYOUT,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
    HINTS: tl.constexpr,
):
    """Token count in M (forward, dA): M is never specialized, so every M shares one binary."""
    _gemm_tile(
        a_ptr, b_ptr, c_ptr, M, N, K,
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
        BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, UPCAST, HINTS,
    )  # fmt: skip


@triton.autotune(
    configs=_CONFIGS,
    key=_KEY,
    prune_configs_by={"early_config_prune": _prune},
    do_bench=quick_bench,
)
@triton.jit(do_not_specialize=["K", "M_BUCKET", "K_BUCKET", "LAYOUT"])
def _gemm_kernel_kred(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    M_BUCKET,
    K_BUCKET,
    LAYOUT,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
    HINTS: tl.constexpr,
):
    """Token count in K (dB = A^T @ dC): K is never specialized, so every K shares one binary."""
    _gemm_tile(
        a_ptr, b_ptr, c_ptr, M, N, K,
        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
        BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, UPCAST, HINTS,
    )  # fmt: skip


_KERNELS = {"m": _gemm_kernel, "k": _gemm_kernel_kred}
