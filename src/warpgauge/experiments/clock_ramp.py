"""Clock ramp probe: how slow is a short kernel right after the GPU sat idle, and for how long?

For each idle gap (growing lengths): a ~100 ms matmul burst brings the clocks up, the process
sleeps for the gap, the SM clock is read through NVML the moment the gap ends (before any launch),
then a short kernel (a 2 MiB BF16 softmax, a few microseconds, captured in a one-call CUDA graph)
is replayed call by call between CUDA events for ``window_ms``. Before each start event a short
spin (``torch.cuda._sleep``, ``SHIELD_CYCLES``) keeps the stream busy while the host enqueues
the event, the replay and the end event, so the interval is the kernel's own time, not the host's
launch latency. The spin is load too: it is the same in every trial. Each call's time is binned by when it started after the gap. The bench's
warm-up burst (``burst_ms``) and skip window (``burst_skip_ms``) are set from this data. Clocks
are only read, never set.
"""

from __future__ import annotations

import time

from .common import summarize

GAPS_S = (0.1, 1.0, 5.0)  # ~8 s in all: a GPU round is about a minute
TINY_GAPS_S = (0.05, 0.3)
BINS_MS = (0, 5, 20, 50, 100, 200, 400, 800)
SHIELD_CYCLES = 10_000  # ~5 us at 2 GHz, ~29 us at 345 MHz: longer than enqueuing event + replay
MAX_CALLS = 20000  # more than a window holds (~20 us per call), so the window's time ends it


def _sm_clock():
    from warpgauge.environment import telemetry_snapshot

    snap = telemetry_snapshot()
    return snap.get("sm_clock_mhz"), snap


def _burst(ms: float) -> None:
    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1000 < ms:
        for _ in range(4):
            torch.mm(a, a)
        torch.cuda.synchronize()


def probe_once(fn, gap_s: float, window_ms: float) -> dict:
    import torch

    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(MAX_CALLS)]  # fmt: skip
    _burst(100.0)
    time.sleep(gap_s)
    clock, snap = _sm_clock()
    samples = []  # (ms since first launch, us)
    i = 0
    starts = []
    t_start = time.perf_counter()  # the events were created before the gap
    while (time.perf_counter() - t_start) * 1000 < window_ms and i < len(ev):
        starts.append((time.perf_counter() - t_start) * 1000)
        torch.cuda._sleep(SHIELD_CYCLES)
        ev[i][0].record()
        fn()
        ev[i][1].record()
        ev[i][1].synchronize()  # one call at a time: each sample is a lone short kernel
        i += 1
    clock_end, _ = _sm_clock()
    for k in range(i):
        samples.append((starts[k], ev[k][0].elapsed_time(ev[k][1]) * 1000))
    bins = []
    for lo, hi in zip(BINS_MS, (*BINS_MS[1:], float("inf"))):
        vals = [us for t, us in samples if lo <= t < hi]
        if vals:
            s = summarize(vals)
            s.pop("samples_us")
            bins.append({"from_ms": lo, "to_ms": None if hi == float("inf") else hi, **s})
    return {"gap_s": gap_s, "sm_clock_at_wake_mhz": clock, "sm_clock_at_end_mhz": clock_end,
            "telemetry_at_wake": snap, "calls": i, "bins": bins,
            "first_us": samples[0][1] if samples else None}  # fmt: skip


def run(tiny: bool = False) -> dict:
    import torch

    from warpgauge.kernels.softmax import softmax

    x = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)  # 2 MiB
    softmax(x)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        softmax(x)
    fn = g.replay
    gaps = TINY_GAPS_S if tiny else GAPS_S
    window = 150.0 if tiny else 600.0
    trials = [probe_once(fn, g, window) for g in gaps]
    steady = [b["median_us"] for t in trials for b in t["bins"] if b["from_ms"] >= 200]
    return {
        "kernel": "warpgauge softmax, BF16 1024x1024 (2 MiB), a one-call CUDA graph per event "
        f"pair behind a {SHIELD_CYCLES}-cycle spin",
        "method": "100 ms bf16 matmul burst, sleep gap, NVML SM clock read at wake, then per-call "
        f"event timing for {window:.0f} ms; bins by call start after the gap",
        "window_ms": window,
        "trials": trials,
        "steady_median_us": min(steady) if steady else None,
    }


def summary_rows(rec: dict) -> list[str]:
    out = []
    for t in rec["trials"]:
        cells = " ".join(f"{b['from_ms']}-{b['to_ms'] or 'end'}ms:{b['median_us']:.2f}"
                         for b in t["bins"])  # fmt: skip
        out.append(f"gap {t['gap_s']:>5.2f}s clock@wake {t['sm_clock_at_wake_mhz']} MHz  {cells}")
    return out
