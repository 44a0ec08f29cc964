"""Specialization sweep: the row width as a compile-time constant (what warpgauge ships) against a
runtime argument, with registers per thread and time.

Three versions of the resident softmax and RMSNorm kernels, same block and warps:

- ``constexpr``: warpgauge's own kernel (``N: tl.constexpr``): one binary per width.
- ``runtime``: ``N`` a plain int, Triton's default specialization (``N % 16 == 0`` and ``N == 1``
  become compile-time facts).
- ``runtime_nospec``: ``N`` in ``do_not_specialize``: nothing about the width is known.

Registers and spills come from the compiled kernel's metadata (``n_regs``, ``n_spills``); time is
CUDA-graph replay, variants interleaved in shuffled rounds.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .common import compiled_meta, interleaved

# Widths the seed measured (4097 and 4104 miss their power-of-two block; 1024 fills it) and one
# DRAM-sized case. Each cell compiles three kernels, so the list stays short.
SHAPES = ((512, 4097), (512, 4104), (1024, 1024), (8192, 4097))
TINY_SHAPES = ((64, 4097),)


@triton.jit
def _softmax_rt_body(x_ptr, y_ptr, x_stride, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * x_stride + offs, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, 0)
    shift = tl.where(m == float("-inf"), 0.0, m)
    e = tl.exp(x - shift)
    s = tl.sum(e, 0)
    inv = tl.where(s == 0, 0.0, 1.0 / s)
    tl.store(y_ptr + row * N + offs, (e * inv).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_rt(x_ptr, y_ptr, x_stride, N, BLOCK: tl.constexpr):
    _softmax_rt_body(x_ptr, y_ptr, x_stride, N, BLOCK)


@triton.jit(do_not_specialize=["N", "x_stride"])
def _softmax_rt_nospec(x_ptr, y_ptr, x_stride, N, BLOCK: tl.constexpr):
    _softmax_rt_body(x_ptr, y_ptr, x_stride, N, BLOCK)


@triton.jit
def _rms_rt_body(
    x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, x_stride, r_stride, eps, N, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * x_stride + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * r_stride + offs, mask=mask, other=0.0).to(tl.float32)
    h = (x + r).to(h_ptr.dtype.element_ty)
    tl.store(h_ptr + row * N + offs, h, mask=mask)
    hf = h.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(hf * hf, 0) / N + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * N + offs, (hf * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_rt(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, x_stride, r_stride, eps, N, BLOCK: tl.constexpr):
    _rms_rt_body(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, x_stride, r_stride, eps, N, BLOCK)


@triton.jit(do_not_specialize=["N", "x_stride", "r_stride"])
def _rms_rt_nospec(
    x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, x_stride, r_stride, eps, N, BLOCK: tl.constexpr
):
    _rms_rt_body(x_ptr, r_ptr, w_ptr, y_ptr, h_ptr, x_stride, r_stride, eps, N, BLOCK)


def _variants_softmax(rows, n, dtype, device="cuda"):
    import torch

    from warpgauge.kernels import softmax as k
    from warpgauge.kernels.plans import RowPlan

    p = RowPlan.resident(n)
    x = torch.randn(rows, n, device=device, dtype=dtype)
    ys = {v: torch.empty_like(x) for v in ("constexpr", "runtime", "runtime_nospec")}
    kw = dict(BLOCK=p.resident_block(n, aligned_path=False), num_warps=p.num_warps)
    # the library's kernel as its launcher calls it, one row per program and the unaligned
    # path like the runtime variants: only the width's specialization differs
    lib = dict(ROWS=1, ALIGN=False, S8=False)
    calls = {
        "constexpr": lambda: k._softmax_resident[(rows,)](
            x, ys["constexpr"], x.stride(0), rows, N=n, **lib, **kw
        ),
        "runtime": lambda: _softmax_rt[(rows,)](x, ys["runtime"], x.stride(0), n, **kw),
        "runtime_nospec": lambda: _softmax_rt_nospec[(rows,)](
            x, ys["runtime_nospec"], x.stride(0), n, **kw
        ),
    }
    ref = torch.softmax(x.float(), -1)
    return calls, ys, lambda y: (y.float() - ref).abs().max().item(), p


def _variants_rms(rows, n, dtype, device="cuda"):
    import torch

    from warpgauge.kernels import rmsnorm as k
    from warpgauge.kernels.plans import RowPlan

    p = RowPlan.resident(n)
    x = torch.randn(rows, n, device=device, dtype=dtype)
    r = torch.randn(rows, n, device=device, dtype=dtype)
    w = torch.randn(n, device=device, dtype=dtype)
    names = ("constexpr", "runtime", "runtime_nospec")
    ys = {v: torch.empty_like(x) for v in names}
    hs = {v: torch.empty_like(x) for v in names}
    kw = dict(BLOCK=p.resident_block(n, aligned_path=False), num_warps=p.num_warps)
    args = lambda v: (x, r, w, ys[v], hs[v], x.stride(0), r.stride(0), 1e-6)
    calls = {
        "constexpr": lambda: k._rms_resident[(rows,)](
            *args("constexpr")[:7], rows, 1e-6, N=n, ROWS=1, ALIGN=False, S8=False, **kw
        ),
        "runtime": lambda: _rms_rt[(rows,)](*args("runtime"), n, **kw),
        "runtime_nospec": lambda: _rms_rt_nospec[(rows,)](*args("runtime_nospec"), n, **kw),
    }
    h = (x.float() + r.float()).to(dtype).float()
    ref = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    return calls, ys, lambda y: (y.float() - ref).abs().max().item(), p


def run(tiny: bool = False) -> dict:
    import torch

    dtype = torch.bfloat16
    cells = []
    ops = (("softmax", _variants_softmax), ("add_rms_norm", _variants_rms))
    for op, make in ops[:1] if tiny else ops:
        for rows, n in TINY_SHAPES if tiny else SHAPES:
            calls, ys, err, plan = make(rows, n, dtype)
            meta = {v: compiled_meta(fn()) for v, fn in calls.items()}
            torch.cuda.synchronize()
            errs = {v: err(ys[v]) for v in calls}
            times = interleaved(calls, rounds=3 if tiny else 6, per_round=3 if tiny else 5)
            cells.append({
                "op": op, "rows": rows, "width": n, "block": plan.block,
                "num_warps": plan.num_warps, "max_abs_err": errs,
                "variants": {v: {**meta[v], **times[v]} for v in calls},
            })  # fmt: skip
    return {
        "dtype": "bfloat16",
        "method": "resident kernels, same block and warps; width constexpr vs runtime (Triton's "
        "default int specialization) vs runtime with do_not_specialize; CUDA-graph replay, "
        "interleaved shuffled rounds; registers/spills from the compiled kernel's metadata",
        "cells": cells,
    }


def summary_rows(rec: dict) -> list[str]:
    out = []
    for c in rec["cells"]:
        parts = []
        for v, d in c["variants"].items():
            t = d.get("median_us")
            parts.append(f"{v} {t:.2f}us [{d.get('n_regs')}r]" if t else f"{v} error")
        out.append(f"{c['op']:13s} {c['rows']}x{c['width']}: " + ", ".join(parts))
    return out
