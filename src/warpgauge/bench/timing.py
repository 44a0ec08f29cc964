"""How samples are taken: the device interface, the clock warm-up rule, and the sampling loop.

The sampling logic talks to the GPU only through a small :class:`Backend` (events, flush,
synchronize, burst, graph capture) and reads time only through a :class:`Clock`. ``CudaBackend``
is the real one; tests inject a fake backend and a fake clock and check the loop itself: the
rotation, the rounds, where flushes and syncs fall relative to the event pairs, and the warm-up
rule. No fake backend is reachable from the command line.

Two kinds of sample per provider (docs/methodology.md, "Timing"):

- device time: CUDA-graph replay between two events. The provider's closure is captured into a
  ``torch.cuda.CUDAGraph`` (several calls per graph in the warm lane), so the host's launch cost is
  not in the interval. A closure that cannot be captured is timed per call between events
  instead (back to back, no synchronization), and labelled ``events``.
- host+device time: one call between two events after a full synchronization, so the interval
  holds the host's launch path (Python, dispatcher, launch) plus the device work.

Cold lane: an L2 flush (a write of 4x the L2 size) is enqueued before every timed interval, never
inside it. Warm lane: no flush; one untimed replay/call primes the cache before each batch.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .suite import Sampling


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic clock."""


class MonotonicClock:
    def now(self) -> float:
        return time.perf_counter()


class Backend(Protocol):
    """What the sampler needs from a device. ``CudaBackend`` is the only real implementation."""

    device: Any  # a torch.device
    l2_bytes: int
    flush_bytes: int

    def events(self, n: int) -> list: ...
    def record(self, event) -> None: ...
    def elapsed_us(self, start, end) -> float: ...
    def sync(self) -> None: ...
    def flush(self) -> None: ...
    def burst(self, ms: float) -> None: ...
    def capture(self, fn: Callable[[], Any], calls: int) -> Callable[[], None]: ...
    def release(self) -> None: ...
    def healthy(self) -> str | None: ...


class CaptureError(RuntimeError):
    """A closure could not be captured into a CUDA graph (it is timed per call instead)."""


# ------------------------------------------------------------------------------------ CUDA


