"""The timer the experiment sweeps share (GPU only): CUDA-graph replay of back-to-back calls, and
the device's L2 size for the rotation that keeps weights out of it."""

from __future__ import annotations

import torch


def l2_bytes() -> int:
    return int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 60 << 20))


def bench_graph(fn, target_s=1.0e-3, replays=3, max_calls=400, calls=None):
    """(median, min, n): per-call seconds over ``replays`` replays of one graph of ``n``
    back-to-back calls, ``n`` sized from an eager estimate so a replay lasts about ``target_s``
    (``calls`` forces ``n``: callers that sized it from device time)."""
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    s.record()
    for _ in range(3):
        fn()
    e.record()
    torch.cuda.synchronize()
    t0 = max(s.elapsed_time(e) / 3e3, 1e-6)
    n = int(calls) if calls else int(min(max(target_s / t0, 4), max_calls))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            for _ in range(n):
                fn()
    torch.cuda.current_stream().wait_stream(stream)
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(replays):
        s.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / 1e3 / n)
    ts.sort()
    return ts[len(ts) // 2], ts[0], n
