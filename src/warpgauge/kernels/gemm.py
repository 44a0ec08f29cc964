"""GEMM: ``C = A @ B`` for FP16/BF16 operands of any strides, FP32 accumulation, one rounding.

Kernel
    One program computes a ``BLOCK_M x BLOCK_N`` tile of C with ``tl.dot`` (wgmma on Hopper) into an
    FP32 accumulator, walking K in ``BLOCK_K`` steps that Triton software-pipelines ``num_stages``
    deep. Programs are numbered along a 1-D grid in grouped order (``GROUP_M`` row-tiles share
    each column sweep) so the B panels a wave touches stay in L2. Operands are addressed through
    both of their strides, so ``w.t()`` or a sliced view is read in place, never copied; a unit
    stride is specialized by Triton (it becomes a compile-time 1), which gives contiguous,
    vectorized loads along whichever dimension is contiguous.

    Out-of-range rows/columns of the last tiles are *wrapped* (``offs % M``) for loads, so the main
    loop carries no M/N masks; the K loop runs unmasked over whole ``BLOCK_K`` steps and finishes
    with one masked step for the K tail. Only the final store is masked.

Which sizes compile a new kernel (design: weight shapes compile-time, token counts runtime)
    M, N and K are all runtime ``int`` arguments; Triton specializes an int argument on
    ``value == 1`` and ``value % 16 == 0`` unless it is listed in ``do_not_specialize``. The token
    count appears as M in the forward product and in ``dA = dC @ B^T``, but as K in
    ``dB = A^T @ dC``. So the body is one ``@triton.jit`` device function, ``_gemm_tile``, entered
    through two thin kernels:

    - ``_gemm_kernel``        M unspecialized (forward, dA): any number of tokens, one binary.
    - ``_gemm_kernel_kred``   K unspecialized (dB): the token-count reduction, one binary.

    The other dimensions are weight dimensions and keep Triton's divisibility specialization
    (a multiple-of-16 leading dimension lets the compiler prove 16-byte alignment). Autotuning is
    keyed on ``M_BUCKET = min(next_pow2(M), 4096)``, exact ``N``, ``K_BUCKET`` (same rule) and the
    layout code, so a new M (or, in dB, a new token count) inside a bucket reuses both the tuned
    config and the compiled kernel: ``compiled_variants()`` counts the binaries so a GPU test can
    check it. The bucket arguments are unused by the body and are themselves unspecialized.

Traffic (compulsory, see ``work``): read A (M*K) + read B (K*N) + write C (M*N) elements;
FLOPs 2*M*N*K. Tiles re-read A and B from L2 ``N/BLOCK_N`` and ``M/BLOCK_M`` times; the grouped
order keeps that reuse in L2, so DRAM traffic stays close to the compulsory bytes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._checks import HALF_DTYPES, check_same_device, check_same_dtype, check_tensor
from .._device import interpreter_enabled
from ._launch import compiled_variants as _count
from ._launch import empty, launch
from .work import Work, esize

__all__ = [
    "gemm",
    "gemm_backward",
    "gemm_grad_a",
    "gemm_grad_b",
    "work",
    "compiled_variants",
    "M_BUCKET_MAX",
]

M_BUCKET_MAX = 4096  # beyond this the best tile no longer changes with M (tiles are <= 256 wide)


def _bucket(n: int) -> int:
    """Power-of-two bucket of a dimension for the autotuning key: 1, 2, 4, ..., M_BUCKET_MAX.

    A symbolic size (torch.compile with dynamic shapes) gets M_BUCKET_MAX instead of a guard on
    its value: there Inductor tunes the kernel itself, and every config stays eligible."""
    if isinstance(n, torch.SymInt):
        return M_BUCKET_MAX
    return min(triton.next_power_of_2(max(int(n), 1)), M_BUCKET_MAX)


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
]

# Under the interpreter (no autotuning there) one small fixed config: every program is numpy work.
_INTERPRETER_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 4}

_KEY = ["M_BUCKET", "N", "K_BUCKET", "LAYOUT"]


def _prune(configs, named_args, **kwargs):
    """Skip tiles far wider than the problem (they only add idle lanes and benchmarking time)."""
    m_cap = max(64, named_args["M_BUCKET"])
    n_cap = max(64, triton.next_power_of_2(named_args["N"]))
    kept = [c for c in configs if c.kwargs["BLOCK_M"] <= m_cap and c.kwargs["BLOCK_N"] <= n_cap]
    return kept or [configs[-1]]


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


@triton.autotune(configs=_CONFIGS, key=_KEY, prune_configs_by={"early_config_prune": _prune})
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


@triton.autotune(configs=_CONFIGS, key=_KEY, prune_configs_by={"early_config_prune": _prune})
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


def compiled_variants(which: str | None = None) -> int:
    """Number of compiled binaries in Triton's in-memory cache for the GEMM kernels (both entry
    points, or ``which`` = ``"m"`` / ``"k"``). Autotuning compiles one per surviving config; a new M
    inside a known bucket must not add any. Always 0 under the interpreter (nothing is compiled)."""
    return sum(_count(k) for name, k in _KERNELS.items() if which in (None, name))


def _launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, token_dim: str = "m") -> None:
    """c[:] = a @ b. Shapes, dtypes and devices already validated; no copies of a or b."""
    M, K = a.shape
    N = b.shape[1]
    kernel = _KERNELS[token_dim]
    h = hints(a, b, c, token_dim)
    args = (
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        _bucket(M), _bucket(K), _layout(a, b) | h << 4,
    )  # fmt: skip
    if interpreter_enabled():
        cfg = _INTERPRETER_CONFIG
        grid = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
        launch(
            kernel.fn, grid, *args, **cfg, UPCAST=a.dtype == torch.bfloat16, HINTS=h, num_warps=4
        )
        return

    def grid(meta):
        return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)

    launch(kernel, grid, *args, UPCAST=False, HINTS=h)


def _fill_degenerate(a: torch.Tensor, c: torch.Tensor) -> bool:
    """M or N == 0: nothing to write. K == 0: the empty sum is 0. Returns True if handled."""
    M, K = a.shape
    if c.numel() == 0:
        return True
    if K == 0:
        c.zero_()
        return True
    return False


def _overlaps(x: torch.Tensor, y: torch.Tensor) -> bool:
    try:
        return x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # fake / meta tensors have no storage to compare
        return False


def gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``a @ b`` for 2-D FP16/BF16 tensors of the same dtype and any strides.

    FP32 accumulation and one rounding to ``a.dtype``. ``out`` (optional): a preallocated ``(M, N)``
    tensor of ``a.dtype`` (any strides, not overlapping ``a`` or ``b``) that receives the result and
    is returned.
    """
    check_tensor("a", a, HALF_DTYPES)
    check_tensor("b", b, HALF_DTYPES)
    check_same_device([("a", a), ("b", b)])
    check_same_dtype([("a", a), ("b", b)])
    for name, t in (("a", a), ("b", b)):
        if t.dim() != 2:
            raise ValueError(
                f"{name} must be 2-D, got shape {tuple(t.shape)}; for batched inputs reshape to "
                "(rows, features) first, e.g. x.reshape(-1, x.shape[-1])"
            )
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"inner dimensions differ: a is {tuple(a.shape)} and b is {tuple(b.shape)}; "
            f"a.shape[1] ({a.shape[1]}) must equal b.shape[0] ({b.shape[0]})"
        )
    M, N = a.shape[0], b.shape[1]
    if out is None:
        out = empty((M, N), a.dtype, a.device)
    else:
        check_tensor("out", out, HALF_DTYPES)
        check_same_device([("a", a), ("out", out)])
        if out.dtype != a.dtype:
            raise TypeError(
                f"out has dtype {str(out.dtype).replace('torch.', '')} but the result has "
                f"{str(a.dtype).replace('torch.', '')}; pass out of the operands' dtype"
            )
        if tuple(out.shape) != (M, N):
            raise ValueError(
                f"out has shape {tuple(out.shape)}; a @ b has shape {(M, N)}: pass "
                f"torch.empty({M}, {N}) or leave out=None"
            )
        for name, t in (("a", a), ("b", b)):
            if out.numel() and t.numel() and _overlaps(out, t):
                raise ValueError(
                    f"out shares memory with {name}; the kernel reads {name} while writing out. "
                    "Pass a separate output tensor"
                )
    if not _fill_degenerate(a, out):
        _launch(a, b, out, "m")
    return out


