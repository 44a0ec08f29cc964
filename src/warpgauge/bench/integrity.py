"""Checks that what was timed is what was gated (docs/methodology.md, "After timing").

The gate (``gates.run_gate``) checks a provider's first call. A dishonest or buggy provider can
still pass it and be fast for the wrong reason: it returns a cached output, skips work on later
calls, launches its work on a side stream the timing events never see, defers the work until
somebody synchronizes, or modifies its inputs. Each is caught here:

- :func:`fingerprint` / :func:`changed`: an exact integer fingerprint of every input tensor, taken
  before the first call and compared after the gate and after every sampled batch, so a provider
  that writes into its inputs is caught at the batch that did it (and the inputs are restored
  before the next provider runs).
- :func:`regate`: after timing, the output of what was timed is poisoned and produced again:
  for a CUDA graph, its output tensors are filled with NaN and the graph replayed once; for the
  eager closure, the previous output and (for providers that write into harness buffers) the
  buffers are filled with NaN, the allocator is poisoned, and the closure called once. A provider
  that returns a cached tensor, skips work on repeat calls, or whose graph never captured its work
  (side-stream launches during capture) leaves NaN behind and fails.
- :func:`hidden_work`: a wall-clock cross-check. ``k`` back-to-back calls and one device
  synchronization cannot take much longer per call than the larger of the host's launch time per
  call and the measured device time per call; if they do, the device did work that the timed
  interval did not contain (a side stream, or work deferred to the synchronization).
- :func:`above_ceilings`: a rate above the run's own measured copy or matmul ceiling is flagged.

A provider failing any of these is recorded as ``failed_gate`` with what failed; its timing is
discarded (kept in ``extra.discarded`` for the record).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any


class IntegrityFailure(RuntimeError):
    """A provider broke the measurement contract after its gate passed (says how)."""


# ------------------------------------------------------------------------------------ inputs


def tensors_in(obj: Any, depth: int = 0) -> list:
    """Every tensor in ``obj`` (dict values, sequences, attributes of plain objects), in a
    deterministic order. Depth-limited: inputs are dicts of tensors or small objects."""
    import torch

    if isinstance(obj, torch.Tensor):
        return [obj]
    if depth > 3:
        return []
    if isinstance(obj, dict):
        return [t for k in sorted(obj, key=str) for t in tensors_in(obj[k], depth + 1)]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in tensors_in(v, depth + 1)]
    attrs = getattr(obj, "__dict__", None)
    if isinstance(attrs, dict):
        return [t for k in sorted(attrs) for t in tensors_in(attrs[k], depth + 1)]
    return []


_INT_VIEW = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}


def _tensor_print(t) -> tuple:
    """(shape, dtype, sum of the bit patterns, sum over every 7th element, sum over every 3rd from
    the second), each accumulated exactly in int64 by a reduction that reads the tensor without
    copying it (cheap enough to run after every batch). Any change of one element changes the
    first sum; a swap of two elements is missed only when their positions agree modulo 21."""
    import torch

    flat = t.detach().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.to(torch.int8)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    size = flat.element_size()
    bits = flat.view(getattr(torch, _INT_VIEW[size])) if size in _INT_VIEW else flat
    sums = tuple(int(v.sum(dtype=torch.int64)) for v in (bits, bits[::7], bits[1::3]))
    return (tuple(t.shape), str(t.dtype), *sums)


def fingerprint(inputs: Any) -> list[tuple]:
    return [_tensor_print(t) for t in tensors_in(inputs)]


def changed(before: list[tuple], inputs: Any) -> list[int]:
    """Indices (in ``tensors_in`` order) of input tensors whose fingerprint differs."""
    now = fingerprint(inputs)
    if len(now) != len(before):
        return list(range(max(len(now), len(before))))
    return [i for i, (a, b) in enumerate(zip(before, now)) if a != b]


def restore(inputs: Any, fresh: Any) -> None:
    """Copy freshly made inputs (same seed) into the existing tensors, in place, so closures that
    hold the old tensors see the original values again."""
    for old, new in zip(tensors_in(inputs), tensors_in(fresh)):
        old.copy_(new)


# ------------------------------------------------------------------------------------ outputs


def _aliases(outs: Iterable, inputs: Any) -> bool:
    ptrs = {t.untyped_storage().data_ptr() for t in tensors_in(inputs) if t.numel()}
    return any(o.numel() and o.untyped_storage().data_ptr() in ptrs for o in outs)


def regate(
    *,
    fn: Callable[[], Any],
    graph: Any,
    refs,
    relative: bool,
    out_buffers,
    out_specs,
    device,
    sync: Callable[[], None],
    inputs: Any,
):
    """Gate again what was timed. Returns a ``gates.GateResult`` (its ``detail`` names the path
    that failed: ``graph replay`` or ``eager call``)."""
    from . import gates

    checks = []
    if graph is not None and getattr(graph, "outputs", None) is not None:
        outs = [o for o in gates.as_tuple(graph.outputs) if hasattr(o, "fill_")]
        gates.poison(outs)
        graph()
        sync()
        checks.append(("graph replay", gates.compare_outputs(graph.outputs, refs, relative)))
    prev = fn()
    sync()
    prev_t = [o for o in gates.as_tuple(prev) if hasattr(o, "fill_")]
    if _aliases(prev_t, inputs):
        return gates.GateResult(
            False, None, None, None, 0, 0, detail="eager call: an output aliases an input tensor"
        )
    gates.poison(prev_t)
    gates.poison(out_buffers)
    if not out_buffers:
        gates.poison_allocator(out_specs, device)
    sync()
    out = fn()
    sync()
    checks.append(("eager call", gates.compare_outputs(out, refs, relative)))
    for where, result in checks:
        if not result.ok:
            return gates.GateResult(
                False,
                result.max_abs_err,
                result.max_rel_err,
                result.worst_ratio,
                result.n_bad,
                result.n_nan,
                detail=f"{where} after timing: {result.detail}",
            )
    return checks[-1][1]


# ------------------------------------------------------------------------------------ hidden work


HIDDEN_RATIO = 1.5  # wall time per call may exceed max(host, device) by this factor...
HIDDEN_SLACK_US = 5.0  # ...plus this much, before work is called hidden


HIDDEN_ATTEMPTS = 3  # a provider is called hidden only if every attempt says so


def hidden_work(
    fn: Callable[[], Any],
    sync: Callable[[], None],
    now: Callable[[], float],
    device_us: float,
    host_us: float | None,
    target_s: float = 0.002,
    attempts: int = HIDDEN_ATTEMPTS,
) -> dict:
    """Run ``k`` calls back to back, then synchronize; compare wall time per call with the host
    time per call (until the last call returned) and the measured device time per call.
    Returns the record; ``hidden`` is True when the wall time says the device did work outside
    what the events measured.

    One such loop can be slowed by the host alone (the process descheduled between the last call
    and the synchronize, on a loaded machine), so a loop that looks hidden is repeated, up to
    ``attempts`` loops in all: work a provider really hides shows in every loop, a preemption
    in one. The record keeps every loop's numbers."""
    per = max(device_us, host_us or 0.0, 1.0)
    k = int(min(100, max(3, math.ceil(target_s * 1e6 / per))))
    loops = []
    for _ in range(max(1, attempts)):
        sync()
        t0 = now()
        for _ in range(k):
            fn()
        t1 = now()
        sync()
        t2 = now()
        host_per = (t1 - t0) * 1e6 / k
        wall_per = (t2 - t0) * 1e6 / k
        expect = max(host_per, device_us)
        hidden = wall_per > HIDDEN_RATIO * expect + HIDDEN_SLACK_US
        loops.append({"wall_us_per_call": wall_per, "host_us_per_call": host_per,
                      "hidden": bool(hidden)})  # fmt: skip
        if not hidden:
            break
    last = loops[-1]
    return {
        "calls": k,
        "wall_us_per_call": last["wall_us_per_call"],
        "host_us_per_call": last["host_us_per_call"],
        "device_us": device_us,
        "hidden": all(lp["hidden"] for lp in loops),
        "attempts": loops,
        "rule": f"wall > {HIDDEN_RATIO} x max(host, device) + {HIDDEN_SLACK_US} us "
        f"in each of up to {max(1, attempts)} loops",
    }


