"""The one real device: events, L2 flush, clock load, CUDA-graph capture on a CUDA GPU.

``timing.Backend`` is the interface; this is its only real implementation (tests use
``tests/test_bench_fakes.FakeBackend``)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any


class Graph:
    """A captured CUDA graph of ``calls`` calls: calling it replays the graph. ``outputs`` is what
    the last captured call returned (tensors in the graph's memory pool, rewritten by each
    replay), so the output of what was timed can be gated again."""

    def __init__(self, replay: Callable[[], None], outputs: Any, calls: int, handle: Any = None):
        self._replay = replay
        self.outputs = outputs
        self.calls = calls
        self.handle = handle

    def __call__(self) -> None:
        self._replay()


class CaptureError(RuntimeError):
    """A closure could not be captured into a CUDA graph (it is timed per call instead)."""


# ------------------------------------------------------------------------------------ CUDA


class CudaBackend:
    """Events, L2 flush, clock burst and graph capture on one CUDA device."""

    FLUSH_L2_MULTIPLE = 4
    MIN_FLUSH_BYTES = 64 << 20
    # The write leaves up to an L2 of dirty lines, written back to DRAM while the next call runs
    # (an idle GPU does not write them back: 200 us of sleep changed nothing). A read of a clean
    # buffer of twice the L2 after it evicts them before the timed interval: on the H200 the write
    # alone added 1-9 us to cold calls (torch.sum of 16384x4096 BF16 46.4 -> 39.1 us, a 32 MB copy
    # 20.8 -> 18.6; experiments/flush_probe.py, results/h200-session10/).
    CLEAN_L2_MULTIPLE = 2

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
        clean = max(self.CLEAN_L2_MULTIPLE * self.l2_bytes, self.MIN_FLUSH_BYTES // 2)
        self.clean_bytes = (clean + (1 << 20) - 1) // (1 << 20) * (1 << 20)
        self._clean_buf = torch.ones(self.clean_bytes // 4, dtype=torch.float32, device=self.device)
        self._clean_sink = torch.empty((), dtype=torch.float32, device=self.device)
        self._burst_mats = None
        self._burst_mm_s = None
        self._fill_us = None
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
        """Enqueue a write of ``flush_bytes`` (>= 4x L2), which evicts whatever the last call left
        in L2, then a read of ``clean_bytes`` (>= 2x L2) of another buffer, which writes the
        dirty lines back before the next call: L2 ends up holding clean lines of neither the
        call's inputs nor its outputs."""
        self._flush_buf.fill_(0x5A)
        self._torch.sum(self._clean_buf, dim=0, out=self._clean_sink)

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

    def load(self, ms: float) -> None:
        """A memory-bound load of about ``ms`` milliseconds (rewrites the flush buffer), then
        waits for it: brings idle clocks up without drawing the GPU to its power cap."""
        if ms <= 0:
            return
        if self._fill_us is None:
            self.flush()
            self.sync()
            e0, e1 = self.events(2)
            e0.record()
            for _ in range(5):
                self.flush()
            e1.record()
            self.sync()
            self._fill_us = max(e0.elapsed_time(e1) * 1000.0 / 5, 1.0)
        for _ in range(max(1, int(ms * 1000.0 / self._fill_us))):
            self.flush()
        self.sync()

    def capture(self, fn: Callable[[], Any], calls: int) -> Graph:
        torch = self._torch
        try:
            side = torch.cuda.Stream(device=self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                fn()  # the documented warm-up on a side stream before capture
            torch.cuda.current_stream(self.device).wait_stream(side)
            self.sync()
            graph = torch.cuda.CUDAGraph()
            out = None
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                for _ in range(calls):
                    out = fn()
            self.sync()
        except Exception as e:
            with contextlib.suppress(Exception):
                self.sync()
            raise CaptureError(f"{type(e).__name__}: {e}") from e
        self._graphs.append(graph)
        return Graph(graph.replay, out, calls, graph)

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
