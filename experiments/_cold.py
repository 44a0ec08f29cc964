"""The cold-lane timing loop the row sweeps share (GPU).

Each variant is one CUDA graph holding one call. Before every timed replay the L2 is flushed by
a write of 4x L2 and then a read of a separate 2x-L2 buffer (so the flush's dirty lines are
written back before the start event); variants are interleaved sample by sample in rotated order
and each gets the median of its samples. L2 size comes from the device.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch


class ColdLane:
    def __init__(self) -> None:
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.flush_buf = torch.empty(4 * l2, dtype=torch.uint8, device="cuda")
        self.clean = torch.ones(2 * l2 // 4, dtype=torch.float32, device="cuda").view(-1, 1024)
        self.sink = torch.empty(1024, dtype=torch.float32, device="cuda")

    def flush(self) -> None:
        self.flush_buf.fill_(0x5A)
        torch.sum(self.clean, dim=0, out=self.sink)

    @staticmethod
    def graph(fn: Callable[[], object]) -> tuple[torch.cuda.CUDAGraph, object]:
        """A graph of one ``fn()`` call (after one warm-up call on the capture stream) and the
        output the graph writes."""
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                out = fn()
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        return g, out

    def medians(self, graphs: dict[str, torch.cuda.CUDAGraph], samples: int) -> dict[str, float]:
        """Median microseconds per graph replay, cold, variants rotated sample by sample."""
        times: dict[str, list[float]] = {k: [] for k in graphs}
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        names = list(graphs)
        for i in range(samples):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                self.flush()
                ev[0].record()
                graphs[name].replay()
                ev[1].record()
                torch.cuda.synchronize()
                times[name].append(ev[0].elapsed_time(ev[1]) * 1e3)
        return {k: statistics.median(v) for k, v in times.items()}
