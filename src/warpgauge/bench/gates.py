"""Correctness gates: every provider's output is checked against the FP64 reference before it is
timed, with output memory poisoned (NaN) first so that an element the provider never writes fails.

The check is ``warpgauge.reference.compare`` (one tolerance table, ``TOLERANCES``): elementwise
``|out - ref| <= atol * max|ref| + rtol * |ref|``, NaN never passes, evaluated in float64 on the
output's device in bounded chunks (the suite's largest outputs have 5e8 elements).

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


def check_tensor(out: torch.Tensor, ref: torch.Tensor, relative: bool = False) -> reference.Check:
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
    return reference.compare(out, ref, ref.dtype, relative=relative)


def as_tuple(x: Any) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def compare_outputs(outs: Any, refs: Sequence[torch.Tensor], relative: bool = False) -> GateResult:
    """Gate result of a provider's output(s) against the reference output(s), combined: ok only
    if every output passes; the error figures are the worst over outputs."""
    outs, refs = as_tuple(outs), tuple(refs)
    try:
        if len(outs) != len(refs):
            raise ValueError(
                f"provider returned {len(outs)} output(s); the reference has {len(refs)}"
            )
        checks = [check_tensor(o, r, relative) for o, r in zip(outs, refs)]
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
        b = b.detach()  # an output that requires grad (an autograd view) is poisoned in place too
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
    relative: bool = False,
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
    return compare_outputs(out, refs, relative), seconds
