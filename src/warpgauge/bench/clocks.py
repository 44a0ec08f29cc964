"""GPU clocks while measuring: a light NVML reader, the clock warm-up, and the throttle rule.

Three things live here (docs/methodology.md, "Clocks"):

- :class:`NvmlClocks` reads the SM clock, its maximum, the power draw and the clock event
  (throttle) reasons through NVML (``nvidia-ml-py``). One reading costs tens of microseconds and
  is taken only between timed batches, never inside a timed interval. Without NVML every reading
  is ``None`` and everything below degrades to "not known" (recorded as such), never to an error.
- :class:`ClockWarmup` brings an idle GPU's clocks up before a case is sampled *without* pushing
  it into its power limit. A 200 ms burst of BF16 4096^3 matmuls (the previous warm-up) draws the
  H200 to its power cap: NVML then reports ``sw_power_cap`` with the SM clock at 1425-1560 MHz of
  1980, and the first round after it ran 5-8 % slower than the later ones. The warm-up here is a
  memory-bound load (rewriting the L2-flush buffer) in short pieces; after each piece it reads
  NVML and stops as soon as the SM clock is within ``ready_fraction`` of its maximum with no power
  or thermal cap active (twice in a row), bounded by ``max_ms``. If a cap is still active then,
  it waits idle (bounded by ``settle_ms``) for the cap to clear. The case records what happened.
- :func:`throttled`: a reading with the SM clock below ``THROTTLE_FRACTION`` (75 %, nvbench's
  rule) of the maximum marks the samples of the batch it brackets as throttled.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

THROTTLE_FRACTION = 0.75  # nvbench: a sample taken below 75 % of the max SM clock is throttled
READY_FRACTION = 0.90  # warm-up goal: SM clock within 10 % of its maximum
# Reasons that mean the clock is held down by power or temperature (gpu_idle is normal between
# kernels; applications/sync-boost/display settings are configuration, not load).
CAP_REASONS = frozenset({
    "sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
})  # fmt: skip


@dataclass(frozen=True)
class Reading:
    """One NVML reading. ``t`` is seconds on the harness clock."""

    t: float
    sm_mhz: int | None
    max_sm_mhz: int | None
    power_w: float | None
    reasons: tuple[str, ...]

    @property
    def fraction(self) -> float | None:
        if not self.sm_mhz or not self.max_sm_mhz:
            return None
        return self.sm_mhz / self.max_sm_mhz

    @property
    def capped(self) -> bool:
        return bool(CAP_REASONS.intersection(self.reasons))

    def record(self) -> dict:
        return {
            "sm_mhz": self.sm_mhz,
            "max_sm_mhz": self.max_sm_mhz,
            "power_w": None if self.power_w is None else round(self.power_w, 1),
            "reasons": list(self.reasons),
        }


class ClockReader(Protocol):
    def read(self) -> Reading | None: ...


class NoClocks:
    """No NVML here: every reading is unknown."""

    error = "NVML unavailable"

    def read(self) -> Reading | None:
        return None


class NvmlClocks:
    """SM clock, max SM clock, power and clock event reasons of one device through NVML."""

    def __init__(self, device_index: int = 0, now: Callable[[], float] = time.perf_counter):
        self._now = now
        self.error: str | None = None
        self._nv = None
        self._h = None
        self._max: int | None = None
        self._reasons = None
        try:
            from warpgauge import environment

            nv = environment._nvml()
            if nv is None:
                self.error = environment._nvml_state.get("error", "NVML unavailable")
                return
            self._h = environment._handle(nv, device_index)
            self._nv = nv
            self._decode = environment.decode_reasons
            try:
                self._max = int(nv.nvmlDeviceGetMaxClockInfo(self._h, nv.NVML_CLOCK_SM))
            except Exception:
                self._max = None
            self._reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
                nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
            )
        except Exception as e:  # no driver, no device: degrade to "unknown"
            self.error = f"NVML: {type(e).__name__}: {e}"
            self._nv = None

    @property
    def available(self) -> bool:
        return self._nv is not None

    def read(self) -> Reading | None:
        nv, h = self._nv, self._h
        if nv is None:
            return None
        try:
            sm = int(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
        except Exception:
            sm = None
        try:
            power = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
        except Exception:
            power = None
        reasons: tuple[str, ...] = ()
        if self._reasons is not None:
            try:
                reasons = tuple(self._decode(int(self._reasons(h))))
            except Exception:
                reasons = ()
        return Reading(self._now(), sm, self._max, power, reasons)


def throttled(r: Reading | None, fraction: float = THROTTLE_FRACTION) -> bool | None:
    """True if the reading's SM clock is below ``fraction`` of its maximum; None if unknown."""
    if r is None or r.fraction is None:
        return None
    return r.fraction < fraction