def _check_backward(grad_out: torch.Tensor, other_name: str, other: torch.Tensor) -> None:
    check_tensor("grad_out", grad_out, HALF_DTYPES)
    check_tensor(other_name, other, HALF_DTYPES)
    check_same_device([("grad_out", grad_out), (other_name, other)])
    check_same_dtype([("grad_out", grad_out), (other_name, other)])
    for name, t in (("grad_out", grad_out), (other_name, other)):
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")


def gemm_grad_a(grad_out: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``dA = grad_out @ b^T`` for ``C = a @ b``: ``grad_out`` (M, N), ``b`` (K, N) -> (M, K).

    ``b^T`` is a stride swap. The token count is M: the M-unspecialized kernel."""
    _check_backward(grad_out, "b", b)
    if grad_out.shape[1] != b.shape[1]:
        raise ValueError(
            f"grad_out is {tuple(grad_out.shape)} and b is {tuple(b.shape)}; for C = a @ b, "
            f"grad_out.shape[1] ({grad_out.shape[1]}) must equal b.shape[1] ({b.shape[1]})"
        )
    da = empty((grad_out.shape[0], b.shape[0]), b.dtype, b.device)
    if not _fill_degenerate(grad_out, da):
        _launch(grad_out, b.t(), da, "m")  # [M, N] @ [N, K]: tokens in M
    return da


def gemm_grad_b(grad_out: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``dB = a^T @ grad_out`` for ``C = a @ b``: ``a`` (M, K), ``grad_out`` (M, N) -> (K, N).

    ``a^T`` is a stride swap. The reduction runs over the token count M: the K-unspecialized
    kernel, so a new number of tokens never compiles a new binary."""
    _check_backward(grad_out, "a", a)
    if grad_out.shape[0] != a.shape[0]:
        raise ValueError(
            f"grad_out is {tuple(grad_out.shape)} and a is {tuple(a.shape)}; for C = a @ b, "
            f"grad_out.shape[0] ({grad_out.shape[0]}) must equal a.shape[0] ({a.shape[0]})"
        )
    db = empty((a.shape[1], grad_out.shape[1]), a.dtype, a.device)
    if not _fill_degenerate(a.t(), db):
        _launch(a.t(), grad_out, db, "k")  # [K, M] @ [M, N]: tokens in the reduction
    return db


def gemm_backward(
    grad_out: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    needs_a: bool = True,
    needs_b: bool = True,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Gradients of ``C = a @ b``: ``dA = dC @ b^T`` and ``dB = a^T @ dC``, each only if needed.

    Both products run the forward kernel on transposed *views* (stride swaps, no copies, no
    atomics). ``dB`` reduces over the token count, so it uses the entry point with K unspecialized.
    """
    check_tensor("grad_out", grad_out, HALF_DTYPES)
    check_tensor("a", a, HALF_DTYPES)
    check_tensor("b", b, HALF_DTYPES)
    check_same_device([("grad_out", grad_out), ("a", a), ("b", b)])
    check_same_dtype([("grad_out", grad_out), ("a", a), ("b", b)])
    for name, t in (("grad_out", grad_out), ("a", a), ("b", b)):
        if t.dim() != 2:
            raise ValueError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    if a.shape[1] != b.shape[0] or tuple(grad_out.shape) != (a.shape[0], b.shape[1]):
        raise ValueError(
            f"shapes do not match C = a @ b: a {tuple(a.shape)}, b {tuple(b.shape)}, grad_out "
            f"{tuple(grad_out.shape)}; grad_out must be (a.shape[0], b.shape[1])"
        )
    da = gemm_grad_a(grad_out, b) if needs_a else None
    db = gemm_grad_b(grad_out, a) if needs_b else None
    return da, db


def work(M: int, N: int, K: int, dtype: torch.dtype) -> Work:
    """Compulsory traffic and FLOPs of ``C[M, N] = A[M, K] @ B[K, N]``."""
    return Work(bytes=(M * K + K * N + M * N) * esize(dtype), flops=2 * M * N * K)
