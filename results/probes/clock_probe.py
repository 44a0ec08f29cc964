"""GPU probe (run by gpu.sh on the H200): what the old 200 ms matmul burst does to the clocks,
against the new memory-bound warm-up (warpgauge.bench.clocks.ClockWarmup). Prints JSON lines."""

import json
import sys
import time

import torch

from warpgauge.bench.clocks import ClockWarmup, NvmlClocks
from warpgauge.bench.timing import CudaBackend, MonotonicClock

be = CudaBackend(0)
clk = NvmlClocks(0)
out = {"nvml": clk.available, "nvml_error": clk.error}
x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda").fill_(1)
y = torch.empty_like(x)
s = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)


def timed(fn, n=10):
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 * n)]
    for i in range(n):
        ev[2 * i].record()
        fn()
        ev[2 * i + 1].record()
    torch.cuda.synchronize()
    xs = sorted(ev[2 * i].elapsed_time(ev[2 * i + 1]) * 1000 for i in range(n))
    return round(xs[n // 2], 2)


def rd():
    r = clk.read()
    return None if r is None else [r.sm_mhz, round(r.power_w or 0), list(r.reasons)]


def rounds(label, n=6):
    """Like sampling rounds after a warm-up: clocks, then a copy and a softmax timing, per round."""
    res = []
    for k in range(n):
        res.append({
            "round": k, "clock": rd(), "copy256M_us": timed(lambda: y.copy_(x)),
            "softmax4k_us": timed(lambda: torch.softmax(s, -1)), "clock_after": rd(),
        })  # fmt: skip
    print(json.dumps({"scenario": label, "rounds": res}), flush=True)
    return res


def trace(label, ms, work):
    t0 = time.perf_counter()
    tr = []
    while (time.perf_counter() - t0) * 1000 < ms:
        work()
        tr.append([round((time.perf_counter() - t0) * 1000), *(rd() or [None])])
    print(json.dumps({"scenario": label, "trace": tr[:: max(1, len(tr) // 40)]}), flush=True)


print(json.dumps(out), flush=True)
time.sleep(0.7)
print(json.dumps({"scenario": "idle", "clock": rd()}), flush=True)
rounds("idle, no warm-up", 3)
time.sleep(0.7)
t0 = time.perf_counter()
be.burst(200.0)
print(json.dumps({"scenario": "old burst 200 ms", "burst_s": time.perf_counter() - t0,
                  "clock_right_after": rd()}), flush=True)  # fmt: skip
rounds("after old 200 ms matmul burst")
time.sleep(0.7)
w = ClockWarmup(MonotonicClock(), be.load, clk)
rec = w.before_case()
print(json.dumps({"scenario": "new warm-up", "warmup": rec}), flush=True)
rounds("after new warm-up")
time.sleep(0.7)
rec = w.before_case()
print(json.dumps({"scenario": "new warm-up (2)", "warmup": rec}), flush=True)
rounds("after new warm-up (2)", 3)
sys.stdout.flush()
trace("sustained bf16 4096 mm 250 ms", 250, lambda: (torch.mm(s, s), torch.cuda.synchronize()))
trace("sustained 256M copy 250 ms", 250, lambda: (y.copy_(x), torch.cuda.synchronize()))
