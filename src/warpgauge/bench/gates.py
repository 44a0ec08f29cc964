"""Correctness gates: every provider's output is checked against the FP64 reference before it is
timed, with output memory poisoned (NaN) first so that an element the provider never writes fails.

The check is ``warpgauge.reference.compare`` (one tolerance table, ``TOLERANCES``): elementwise
``|out - ref| <= atol * max|ref| + rtol * |ref|``, NaN never passes. ``compare`` works on CPU in
float64, which for the suite's largest outputs (5e8 elements) would take minutes per provider, so
outputs above ``DEVICE_COMPARE_NUMEL`` are checked by :func:`device_compare`: the same formula
evaluated on the output's device, in float64, in chunks (tests hold it to ``compare``'s results).

Poisoning: a provider that writes into buffers the harness hands it has those buffers filled with
NaN before the gate call (and keeps writing into the same buffers while timed). A provider that
allocates its own outputs gets the caching allocator poisoned: blocks of exactly the outputs'
sizes are allocated, filled with NaN and freed just before the call, so the provider's
``torch.empty`` receives NaN memory rather than a previous provider's correct answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from warpgauge import reference

DEVICE_COMPARE_NUMEL = 1 << 18
_CHUNK = 1 << 25


@dataclass(frozen=True)
class GateResult:
    ok: bool
    max_abs_err: float | None
    max_rel_err: float | None
    worst_ratio: float | None
    n_bad: int
    n_nan: int
    detail: str = ""

    def record(self) -> dict:
        """The case artifact's ``gate`` object (JSON-safe: infinities become None)."""
        d = asdict(self)
        d.pop("detail")
        for k in ("max_abs_err", "max_rel_err", "worst_ratio"):
            v = d[k]
            if v is not None and not math.isfinite(v):
                d[k] = None
        return d


def device_compare(
    out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype | None = None, chunk: int = _CHUNK
) -> reference.Check:
    """``reference.compare`` evaluated where the tensors live, in float64, ``chunk`` elements at
    a time (two passes: the global ``max|ref|`` scale first, then the errors)."""
    if out.shape != ref.shape:
        raise ValueError(f"shape mismatch: out {tuple(out.shape)} vs ref {tuple(ref.shape)}")
    tol = reference.TOLERANCES[dtype or out.dtype]
    o_all = out.detach().reshape(-1)
    r_all = ref.detach().reshape(-1).to(o_all.device)
    n = o_all.numel()
    if n == 0:
        return reference.Check(True, 0.0, 0.0, 0.0, 0, 0)
    f64 = torch.float64
    scale = 0.0
    for i in range(0, n, chunk):
        r = r_all[i : i + chunk].to(f64)
        rf = torch.where(torch.isfinite(r), r.abs(), torch.zeros_like(r))
        scale = max(scale, float(rf.max()))
    max_abs = max_rel = worst = 0.0
    n_bad = n_nan = 0
    for i in range(0, n, chunk):
        o = o_all[i : i + chunk].to(f64)
        r = r_all[i : i + chunk].to(f64)
        o_nan, r_nan = torch.isnan(o), torch.isnan(r)
        nan_mismatch = o_nan != r_nan
        same_inf = torch.isinf(r) & (o == r)
        finite = ~(o_nan | r_nan) & ~same_inf
        err = torch.where(finite, (o - r).abs(), torch.zeros_like(o))
        err = torch.nan_to_num(err, nan=float("inf"))
        rf = torch.where(torch.isfinite(r), r.abs(), torch.zeros_like(r))
        allowed = tol.atol * scale + tol.rtol * rf
        ratio = torch.where(allowed > 0, err / allowed, torch.where(err > 0, float("inf"), 0.0))
        bad = (ratio > 1.0) | nan_mismatch
        rel = torch.where(rf > 0, err / rf.clamp_min(1e-300), err)
        max_abs = max(max_abs, float(err.max()))
        max_rel = max(max_rel, float(rel.max()))
        worst = max(worst, float(ratio.max()))
        n_bad += int(bad.sum())
        n_nan += int(nan_mismatch.sum())
    return reference.Check(n_bad == 0, max_abs, max_rel, worst, n_bad, n_nan)


