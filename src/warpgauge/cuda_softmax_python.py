"""The CUDA softmax runner's Python providers: ``torch.softmax`` and ``warpgauge.softmax`` timed the
way the CUDA program times its kernels (compute warm-up, rotating order, CUDA events, median).

Imported by ``warpgauge.cuda_softmax`` only when the Python providers are timed (it imports torch).
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

from .cuda_softmax_summary import (
    PYTHON_PROVIDERS,
    PYTHON_SCHEMA,
    TOLERANCE,
    percentile,
    sample_stats,
)

# ------------------------------------------------------------------- torch and warpgauge timing


def _row_errors(torch, y, ref) -> tuple[float, float]:
    y64 = y.detach().to("cpu", torch.float64)
    abs_err = (y64 - ref).abs().max().item()
    sum_err = (y64.sum(-1) - ref.sum(-1)).abs().max().item()
    return abs_err, sum_err


def time_python_providers(a: argparse.Namespace) -> dict[str, Any]:
    """torch.softmax and warpgauge.softmax at (rows, width) FP32, timed like the CUDA program:
    compute warm-up, then rounds of [pad, every provider once in rotating order], each sample
    between two CUDA events; correctness (FP64 reference, NaN never passes) before timing."""
    doc: dict[str, Any] = {"schema": PYTHON_SCHEMA, "rows": a.rows, "width": a.width}

    def none_available(reason: str) -> dict[str, Any]:
        doc["providers"] = [
            {"name": n, "available": False, "reason": reason} for n in PYTHON_PROVIDERS
        ]
        return doc

    try:
        import torch
    except ImportError as e:
        return none_available(f"unavailable: cannot import torch ({e})")
    if not torch.cuda.is_available():
        return none_available("unavailable: torch.cuda.is_available() is False")

    dev = torch.device("cuda")
    doc["device"] = torch.cuda.get_device_name(dev)
    doc["torch_version"] = torch.__version__
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    x = torch.rand(a.rows, a.width, device=dev, generator=gen) * 12.0 - 6.0
    x = torch.where(x == 0, torch.full_like(x, 1e-3), x)  # never exactly zero
    ref = torch.softmax(x.to("cpu", torch.float64), dim=-1)

    candidates: dict[str, Any] = {"torch.softmax": lambda: torch.softmax(x, dim=-1)}
    unavailable: dict[str, str] = {}
    try:
        import warpgauge

        wg_softmax = warpgauge.softmax
        candidates["warpgauge.softmax"] = lambda: wg_softmax(x)
    except Exception as e:  # recorded, never silent: the table shows the reason
        unavailable["warpgauge.softmax"] = f"unavailable: {type(e).__name__}: {e}"

    providers: dict[str, dict[str, Any]] = {}
    timed: dict[str, Any] = {}
    for name, fn in candidates.items():
        try:
            y = fn()  # also compiles/autotunes before any timing
            torch.cuda.synchronize()
        except Exception as e:
            unavailable[name] = f"unavailable: {type(e).__name__}: {e}"
            continue
        abs_err, sum_err = _row_errors(torch, y, ref)
        correct = abs_err <= TOLERANCE and sum_err <= TOLERANCE  # NaN compares False
        providers[name] = {
            "name": name,
            "available": True,
            "correct": correct,
            "max_abs_err": abs_err if math.isfinite(abs_err) else None,
            "max_row_sum_err": sum_err if math.isfinite(sum_err) else None,
        }
        if correct:
            timed[name] = fn
        else:
            providers[name]["reason"] = "incorrect: not timed"
    for name, reason in unavailable.items():
        providers[name] = {"name": name, "available": False, "reason": reason}

    names = list(timed)
    # Compute warm-up: FP32 matmuls until warmup_ms of wall time has passed.
    a_mat = torch.randn(2048, 2048, device=dev, generator=gen)
    t0 = time.perf_counter()
    launches = 0
    while names and (time.perf_counter() - t0) * 1e3 < a.warmup_ms:
        _ = a_mat @ a_mat
        torch.cuda.synchronize()
        launches += 1
    doc["warmup_ms_actual"] = (time.perf_counter() - t0) * 1e3
    doc["warmup_launches"] = launches

    # Pad: torch.cuda._sleep spins for a number of GPU cycles; calibrated to python_pad_us.
    pad_cycles = 0
    sleep = getattr(torch.cuda, "_sleep", None)
    if names and a.python_pad_us > 0 and sleep is not None:
        probe = 1_000_000
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(2):  # the first call may include loading the kernel; keep the second
            s.record()
            sleep(probe)
            e.record()
            e.synchronize()
        pad_cycles = max(1, int(probe * a.python_pad_us / (s.elapsed_time(e) * 1e3)))
    doc["pad_us_target"] = a.python_pad_us
    doc["pad_cycles"] = pad_cycles
    doc["pad"] = "torch.cuda._sleep" if pad_cycles else "none"

    samples: dict[str, list[float]] = {n: [] for n in names}
    gaps: list[float] = []
    if names:
        ev = {
            n: (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for n in names
        }
        pad_end = torch.cuda.Event(enable_timing=True)
        for r in range(a.rounds):
            if pad_cycles:
                sleep(pad_cycles)
            pad_end.record()
            order = [names[(r + j) % len(names)] for j in range(len(names))]
            for n in order:
                ev[n][0].record()
                for _ in range(a.inner):
                    timed[n]()
                ev[n][1].record()
            ev[order[-1]][1].synchronize()
            total = 0.0
            for n in names:
                ms = ev[n][0].elapsed_time(ev[n][1])
                samples[n].append(ms * 1e3 / a.inner)
                total += ms * 1e3
            gaps.append(max(0.0, pad_end.elapsed_time(ev[order[-1]][1]) * 1e3 - total))
    gap_sorted = sorted(gaps)
    doc["round_gap_us"] = {
        "median": percentile(gap_sorted, 0.5) if gaps else None,
        "max": gap_sorted[-1] if gaps else None,
    }
    doc["rounds"], doc["inner"] = a.rounds, a.inner
    for n in names:
        providers[n].update(sample_stats(samples[n]), samples_us=samples[n])
    doc["providers"] = [providers[n] for n in PYTHON_PROVIDERS if n in providers]
    return doc
