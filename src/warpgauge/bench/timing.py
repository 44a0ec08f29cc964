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

Cold lane: an L2 flush (a write of 4x the L2 size, then a read of 2x it) is enqueued before every timed interval, never
inside it. Warm lane: no flush; one untimed replay/call primes the cache before each batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .device import CaptureError, CudaBackend, Graph
from .suite import Sampling

__all__ = [
    "CaptureError",
    "CudaBackend",
    "Graph",
]  # re-exported: the device side lives in device.py


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
    clean_bytes: int

    def events(self, n: int) -> list: ...
    def record(self, event) -> None: ...
    def elapsed_us(self, start, end) -> float: ...
    def sync(self) -> None: ...
    def flush(self) -> None: ...
    def load(self, ms: float) -> None: ...
    def capture(self, fn: Callable[[], Any], calls: int) -> Graph: ...
    def release(self) -> None: ...
    def healthy(self) -> str | None: ...


# ------------------------------------------------------------------------------------ order


def williams_rows(n: int) -> list[list[int]]:
    """A balanced Latin square (Williams design) on ``n`` items: every item leads one row, and
    every ordered pair of items is adjacent equally often (once in ``n`` rows for even ``n``;
    for odd ``n`` the square and its mirror give ``2n`` rows in which each pair is adjacent twice)."""
    if n <= 0:
        return []
    if n == 1:
        return [[0]]
    first = [0]
    lo, hi = 1, n - 1
    take_lo = True
    while len(first) < n:
        if take_lo:
            first.append(lo)
            lo += 1
        else:
            first.append(hi)
            hi -= 1
        take_lo = not take_lo
    rows = [[(v + r) % n for v in first] for r in range(n)]
    if n % 2:
        rows += [list(reversed(row)) for row in rows]
    return rows


def round_orders(names: Sequence[str], rounds: int, seed: int) -> list[list[str]]:
    """Provider order of each round: the rows of a Williams square over a seeded shuffle of
    ``names``, the rows themselves taken in a seeded order. No provider always leads, none always
    follows the same neighbour, and which provider leads round 0 depends on the seed (the case),
    not on the order providers are declared in."""
    names = list(names)
    if not names or rounds <= 0:
        return []
    rng = random.Random(seed)
    perm = names[:]
    rng.shuffle(perm)
    rows = williams_rows(len(perm))
    out: list[list[str]] = []
    while len(out) < rounds:
        block = rows[:]
        rng.shuffle(block)
        out += [[perm[i] for i in row] for row in block]
    return out[:rounds]


def spread(n: int, rounds: int) -> list[int]:
    """Split ``n`` samples over ``rounds`` rounds as evenly as possible (earlier rounds get the
    remainder)."""
    if rounds <= 0:
        return []
    base, extra = divmod(n, rounds)
    return [base + (1 if i < extra else 0) for i in range(rounds)]


# ------------------------------------------------------------------------------------ graph size


def calls_per_graph(replay_us: float, lane: str, s: Sampling) -> int:
    """Calls captured per graph, from the device time of one replay of a one-call graph.

    Cold lane: 1 (a flush precedes every call). Warm lane: enough calls that one replay lasts
    about ``graph_target_us`` of device time, at most ``max_calls_per_graph``. Replaying a graph
    costs a roughly fixed launch latency L (a few us) that lands inside the timed interval;
    divided over N calls of device time d each it adds L / (N d) ~ L / graph_target_us to every
    provider alike, whatever its own d (1-2 % at 200 us), except for providers whose d is so
    short that N hits the cap. ``replay_us`` includes L, so N is never overestimated."""
    if lane == "cold":
        return 1
    if not replay_us or replay_us <= 0:
        return s.max_calls_per_graph
    n = math.ceil(s.graph_target_us / replay_us - 1e-6)
    return int(min(s.max_calls_per_graph, max(1, n)))


SYNC_OVERHEAD_US = 20.0  # host cost of a synchronize + two event records, for budgeting only


# ------------------------------------------------------------------------------------ sampling


