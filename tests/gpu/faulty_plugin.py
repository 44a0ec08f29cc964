"""Faulty providers for the GPU fault test (tests/gpu/test_faults_gpu.py), loaded as a plug-in
(``warpgauge bench --provider faulty_plugin:register``) into a real run on a real GPU.

- ``raises``: raises on every call after the gate's first.
- ``oom``: asks the CUDA caching allocator for 64 TiB (a real ``torch.cuda.OutOfMemoryError``).
- ``hangs``: sleeps in Python on its fourth call at the element count ``WG_FAULT_HANG_AT`` names
  (the per-provider time limit interrupts it); elsewhere it is honest.
- ``stuck``: on its fourth call launches a kernel that spins for days and synchronizes on it,
  so the call is blocked inside the driver (the watchdog records it and ends the process).
  Only at the element count ``WG_FAULT_STUCK_AT`` names, so earlier cases finish first.
"""

from __future__ import annotations

import os
import time

import torch

from warpgauge.bench.operators import Built


def _counting(inputs, on_call):
    x, y = inputs["x"], inputs["y"]
    n = {"calls": 0}

    def fn():
        n["calls"] += 1
        on_call(n["calls"])
        return x + y

    return Built(fn)


def register(reg) -> None:
    @reg.provider("add", "raises", "raises after its first call")
    def raises(inputs, ctx):
        def boom(k):
            if k >= 2:
                raise RuntimeError("deliberate failure of the raises provider")

        return _counting(inputs, boom)

    @reg.provider("add", "oom", "asks for 64 TiB of GPU memory")
    def oom(inputs, ctx):
        def grab(k):
            torch.empty(1 << 46, dtype=torch.uint8, device=inputs["x"].device)

        return _counting(inputs, grab)

    @reg.provider("add", "hangs", "sleeps in Python on its fourth call")
    def hangs(inputs, ctx):
        here = str(ctx.shape.get("numel")) == os.environ.get("WG_FAULT_HANG_AT", "")

        def sleep(k):
            if k == 4 and here:
                time.sleep(300.0)

        return _counting(inputs, sleep)

    def stuck_here(ctx) -> str | None:
        at = os.environ.get("WG_FAULT_STUCK_AT", "")
        return None if str(ctx.shape.get("numel")) == at else f"stuck only at numel {at!r}"

    @reg.provider("add", "stuck", "blocks in the driver on its fourth call", available=stuck_here)
    def stuck(inputs, ctx):
        def spin(k):
            if k == 4:
                torch.cuda._sleep(1 << 50)  # about a week of cycles
                torch.cuda.synchronize()

        return _counting(inputs, spin)
