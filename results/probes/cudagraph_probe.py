"""GPU probe for finding 5: why torch.compile max-autotune (CUDA graph trees) reports 2-3x the
device time of the same code without graphs. Hypothesis: cudagraph trees copy non-static inputs
into the graph's static buffers on every call (2 extra reads + 2 writes for add). Compared here
with reduce-overhead (the same cudagraph trees, no autotuning, fast to compile), then
max-autotune itself. Prints one JSON line per result as it comes."""

import json
import sys

import torch

from warpgauge.bench import integrity

n = int(sys.argv[1]) if len(sys.argv) > 1 else 64 << 20
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(n, device="cuda", dtype=torch.float16, generator=g)
y = torch.randn(n, device="cuda", dtype=torch.float16, generator=g)
ref = (x.double() + y.double()).to(torch.float16)


def add(a, b):
    return a + b


def timed(fn, n=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 * n)]
    for i in range(n):
        ev[2 * i].record()
        fn()
        ev[2 * i + 1].record()
    torch.cuda.synchronize()
    xs = sorted(ev[2 * i].elapsed_time(ev[2 * i + 1]) * 1000 for i in range(n))
    return round(xs[n // 2], 1)


def say(**kw):
    print(json.dumps(kw), flush=True)


say(numel=n, bytes_per_tensor=2 * n, eager_us=timed(lambda: add(x, y)))
f = torch.compile(add, mode="max-autotune-no-cudagraphs", fullgraph=True, dynamic=False)
say(no_cudagraphs_us=timed(lambda: f(x, y)))
torch._dynamo.reset()
f = torch.compile(add, mode="reduce-overhead", fullgraph=True, dynamic=False)
say(cudagraph_trees_plain_inputs_us=timed(lambda: f(x, y)))
fn = lambda: f(x, y)  # noqa: E731
r = integrity.regate(fn=fn, graph=None, refs=(ref,), relative=False, out_buffers=(), out_specs=[],
                     device=x.device, sync=torch.cuda.synchronize, inputs={"x": x, "y": y})  # fmt: skip
say(regate_cudagraph_trees_ok=r.ok, detail=r.detail[:200])
hw = integrity.hidden_work(fn, torch.cuda.synchronize, __import__("time").perf_counter,
                           timed(fn), None)  # fmt: skip
say(hidden_work_cudagraph_trees=hw)
torch._dynamo.reset()
xs, ys = x.clone(), y.clone()
torch._dynamo.mark_static_address(xs)
torch._dynamo.mark_static_address(ys)
f = torch.compile(add, mode="reduce-overhead", fullgraph=True, dynamic=False)
say(cudagraph_trees_static_inputs_us=timed(lambda: f(xs, ys)), ok=bool(torch.equal(f(xs, ys), ref)))
torch._dynamo.reset()
f = torch.compile(add, mode="max-autotune", fullgraph=True, dynamic=False)
say(max_autotune_plain_inputs_us=timed(lambda: f(x, y)))
torch._dynamo.reset()
f = torch.compile(add, mode="max-autotune", fullgraph=True, dynamic=False)
say(max_autotune_static_inputs_us=timed(lambda: f(xs, ys)))
