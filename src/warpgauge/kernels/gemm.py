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

import dataclasses

import torch
import triton

from .._checks import HALF_DTYPES, check_same_device, check_same_dtype, check_tensor
from .._device import device_info, interpreter_enabled
from . import gemm_persistent as gp
from . import gemm_skinny as skinny
from . import gemm_tma as tma
from ._launch import cdiv, empty, launch
from ._launch import compiled_variants as _count
from .gemm_skinny import SKINNY_MAX_M
from .gemm_tile import (  # noqa: F401
    _INTERPRETER_CONFIG,
    _KERNELS,
    M_BUCKET_MAX,
    _bucket,
    _layout,
    hints,
    quick_bench,
)
from .work import Work, esize

__all__ = [
    "gemm",
    "gemm_backward",
    "gemm_grad_a",
    "gemm_grad_b",
    "work",
    "compiled_variants",
    "tuning_log",
    "M_BUCKET_MAX",
]


def compiled_variants(which: str | None = None) -> int:
    """Number of compiled binaries in Triton's in-memory cache for the GEMM kernels: those a
    token count in M can reach (``which="m"``: pointer M entry, TMA, skinny and its reduction),
    in K (``"k"``: pointer K entry, TMA), or all (None); TMA includes the persistent, split-K and
    padded-copy kernels. Autotuning compiles one per surviving
    config; a new token count inside a known bucket must not add any. Always 0 under the
    interpreter (nothing is compiled)."""
    shared = [tma.tma_kernel, gp.persistent_kernel, gp.pad_copy_kernel, gp.split_kernel,
              gp.split_reduce_kernel]  # fmt: skip
    kernels = {
        "m": [_KERNELS["m"], *shared, skinny.skinny_kernel, skinny.reduce_kernel],
        "k": [_KERNELS["k"], *shared],
    }
    if which is None:
        chosen = {id(k): k for ks in kernels.values() for k in ks}.values()
    else:
        chosen = kernels[which]
    return sum(_count(k) for k in chosen)


_TUNING: list[dict] = []


def tuning_log() -> list[dict]:
    """One record per autotuning this process ran: kernel, key (M bucket, N, K bucket, layout
    code), the chosen config, and the tuning time in seconds (compiling and timing every
    surviving config). A later call whose key is in the log reuses that config: no tuning."""
    return list(_TUNING)


_TMA_LOGGED: set = set()