@dataclass
class Timed:
    """One provider being sampled in one lane."""

    name: str
    fn: Callable[[], Any]  # the provider's closure (host+device samples)
    replay: Graph | Callable[[], None] | None  # replay of a graph of ``calls`` calls, or None
    calls: int  # calls per replay (1 without a graph)
    est_us: float  # device time of one call, for sizing batches
    device_samples: list[float] = field(default_factory=list)
    device_flags: list[bool | None] = field(default_factory=list)  # throttled, per sample
    host_samples: list[float] = field(default_factory=list)
    batches: list[dict] = field(default_factory=list)
    error: str | None = None
    exception: BaseException | None = None
    spent_s: float = 0.0
    stopped: str | None = None  # why sampling stopped: noise, max_samples, time_cap, max_rounds
    noise: float | None = None  # relative standard error of the device median at the end

    @property
    def device_method(self) -> str:
        return "graph" if self.replay is not None else "events"

    def kept(self, min_samples: int) -> list[float]:
        """Device samples used for the statistics: the unthrottled ones, unless fewer than
        ``min_samples`` of them exist (then every sample, and the record says so)."""
        good = [x for x, f in zip(self.device_samples, self.device_flags) if not f]
        return good if len(good) >= min_samples else list(self.device_samples)

    @property
    def n_throttled(self) -> int:
        return sum(1 for f in self.device_flags if f)


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


@dataclass(frozen=True)
class StopRule:
    """When one provider's sampling in one lane stops (docs/methodology.md, "How many samples").

    After every round: stop once at least ``min_rounds`` rounds and ``min_samples`` unthrottled
    device samples are in and the median's relative standard error is at most ``max_rse``; or at
    ``max_samples`` device samples; or once ``cap_s`` seconds were spent sampling it; or after
    ``max_rounds`` rounds."""

    min_samples: int = 10
    max_samples: int = 400
    max_rse: float = 0.01
    min_rounds: int = 3
    max_rounds: int = 16
    cap_s: float = 0.08
    batch_s: float = 0.002  # device time one batch of one provider aims at
    host_samples: int = 30  # host+device samples wanted, spread over the first min_rounds

    @classmethod
    def from_sampling(cls, s: Sampling) -> StopRule:
        return cls(
            min_samples=s.min_samples,
            max_samples=s.max_samples,
            max_rse=getattr(s, "max_rse", 0.01),
            min_rounds=s.rounds,
            max_rounds=max(s.rounds, getattr(s, "max_rounds", 16)),
            cap_s=s.target_ms / 1000.0,
            batch_s=getattr(s, "batch_ms", 2.0) / 1000.0,
            host_samples=s.max_host_samples if s.host_share > 0 else 0,
        )

    def record(self) -> dict:
        return dataclasses.asdict(self)

    def batch_size(self, t: Timed, per_sample_us: float) -> int:
        """Samples in this provider's next batch: about ``batch_s`` of device time, at least
        enough to reach ``min_samples`` in ``min_rounds`` rounds, at most a ``min_rounds``-th of
        ``max_samples`` (so that the samples spread over rounds) and never past ``max_samples``."""
        rounds = max(1, self.min_rounds)
        first = math.ceil(self.min_samples / rounds)
        most = max(first, math.ceil(self.max_samples / rounds))
        by_time = int(self.batch_s * 1e6 / max(per_sample_us, 0.01))
        k = max(first, min(most, by_time))
        return max(1, min(self.max_samples - len(t.device_samples), k))