class CudaBackend:
    """Events, L2 flush, clock burst and graph capture on one CUDA device."""

    FLUSH_L2_MULTIPLE = 4
    MIN_FLUSH_BYTES = 64 << 20

    def __init__(self, device_index: int = 0):
        import torch

        self._torch = torch
        self.device = torch.device("cuda", device_index)
        torch.cuda.set_device(self.device)
        props = torch.cuda.get_device_properties(self.device)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or 0)
        want = max(self.FLUSH_L2_MULTIPLE * self.l2_bytes, self.MIN_FLUSH_BYTES)
        self.flush_bytes = (want + (1 << 20) - 1) // (1 << 20) * (1 << 20)
        self._flush_buf = torch.empty(self.flush_bytes, dtype=torch.uint8, device=self.device)
        self._burst_mats = None
        self._burst_mm_s = None
        self._graphs: list = []

    # events
    def events(self, n: int) -> list:
        return [self._torch.cuda.Event(enable_timing=True) for _ in range(n)]

    def record(self, event) -> None:
        event.record()

    def elapsed_us(self, start, end) -> float:
        return start.elapsed_time(end) * 1000.0

    def sync(self) -> None:
        self._torch.cuda.synchronize(self.device)

    def flush(self) -> None:
        """Enqueue a write of ``flush_bytes`` (>= 4x L2): evicts whatever the last call left in L2."""
        self._flush_buf.fill_(0x5A)

    def burst(self, ms: float) -> None:
        """Keep the GPU busy with BF16 matmuls for about ``ms`` milliseconds (clock warm-up)."""
        torch = self._torch
        if ms <= 0:
            return
        if self._burst_mats is None:
            g = torch.Generator(device=self.device).manual_seed(0)
            a = torch.randn(4096, 4096, device=self.device, dtype=torch.bfloat16, generator=g)
            self._burst_mats = (a, a.T.contiguous())
        a, b = self._burst_mats
        if self._burst_mm_s is None:
            torch.mm(a, b)
            self.sync()
            e0, e1 = self.events(2)
            e0.record()
            for _ in range(10):
                torch.mm(a, b)
            e1.record()
            self.sync()
            self._burst_mm_s = max(e0.elapsed_time(e1) / 10 / 1000.0, 1e-6)
        deadline = time.perf_counter() + ms / 1000.0
        chunk = max(1, min(200, int(0.02 / self._burst_mm_s)))  # ~20 ms of work per chunk
        while time.perf_counter() < deadline:
            for _ in range(chunk):
                torch.mm(a, b)
            self.sync()

    def capture(self, fn: Callable[[], Any], calls: int) -> Callable[[], None]:
        torch = self._torch
        try:
            side = torch.cuda.Stream(device=self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                fn()  # the documented warm-up on a side stream before capture
            torch.cuda.current_stream(self.device).wait_stream(side)
            self.sync()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                for _ in range(calls):
                    fn()
            self.sync()
        except Exception as e:
            with contextlib.suppress(Exception):
                self.sync()
            raise CaptureError(f"{type(e).__name__}: {e}") from e
        self._graphs.append(graph)
        return graph.replay

    def release(self) -> None:
        """Drop the graphs captured so far and return cached memory to the device."""
        self._graphs.clear()
        self.sync()
        self._torch.cuda.empty_cache()

    def healthy(self) -> str | None:
        """None if the device still works, else why not (a sticky CUDA error kills the context)."""
        torch = self._torch
        try:
            self.sync()
            t = torch.ones(16, device=self.device)
            if float((t + t).sum()) != 32.0:
                return "a trivial kernel returned a wrong result"
        except Exception as e:
            return f"{type(e).__name__}: {e}"
        return None


# ------------------------------------------------------------------------------------ warm-up


class WarmupTracker:
    """Clock warm-up: a ~``burst_ms`` burst before each case unless the previous burst ended less
    than ``skip_ms`` ago. ``before_case`` returns the case artifact's ``warmup`` field."""

    def __init__(
        self, clock: Clock, burst: Callable[[float], None], burst_ms: float, skip_ms: float
    ):
        self.clock = clock
        self._burst = burst
        self.burst_ms = float(burst_ms)
        self.skip_ms = float(skip_ms)
        self.last_end: float | None = None

    def before_case(self) -> dict:
        now = self.clock.now()
        ago = None if self.last_end is None else max(0.0, (now - self.last_end) * 1000.0)
        if self.burst_ms <= 0 or (ago is not None and ago < self.skip_ms):
            return {"burst_ms": 0.0, "skipped": True, "last_burst_ended_ms_ago": ago}
        t0 = self.clock.now()
        self._burst(self.burst_ms)
        t1 = self.clock.now()
        self.last_end = t1
        return {"burst_ms": (t1 - t0) * 1000.0, "skipped": False, "last_burst_ended_ms_ago": ago}


# ------------------------------------------------------------------------------------ sampling


def rotation(names: Sequence[str], round_index: int) -> list[str]:
    """Provider order in round ``round_index``: the base order rotated left by the round number,
    so every provider leads one round in turn and none always follows the same neighbour."""
    names = list(names)
    if not names:
        return []
    k = round_index % len(names)
    return names[k:] + names[:k]


def spread(n: int, rounds: int) -> list[int]:
    """Split ``n`` samples over ``rounds`` rounds as evenly as possible (earlier rounds get the
    remainder)."""
    if rounds <= 0:
        return []
    base, extra = divmod(n, rounds)
    return [base + (1 if i < extra else 0) for i in range(rounds)]


def calls_per_graph(est_us: float, lane: str, s: Sampling) -> int:
    """Calls captured per graph: 1 in the cold lane (a flush precedes every call); in the warm
    lane enough that one replay lasts about ``graph_target_us``, at most ``max_calls_per_graph``."""
    if lane == "cold":
        return 1
    if est_us <= 0:
        return s.max_calls_per_graph
    return int(min(s.max_calls_per_graph, max(1, math.ceil(s.graph_target_us / est_us - 1e-6))))


SYNC_OVERHEAD_US = 20.0  # host cost of a synchronize + two event records, for budgeting only


def plan_samples(
    est_us: float, lane: str, calls: int, flush_us: float, s: Sampling
) -> tuple[int, int]:
    """(device samples, host samples) for one provider in one lane within ``target_ms``."""
    budget_us = s.target_ms * 1000.0
    cold_us = flush_us if lane == "cold" else 0.0
    per_dev = max(est_us, 0.01) * calls + cold_us + 2.0
    n_dev = int(budget_us * (1.0 - s.host_share) / per_dev)
    n_dev = max(s.min_samples, min(s.max_samples, n_dev))
    if s.host_share <= 0:
        return n_dev, 0
    per_host = max(est_us, 0.01) + cold_us + SYNC_OVERHEAD_US
    n_host = int(budget_us * s.host_share / per_host)
    n_host = max(min(s.min_samples, s.max_host_samples), min(s.max_host_samples, n_host))
    return n_dev, n_host


@dataclass
class Timed:
    """One provider being sampled in one lane."""

    name: str
    fn: Callable[[], Any]  # the provider's closure (host+device samples)
    replay: Callable[[], None] | None  # CUDA-graph replay of ``calls`` calls, or None
    calls: int  # calls per replay (1 without a graph)
    n_device: int
    n_host: int
    device_samples: list[float] = field(default_factory=list)
    host_samples: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def device_method(self) -> str:
        return "graph" if self.replay is not None else "events"


def device_batch(backend: Backend, t: Timed, k: int, cold: bool) -> list[float]:
    """``k`` device-time samples (us per call). Flush, if any, sits before the start event."""
    if k <= 0:
        return []
    run = t.replay if t.replay is not None else t.fn
    if not cold:
        run()  # prime: the warm lane measures with this provider's data already resident
    ev = backend.events(2 * k)
    for i in range(k):
        if cold:
            backend.flush()
        backend.record(ev[2 * i])
        run()
        backend.record(ev[2 * i + 1])
    backend.sync()
    return [backend.elapsed_us(ev[2 * i], ev[2 * i + 1]) / t.calls for i in range(k)]


def host_batch(backend: Backend, t: Timed, k: int, cold: bool) -> list[float]:
    """``k`` host+device samples (us): each call starts from an idle, synchronized device."""
    if k <= 0:
        return []
    ev = backend.events(2 * k)
    if not cold:
        t.fn()
    for i in range(k):
        if cold:
            backend.flush()
        backend.sync()
        backend.record(ev[2 * i])
        t.fn()
        backend.record(ev[2 * i + 1])
    backend.sync()
    return [backend.elapsed_us(ev[2 * i], ev[2 * i + 1]) for i in range(k)]


def sample_interleaved(
    backend: Backend,
    timed: Sequence[Timed],
    lane: str,
    rounds: int,
    on_error: Callable[[Timed, BaseException], None] | None = None,
) -> list[list[str]]:
    """Sample every provider in ``timed`` over ``rounds`` rounds, in rotating order. A provider
    that raises stops being sampled (its ``error`` is set; ``on_error`` is told); the others go
    on. Returns the order used in each round."""
    cold = lane == "cold"
    names = [t.name for t in timed]
    by_name = {t.name: t for t in timed}
    rounds = max(1, min(rounds, max((t.n_device for t in timed), default=1)))
    dev_split = {t.name: spread(t.n_device, rounds) for t in timed}
    host_split = {t.name: spread(t.n_host, rounds) for t in timed}
    orders = []
    for r in range(rounds):
        order = rotation(names, r)
        orders.append(order)
        for name in order:
            t = by_name[name]
            if t.error is not None:
                continue
            try:
                t.device_samples += device_batch(backend, t, dev_split[name][r], cold)
                t.host_samples += host_batch(backend, t, host_split[name][r], cold)
            except Exception as e:  # a provider failing mid-sampling loses its samples, not the run
                t.error = f"while sampling: {type(e).__name__}: {e}"
                t.device_samples, t.host_samples = [], []
                if on_error is not None:
                    on_error(t, e)
    return orders


def estimate_us(backend: Backend, fn: Callable[[], Any], calls: int = 3) -> float:
    """Rough per-call device time (median of ``calls`` back-to-back event pairs) for planning."""
    ev = backend.events(2 * calls)
    for i in range(calls):
        backend.record(ev[2 * i])
        fn()
        backend.record(ev[2 * i + 1])
    backend.sync()
    xs = sorted(backend.elapsed_us(ev[2 * i], ev[2 * i + 1]) for i in range(calls))
    return xs[len(xs) // 2]


def measure_flush_us(backend: Backend, n: int = 5) -> float:
    ev = backend.events(2 * n)
    for i in range(n):
        backend.record(ev[2 * i])
        backend.flush()
        backend.record(ev[2 * i + 1])
    backend.sync()
    xs = sorted(backend.elapsed_us(ev[2 * i], ev[2 * i + 1]) for i in range(n))
    return xs[len(xs) // 2]