def check_tensor(out: torch.Tensor, ref: torch.Tensor) -> reference.Check:
    """Compare one output with its reference under the output dtype's tolerance."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"provider returned {type(out).__name__}, expected a tensor")
    if out.shape != ref.shape:
        raise ValueError(f"output shape {tuple(out.shape)} != reference shape {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        raise TypeError(
            f"output dtype {str(out.dtype).replace('torch.', '')} != reference dtype "
            f"{str(ref.dtype).replace('torch.', '')}"
        )
    if out.numel() > DEVICE_COMPARE_NUMEL and out.device.type != "cpu":
        return device_compare(out, ref, ref.dtype)
    return reference.compare(out, ref, ref.dtype)


def as_tuple(x: Any) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def compare_outputs(outs: Any, refs: Sequence[torch.Tensor]) -> GateResult:
    """Gate result of a provider's output(s) against the reference output(s), combined: ok only
    if every output passes; the error figures are the worst over outputs."""
    outs, refs = as_tuple(outs), tuple(refs)
    try:
        if len(outs) != len(refs):
            raise ValueError(
                f"provider returned {len(outs)} output(s); the reference has {len(refs)}"
            )
        checks = [check_tensor(o, r) for o, r in zip(outs, refs)]
    except (TypeError, ValueError) as e:  # wrong shape, dtype or arity: a wrong result
        return GateResult(False, None, None, None, 0, 0, detail=str(e))
    detail = "; ".join(f"output {i}: {c}" for i, c in enumerate(checks))
    return GateResult(
        ok=all(c.ok for c in checks),
        max_abs_err=max(c.max_abs_err for c in checks),
        max_rel_err=max(c.max_rel_err for c in checks),
        worst_ratio=max(c.worst_ratio for c in checks),
        n_bad=sum(c.n_bad for c in checks),
        n_nan=sum(c.n_nan for c in checks),
        detail=detail,
    )


def poison(buffers: Sequence[torch.Tensor]) -> None:
    """Fill output buffers with NaN (floating) or all-ones bits (integer)."""
    for b in buffers:
        if b.is_floating_point():
            b.fill_(float("nan"))
        else:
            b.fill_(-1 if b.dtype.is_signed else torch.iinfo(b.dtype).max)


def poison_allocator(specs: Sequence[tuple[tuple[int, ...], torch.dtype]], device) -> None:
    """Hand NaN-filled blocks of the outputs' sizes back to the CUDA caching allocator, so that a
    provider allocating its outputs next receives poisoned memory. No-op off CUDA."""
    device = torch.device(device)
    if device.type != "cuda":
        return
    blocks = []
    for shape, dtype in specs:
        t = torch.empty(shape, dtype=dtype, device=device)
        poison([t])
        blocks.append(t)
    torch.cuda.synchronize(device)
    del blocks


def run_gate(
    fn: Callable[[], Any],
    refs: Sequence[torch.Tensor],
    *,
    device,
    out_buffers: Sequence[torch.Tensor] = (),
    out_specs: Sequence[tuple[tuple[int, ...], torch.dtype]] = (),
    sync: Callable[[], None] | None = None,
    clock: Callable[[], float] | None = None,
) -> tuple[GateResult, float]:
    """Poison, call ``fn`` once, compare. Returns (result, seconds the call took including any
    compilation it triggered). Exceptions from ``fn`` propagate (the runner records them)."""
    poison(out_buffers)
    if not out_buffers:
        poison_allocator(out_specs, device)
    if sync is not None:
        sync()
    t0 = clock() if clock else 0.0
    out = fn()
    if sync is not None:
        sync()
    seconds = (clock() - t0) if clock else 0.0
    return compare_outputs(out, refs), seconds