def sample_rounds(
    backend: Backend,
    timed: Sequence[Timed],
    lane: str,
    rule: StopRule,
    *,
    seed: int = 0,
    clock: Clock | None = None,
    reader: Any = None,
    flush_us: float = 0.0,
    after_batch: Callable[[Timed], None] | None = None,
    on_error: Callable[[Timed, BaseException], None] | None = None,
    guard: Callable[[Timed], Any] | None = None,
) -> list[dict]:
    """Sample every provider in ``timed`` in rounds until each meets ``rule``.

    Each round runs the providers still sampling in a balanced, seeded order (``round_orders``);
    each takes one batch of device samples (and host samples in the first ``min_rounds``
    rounds). NVML is read (``reader``) before the round and after every batch, outside every
    timed interval; a batch bracketed by a reading below 75 % of the max SM clock has its
    samples flagged throttled, and throttled samples do not count toward the stopping rule, so
    a throttled batch is re-measured in a later round. ``after_batch`` runs after each batch
    (the runner checks that the inputs are unchanged); ``guard(t)`` is a context held around
    each batch (the runner's per-provider time limit). A provider that raises in either, or
    while sampling, stops being sampled (its ``error`` and ``exception`` are set). Returns one
    record per round: ``{order, clock}`` (the reading before the round)."""
    from . import clocks as clk
    from .stats import median_rse

    clock = clock or MonotonicClock()
    cold = lane == "cold"
    by_name = {t.name: t for t in timed}
    orders = round_orders([t.name for t in timed], rule.max_rounds, seed)
    rounds: list[dict] = []
    host_per_round = math.ceil(rule.host_samples / max(1, rule.min_rounds))

    def read():
        return reader.read() if reader is not None else None

    for r, order in enumerate(orders):
        active = [n for n in order if by_name[n].error is None and by_name[n].stopped is None]
        if not active:
            break
        before = read()
        rounds.append({"order": active, "clock": None if before is None else before.record()})
        last = before
        for name in active:
            t = by_name[name]
            per = max(t.est_us, 0.01) * t.calls + (flush_us if cold else 0.0)
            k = rule.batch_size(t, per)
            by_time = math.ceil(rule.batch_s * 1e6 / (per + SYNC_OVERHEAD_US))
            kh = max(0, min(host_per_round, by_time, rule.host_samples - len(t.host_samples)))
            t0 = clock.now()
            try:
                with guard(t) if guard is not None else contextlib.nullcontext():
                    dev = device_batch(backend, t, k, cold)
                    host = host_batch(backend, t, kh, cold)
                after = read()
                flag_a, flag_b = clk.throttled(last), clk.throttled(after)
                flag = None if flag_a is None and flag_b is None else bool(flag_a or flag_b)
                t.device_samples += dev
                t.device_flags += [flag] * len(dev)
                t.host_samples += host
                t.batches.append({
                    "round": r, "n": len(dev), "sm_mhz": None if after is None else after.sm_mhz,
                    "reasons": [] if after is None else list(after.reasons), "throttled": flag,
                })  # fmt: skip
                last = after
                if after_batch is not None:
                    after_batch(t)
            except Exception as e:  # a provider failing mid-sampling loses its samples, not the run
                t.error = f"while sampling: {type(e).__name__}: {e}"
                t.exception = e
                t.device_samples, t.host_samples, t.device_flags = [], [], []
                if on_error is not None:
                    on_error(t, e)
                continue
            finally:
                t.spent_s += clock.now() - t0
        for name in active:
            t = by_name[name]
            if t.error is not None:
                continue
            good = [x for x, f in zip(t.device_samples, t.device_flags) if not f]
            t.noise = median_rse(t.kept(rule.min_samples))
            enough = r + 1 >= rule.min_rounds and len(good) >= rule.min_samples
            if enough and t.noise is not None and t.noise <= rule.max_rse:
                t.stopped = "noise"
            if t.stopped is None and len(t.device_samples) >= rule.max_samples:
                t.stopped = "max_samples"
            if t.stopped is None and t.spent_s >= rule.cap_s and r + 1 >= rule.min_rounds:
                t.stopped = "time_cap"
    for t in timed:
        if t.error is None and t.stopped is None:
            t.stopped = "max_rounds"
    return rounds


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


def replay_device_us(backend: Backend, graph: Callable[[], None], n: int = 5) -> float:
    """Device time of one replay of ``graph`` (the shortest of ``n``), with the host kept ahead
    of the device: two L2 flushes are enqueued first, so the replays are already queued when the
    device reaches the first start event and the intervals hold no host launch time. (Timing
    replays back to back on an idle device would measure the host's launch path for short
    graphs.) One untimed replay goes first: a freshly captured graph's first launch is slow on
    the host, and a host that falls behind puts its gap inside the interval. The shortest, not
    the median: a gap only ever lengthens an interval, and in session 19's small-size grids a
    median still read 3-6x the device time for some providers (add_rms_norm 32x127 warm: 18.8
    us against 3.5 for the same kernel as another provider), which gave their warm graphs 11
    calls instead of 50 and each call ~0.4 us more of the replay's launch latency."""
    backend.sync()
    graph()
    backend.sync()
    backend.flush()
    backend.flush()
    ev = backend.events(2 * n)
    for i in range(n):
        backend.record(ev[2 * i])
        graph()
        backend.record(ev[2 * i + 1])
    backend.sync()
    return min(backend.elapsed_us(ev[2 * i], ev[2 * i + 1]) for i in range(n))


def measure_flush_us(backend: Backend, n: int = 5) -> float:
    ev = backend.events(2 * n)
    for i in range(n):
        backend.record(ev[2 * i])
        backend.flush()
        backend.record(ev[2 * i + 1])
    backend.sync()
    xs = sorted(backend.elapsed_us(ev[2 * i], ev[2 * i + 1]) for i in range(n))
    return xs[len(xs) // 2]