# ------------------------------------------------------------------------------------ ceilings


def above_ceilings(case: dict, provider: dict, ceilings: dict | None) -> dict | None:
    """The flag for a provider whose rate is above the run's measured ceiling, or None.

    Uses the derived numbers (``artifacts.fill_derived``), never recomputes them: TB/s against
    the copy ceiling (the median of its confirmation runs), TFLOP/s against the dtype's matmul
    ceiling. In the warm lane inputs may sit in L2, so a TB/s above the DRAM copy ceiling is
    flagged with that note rather than as an impossibility."""
    if not ceilings or provider.get("status") != "ok":
        return None
    d = provider.get("derived") or {}
    flags = []
    copy = ceilings.get("copy_tbps")
    if d.get("tbps") and copy and d["tbps"] > copy:
        rng = ceilings.get("copy_tbps_range") or [None, None]
        flags.append({
            "metric": "tbps", "rate": d["tbps"], "ceiling": copy, "ceiling_max": rng[1],
            "within_range": rng[1] is not None and d["tbps"] <= rng[1],
        })  # fmt: skip
    mm = (ceilings.get("mm_tflops") or {}).get(case.get("dtype"))
    if d.get("tflops") and mm and d["tflops"] > mm:
        rng = (ceilings.get("mm_tflops_range") or {}).get(case.get("dtype")) or [None, None]
        flags.append({
            "metric": "tflops", "rate": d["tflops"], "ceiling": mm, "ceiling_max": rng[1],
            "within_range": rng[1] is not None and d["tflops"] <= rng[1],
        })  # fmt: skip
    if not flags:
        return None
    note = "requested rate above the run's measured ceiling: check the work model and the timing"
    if case.get("lane") == "warm":
        note += " (warm lane: inputs may be served from L2, which the DRAM copy ceiling is not)"
    return {"flags": flags, "note": note}
