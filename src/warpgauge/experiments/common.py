"""What every experiment shares: device timing (CUDA-graph replay between events), interleaved
rounds, the Triton compile metadata (registers, spills, shared memory), and the artifact writer
(``<out>/<experiment>.json`` with provenance and telemetry, plus a SHA-256 manifest)."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from warpgauge import artifacts

SCHEMA_VERSION = 1


def graph_timer(fn: Callable[[], object], calls: int = 10):
    """Capture ``calls`` calls of ``fn`` into one CUDA graph; returns ``sample()`` -> us per call
    of one replay between two events (the host's launch cost is not in the interval)."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            fn()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def sample() -> float:
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000.0 / calls

    sample.graph = g  # keep the graph alive with the sampler
    return sample


def calls_for(fn, target_us: float = 200.0, max_calls: int = 50) -> int:
    """Calls per graph so one replay lasts about ``target_us``, sized from the *device* time of a
    one-call graph replay (median of 5), never from an eager host-bound estimate."""
    one = graph_timer(fn, 1)
    est = statistics.median(one() for _ in range(5))
    return int(max(1, min(max_calls, target_us // max(est, 0.5))))


def interleaved(variants: dict[str, Callable[[], object]], rounds: int = 5, per_round: int = 5,
                seed: int = 0) -> dict[str, dict]:  # fmt: skip
    """Time every variant by graph replay in shuffled rounds; returns name -> stats (us)."""
    samplers = {}
    errors = {}
    for name, fn in variants.items():
        try:
            samplers[name] = graph_timer(fn, calls_for(fn))
        except Exception as e:  # one variant that cannot run must not stop the sweep
            errors[name] = f"{type(e).__name__}: {e}"
    rng = random.Random(seed)
    samples: dict[str, list[float]] = {n: [] for n in samplers}
    for _ in range(rounds):
        order = list(samplers)
        rng.shuffle(order)
        for n in order:
            samples[n] += [samplers[n]() for _ in range(per_round)]
    out = {n: summarize(v) for n, v in samples.items()}
    for n, e in errors.items():
        out[n] = {"error": e}
    return out


def summarize(v: list[float]) -> dict:
    if not v:
        return {"n": 0}
    s = sorted(v)
    q = statistics.quantiles(s, n=10) if len(s) >= 2 else [s[0]] * 9
    return {"median_us": statistics.median(s), "p10_us": q[0], "p90_us": q[-1], "min_us": s[0],
            "max_us": s[-1], "n": len(s), "samples_us": v}  # fmt: skip


def compiled_meta(handle) -> dict:
    """Registers per thread, spills and shared memory of a launched Triton kernel (the handle a
    ``kernel[grid](...)`` call returns)."""
    return {
        "n_regs": getattr(handle, "n_regs", None),
        "n_spills": getattr(handle, "n_spills", None),
        "shared_bytes": getattr(getattr(handle, "metadata", None), "shared", None),
        "num_warps": getattr(getattr(handle, "metadata", None), "num_warps", None),
    }


def write(out_dir: Path, name: str, record: dict) -> Path:
    """Write ``<out_dir>/<name>.json`` (with provenance and telemetry) and refresh the manifest."""
    from warpgauge.environment import provenance

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    full = {
        "schema_version": SCHEMA_VERSION,
        "kind": "experiment",
        "experiment": name,
        "created_at": artifacts.utc_now(),
        "provenance": provenance(),
        **record,
    }
    path = artifacts.atomic_write_json(out_dir / f"{name}.json", full)
    from warpgauge.profile.artifact import write_manifest

    write_manifest(out_dir, out_dir.name)
    return path


def now() -> float:
    return time.perf_counter()
