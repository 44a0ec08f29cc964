"""GPU probe for finding 5: why torch.compile max-autotune (CUDA graph trees) reports 2-3x the
device time of the same code without graphs. Hypothesis: cudagraph trees copy every input that
is not static into the graph's static buffers on each call (for add: 2 extra reads + 2 writes).
Measured with reduce-overhead (the same cudagraph trees, no autotuning, quick to compile), plain
inputs against inputs marked static. Prints one JSON line per result as it comes."""

import json
import sys
import time

import torch

from warpgauge.bench import integrity


def main(n: int) -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(n, device="cuda", dtype=torch.float16, generator=g)
    y = torch.randn(n, device="cuda", dtype=torch.float16, generator=g)
    ref = (x.double() + y.double()).to(torch.float16)

    def add(a, b):
        return a + b

    def timed(fn, k=20):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 * k)]
        for i in range(k):
            ev[2 * i].record()
            fn()
            ev[2 * i + 1].record()
        torch.cuda.synchronize()
        xs = sorted(ev[2 * i].elapsed_time(ev[2 * i + 1]) * 1000 for i in range(k))
        return round(xs[k // 2], 1)

    def say(**kw):
        print(json.dumps(kw), flush=True)

    say(numel=n, bytes_per_tensor=2 * n, eager_us=timed(lambda: add(x, y)))
    torch._dynamo.reset()
    f = torch.compile(add, mode="reduce-overhead", fullgraph=True, dynamic=False)
    fn = lambda: f(x, y)  # noqa: E731
    say(cudagraph_trees_plain_inputs_us=timed(fn))
    r = integrity.regate(fn=fn, graph=None, refs=(ref,), relative=False, out_buffers=(),
                         out_specs=[], device=x.device, sync=torch.cuda.synchronize,
                         inputs={"x": x, "y": y})  # fmt: skip
    hw = integrity.hidden_work(fn, torch.cuda.synchronize, time.perf_counter, timed(fn), None)
    say(regate_cudagraph_trees_ok=r.ok, detail=r.detail[:160], hidden_work=hw)
    torch._dynamo.reset()
    xs, ys = x.clone(), y.clone()
    torch._dynamo.mark_static_address(xs)
    torch._dynamo.mark_static_address(ys)
    f2 = torch.compile(add, mode="reduce-overhead", fullgraph=True, dynamic=False)
    say(cudagraph_trees_static_inputs_us=timed(lambda: f2(xs, ys)),
        ok=bool(torch.equal(f2(xs, ys), ref)))  # fmt: skip
    torch._dynamo.reset()
    f3 = torch.compile(add, mode="max-autotune-no-cudagraphs", fullgraph=True, dynamic=False)
    say(no_cudagraphs_us=timed(lambda: f3(x, y)))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 64 << 20)