def ready(r: Reading | None, fraction: float = READY_FRACTION) -> bool | None:
    """Clocks up and uncapped: SM clock >= ``fraction`` of max and no power/thermal cap."""
    if r is None or r.fraction is None:
        return None
    return r.fraction >= fraction and not r.capped


class _Clock(Protocol):
    def now(self) -> float: ...


class ClockWarmup:
    """Before each case: bring the clocks up with a light load, check them, record the result.

    ``load(ms)`` keeps the device busy for about ``ms`` milliseconds with a memory-bound load and
    returns when that work has finished; ``wait(ms)`` idles. A case that starts less than
    ``skip_ms`` after the previous load (or case) ended skips the load but still reads the clocks.
    """

    def __init__(
        self,
        clock: _Clock,
        load: Callable[[float], None],
        reader: ClockReader,
        *,
        piece_ms: float = 10.0,
        min_ms: float = 30.0,
        max_ms: float = 300.0,
        settle_ms: float = 200.0,
        skip_ms: float = 250.0,
        ready_fraction: float = READY_FRACTION,
        wait: Callable[[float], None] | None = None,
    ):
        self.clock = clock
        self._load = load
        self.reader = reader
        self.piece_ms = float(piece_ms)
        self.min_ms = float(min_ms)
        self.max_ms = float(max_ms)
        self.settle_ms = float(settle_ms)
        self.skip_ms = float(skip_ms)
        self.ready_fraction = ready_fraction
        self._wait = wait or (lambda ms: time.sleep(ms / 1000.0))
        self.last_end: float | None = None

    def touch(self) -> None:
        """The device was just busy (a case or the ceilings): clocks are still up."""
        self.last_end = self.clock.now()

    def before_case(self) -> dict:
        """Warm (unless recently busy), check, and return the case's ``warmup`` record.

        Reads NVML, then acts on what it shows, until done or out of bounds: clocks up and
        uncapped (``ready``) -> done once that held for two readings in a row (one when the device
        was busy < ``skip_ms`` ago) and at least ``min_ms`` of load ran (none when recently busy);
        a power or thermal cap active -> wait idle 20 ms (at most ``settle_ms`` in all); clocks low
        and uncapped -> another ``piece_ms`` of load (at most ``max_ms`` in all). Without NVML:
        ``min_ms`` of load unless recently busy."""
        now = self.clock.now()
        ago = None if self.last_end is None else max(0.0, (now - self.last_end) * 1000.0)
        recent = ago is not None and ago < self.skip_ms
        rec: dict[str, Any] = {
            "burst_ms": 0.0,
            "skipped": recent,
            "last_burst_ended_ms_ago": ago,
            "method": "memory-bound load in pieces until NVML shows clocks up and uncapped",
        }
        if self.max_ms <= 0:
            rec["method"] = "disabled"
            rec.update(pieces=0, settle_ms=0.0, clocks=None, ready=None)
            return rec
        need = 1 if recent else 2
        min_load = 0.0 if recent else self.min_ms
        loaded = waited = 0.0
        good = pieces = 0
        eps = 1e-6  # float slack on the fake clock's sums
        r = None
        while True:
            r = self.reader.read()
            ok = ready(r, self.ready_fraction)
            if ok is None:  # NVML cannot tell: the fixed minimum
                if loaded + eps >= min_load:
                    break
            elif ok:
                good += 1
                if good >= need and loaded + eps >= min_load:
                    break
            elif r.capped:
                good = 0
                if waited + eps >= self.settle_ms:
                    break
                step = min(20.0, self.settle_ms - waited)
                self._wait(step)
                waited += step
                continue
            else:
                good = 0
                if loaded + eps >= self.max_ms:
                    break
            t0 = self.clock.now()
            self._load(self.piece_ms)
            loaded += (self.clock.now() - t0) * 1000.0
            pieces += 1
        rec["burst_ms"] = loaded
        rec["pieces"] = pieces
        rec["settle_ms"] = waited
        rec["clocks"] = None if r is None else r.record()
        rec["ready"] = ready(r, self.ready_fraction)
        self.last_end = self.clock.now()
        return rec