def _log_rule(key: tuple, cfg: triton.Config) -> None:
    """The TMA path picks its config by rule (``gemm_tma.choose``), not by timing: log it once per
    key with a tuning time of 0 so ``tuning_log`` covers every path."""
    if key not in _TMA_LOGGED:
        _TMA_LOGGED.add(key)
        conf = dict(cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        if cfg is tma.WIDE_FLAT_T:
            conf["C_T"] = True  # the swapped product, tiles stored transposed
        _TUNING.append(dict(kernel="tma_kernel", key=list(key), config=conf, tuning_s=0.0))


def _tuned_launch(kernel, grid, *args, **meta) -> None:
    """Launch an autotuned pointer kernel; log a call that tuned. Tuning is seen two ways: the
    autotuner's cache grew, or its ``bench_time`` (set by every tuning) is a new object. The
    gemm11 round logged nothing on the H200 (Triton 3.6) by the first test alone although the
    first calls took 0.9-1.2 s; the second is the fallback. The key is the autotuner's (M bucket,
    N, K bucket, layout code) taken from the arguments, the config the autotuner's choice."""
    seen, bench = len(kernel.cache), getattr(kernel, "bench_time", None)
    launch(kernel, grid, *args, **meta)
    if len(kernel.cache) > seen or getattr(kernel, "bench_time", None) is not bench:
        cfg = getattr(kernel, "best_config", None) or list(kernel.cache.values())[-1]
        _TUNING.append(
            dict(
                kernel=kernel.fn.__name__,
                key=[args[12], args[4], args[13], args[14]],  # M_BUCKET, N, K_BUCKET, LAYOUT
                config=dict(cfg.kwargs, num_warps=cfg.num_warps, num_stages=cfg.num_stages),
                tuning_s=getattr(kernel, "bench_time", None),
            )
        )


_PLAIN = (torch.Tensor, torch.nn.Parameter)


def _path(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, token_dim: str) -> str:
    """Which kernel runs ``c = a @ b``: "skinny" (few tokens in M; 65..128 in the split-K class),
    "tma", "line" (one operand copied onto 128-byte lines, then TMA: ``gemm_persistent.line_choice``),
    "pad" (padded copies of the unaligned operands, then TMA) or "tile" (pointers)."""
    M = a.shape[0]
    if token_dim == "m" and M <= SKINNY_MAX_M:
        return "skinny"
    if FORCE_PATH is not None:
        return FORCE_PATH
    if token_dim == "m" and M <= skinny.SKINNY_SPLIT_MAX_M and _split_class(a, b):
        return "skinny"  # 65..128 tokens where the TMA rule would split K (gemm_skinny)
    # Under torch.compile the launch is traced through wrap_triton; descriptors built on the host
    # and config pre-hooks are not traced, so compiled graphs take the pointer kernel.
    if torch.compiler.is_compiling() or not all(type(t) in _PLAIN for t in (a, b, c)):
        return "tile"  # fake/functional tensors (tracing, opcheck) have no data pointer to check
    if not tma.device_ok(a):
        return "tile"
    M, K = a.shape
    big = M * b.shape[1] * K >= PAD_MIN_WORK
    on_lines = all(tma.base_aligned(t) for t in (a, b, c))  # else the pad path fixes the bases
    if tma.eligible(a, b, c) and on_lines and _line_operand(a, b, token_dim) is not None:
        return "line"
    if tma.eligible(a, b, c) and (not big or on_lines):
        return "tma"
    if big and tma.unit_stride(a) and tma.unit_stride(b) and c.stride(1) == 1:
        return "pad"
    return "tma" if tma.eligible(a, b, c) else "tile"


# Rows that are not 16-byte aligned (an odd K or N in a row-major operand) make TMA impossible and
# the pointer kernel's loads scalar: 0.33x cuBLAS at 4095^3 (2991 us). Copying such operands into
# rows padded to 8 elements and running the TMA kernel took 299 us there (cuBLAS 917: 3.1x), 217
# us at 4096x4096x4095 (cuBLAS 969) and 74.8 us at 2047^3 NT (pointer kernel 127, cuBLAS 130)
# (results/gemm-tuning-h200/round1.json). The copies move (MK + KN) elements twice, so below
# ~1024^3 of work they are not worth it (not measured there: the pointer kernel stays).
# A base address 16- but not 128-byte aligned (a sliced view a[:, 8:]) also pays: 4096^3 sliced
# ran 335 us through TMA in place and 265 us after the copies (cuBLAS 199; explore2.json).
# The copies are one Triton kernel each (gemm_persistent.pad_rows / copy_rows): 4095^3 ran 265.5
# us (cuBLAS 907.1) with A, B and C padded and C copied back by Triton, against 342.6 with torch
# copies (cuBLAS 974.1) and 271.5 with C written in place by 2-byte pointer stores (C_PTR);
# results/gemm-shapes-h200/round1.json, round2_confirm.json (its pad3 variant also copied C's old
# contents into the padded buffer, which the dispatch does not).
PAD_MIN_WORK = 1 << 30


def _padded(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself if TMA can read it as it lies, else a copy with the same major order whose rows
    start 16-byte aligned (on 128-byte lines: fresh allocations are)."""
    if tma.aligned(t) and tma.base_aligned(t):
        return t
    if t.stride(1) == 1:  # row-major copy: pad the row length
        return gp.pad_rows(t)
    return gp.pad_rows(t.t()).t()  # column-major (the pad path's only other case): keep the swap


FORCE_PATH: str | None = None  # tests set "tile" to reach the pointer kernel on aligned shapes


def _split_class(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The TMA rule's split-K class: its key (M's bucket, N, K's class) picks SPLIT_TILE."""
    K = a.shape[1]
    if K < tma.SPLIT_MIN_K:
        return False
    sms = device_info(a.device).sm_count
    return tma.choose(_bucket(a.shape[0]), b.shape[1], sms, tma.k_class(K)) is tma.SPLIT_TILE


def _line_operand(a: torch.Tensor, b: torch.Tensor, token_dim: str) -> str | None:
    """The operand the line path copies ("a" / "b"), or None: ``gemm_persistent.line_choice`` for
    the tile the TMA rule would run (its key: M's bucket, N, K's class)."""
    if not gp.line_class(a, b):
        return None
    M, K = a.shape
    sms = device_info(a.device).sm_count
    cfg = tma.choose(
        _bucket(M), b.shape[1], sms, tma.k_class(K), a.stride(1) != 1 and token_dim == "k"
    )
    return gp.line_choice(a, b, cfg.kwargs["BLOCK_M"], cfg.kwargs["BLOCK_N"])


def _launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, token_dim: str = "m") -> None:
    """c[:] = a @ b. Shapes, dtypes and devices already validated; no copies of a or b."""
    M, K = a.shape
    N = b.shape[1]
    path = _path(a, b, c, token_dim)
    upcast = interpreter_enabled() and a.dtype == torch.bfloat16
    if path == "skinny":
        _launch_skinny(a, b, c, upcast)
        return
    if path == "pad":  # padded copies: TMA-eligible; an unaligned C is a padded buffer copied back
        cp = c if tma.aligned(c) else gp.padded_empty(c)
        _launch_tma(_padded(a), _padded(b), cp, token_dim, upcast)
        if cp is not c:
            gp.copy_rows(cp, c)
        return
    if path == "tma":
        _launch_tma(a, b, c, token_dim, upcast)
        return
    if path == "line":  # one operand copied onto 128-byte lines (gemm_persistent.line_choice)
        if _line_operand(a, b, token_dim) == "a":
            a = gp.line_padded(a)
        else:
            b = gp.line_padded(b)
        _launch_tma(a, b, c, token_dim, upcast)
        return
    h = hints(a, b, c, token_dim)
    keys = (_bucket(M), _bucket(K), _layout(a, b) | h << 4)
    kernel = _KERNELS[token_dim]
    args = (
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), *keys,
    )  # fmt: skip
    if interpreter_enabled():
        cfg = _INTERPRETER_CONFIG
        grid = (cdiv(M, cfg["BLOCK_M"]) * cdiv(N, cfg["BLOCK_N"]),)
        launch(kernel.fn, grid, *args, **cfg, UPCAST=upcast, HINTS=h, num_warps=4)
        return

    def grid(meta):
        return (cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"]),)

    _tuned_launch(kernel, grid, *args, UPCAST=False, HINTS=h)


def _launch_tma(a, b, c, token_dim: str, upcast: bool) -> None:
    """c[:] = a @ b through TMA: a config chosen by rule (``gemm_tma.choose``), one per key."""
    M, K = a.shape
    N = b.shape[1]
    h = hints(a, b, c, token_dim)
    keys = (_bucket(M), _bucket(K), _layout(a, b) | h << 4)
    c_ptr = not tma.aligned(c)  # a C that TMA cannot store (the pad path pads it instead)
    sms = device_info(a.device).sm_count
    # A column-major with the tokens in K: dB's layout class. Only there may the rule swap the
    # product (the swap makes M the product's N, which Triton specializes: a token count in M
    # would then compile per divisibility class)
    a_t = a.stride(1) != 1 and token_dim == "k"
    cfg = tma.choose(keys[0], N, sms, tma.k_class(K), a_t)  # M bucket, K class: one config each
    if cfg is tma.WIDE_FLAT_T and c_ptr:  # the transposed store needs a TMA-addressable C
        cfg = tma.TALL_FLAT
    meta = dict(cfg.kwargs, UPCAST=upcast, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    if interpreter_enabled():  # small blocks (every program is numpy work), the same schedule
        meta.update(tma.INTERPRETER_CONFIG, PERSISTENT=meta["PERSISTENT"], WS=False)
    _log_rule((keys[0], N, tma.k_class(K), keys[2], str(a.dtype)), cfg)
    if cfg is tma.WIDE_FLAT_T:  # C^T = B^T A^T, tiles stored transposed
        gp.run_transposed(a, b, c, meta, sms, keys, upcast=upcast)  # one program per SM
        return
    if cfg is tma.SPLIT_TILE:  # few output tiles, long K: split-K, fixed-order reduction
        split = tma.split_count(keys[0], N, tma.k_class(K), sms, cfg)  # the rule's key, not K
        gp.run_split(a, b, c, meta, split, keys=keys, upcast=upcast, fused=SPLIT_FUSED)
        return
    if meta["FLATTEN"] or c_ptr:
        # WS together with the pointer-store epilogue was never measured: plain pipelining there
        meta = dict(meta, C_PTR=c_ptr, WS=meta["WS"] and not c_ptr)
        grid_max = sms if meta["PERSISTENT"] else 1 << 30  # one program per tile unless persistent
        gp.run_persistent(a, b, c, meta, grid_max, keys, upcast=upcast)
        return
    descs = tma.descriptors(a, b, c)
    meta = {k: v for k, v in meta.items() if k not in ("FLATTEN", "SUBTILE")}
    meta.update(A_T=descs[3], B_T=descs[4])
    tma.with_blocks(descs, meta)
    args = (descs[0], descs[1], descs[2], M, N, K, *keys)
    launch(tma.tma_kernel, tma.grid(M, N, meta, sms), *args, **meta)


def _launch_skinny(a, b, c, upcast: bool, plan: skinny.SkinnyPlan | None = None) -> None:
    """Few tokens: C^T = B^T A^T with split-K and a fixed-order reduction (see gemm_skinny)."""
    M, K = a.shape
    N = b.shape[1]
    if plan is None:
        plan = skinny.SkinnyPlan.for_shape(M, N, K, device_info(a.device).sm_count)
        if interpreter_enabled():  # small tiles: every program is numpy work
            plan = dataclasses.replace(plan, block_n=32, block_k=16)
            plan = dataclasses.replace(plan, split_k=min(plan.split_k, cdiv(K, 16)))
    h = hints(a, b, c) & ~64  # the token count M is never a hinted (specialized) size here
    partial = plan.split_k > 1
    part = empty((plan.split_k, M, N), torch.float32, a.device) if partial else c
    launch(
        skinny.skinny_kernel, plan.grid(M, N),
        a, b, c, part, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        plan.steps_per_split(K), _bucket(M), _bucket(K), _layout(a, b),
        BLOCK_M=plan.block_m, BLOCK_N=plan.block_n, BLOCK_K=plan.block_k, PARTIAL=partial,
        HINTS=h, UPCAST=upcast, num_warps=plan.num_warps, num_stages=plan.num_stages,
    )  # fmt: skip
    if partial:
        launch(
            skinny.reduce_kernel, (cdiv(M * N, REDUCE_BLOCK),),
            part, c, M, N, plan.split_k, c.stride(0), c.stride(1), BLOCK=REDUCE_BLOCK,
        )  # fmt: skip


REDUCE_BLOCK = 1024
# The split-K rule's reduction inside split_kernel (the last split of each tile adds the partials
# in the fixed order; gemm_persistent.run_split ``fused``) instead of a second launch: off. It lost
# at every product of the gemm11b round (results/gemm11b-h200/g11b.json, cold us, fused / two
# launches): dB 1024x1024x16384 61.0 / 55.9 (128x128 tiles in 2 splits 59.8 / 58.7), dB
# 1024x1024x8192 40.8 / 36.4, fwd 128x4096x14336 60.0 / 52.2, fwd 256x4096x14336 58.0 / 53.1: one
# SM per tile reads all SPLIT partial tiles back from L2 (512 KB for 4 splits of 128x256), where
# the reduction kernel spreads them over every SM.
SPLIT_FUSED = False


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
