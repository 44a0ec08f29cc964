"""Fakes for the bench tests (no tests here): a fake clock, a fake device backend that records
every call, and a fake "add" operator on CPU tensors whose providers advance the fake clock.

These exist only for tests: the command line always builds the CUDA backend."""

from __future__ import annotations

import torch

from warpgauge.bench.providers import BuildContext, Built, OpSpec, Provider
from warpgauge.bench.suite import Group, Sampling, Suite


class FakeClock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def now(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class FakeEvent:
    def __init__(self):
        self.t = None


class FakeBackend:
    """Events read the fake clock; flush and load advance it; capture returns a loop.

    Two kinds of work model what a real device does behind the timing events' back: work put on
    a *side stream* (``side(work)``) runs only when the whole device is synchronized (``sync``)
    and is not part of a captured graph (a real graph captures only the capturing stream);
    work *deferred* (``defer(work)``) also runs at ``sync``, graph or not."""

    def __init__(self, clock: FakeClock, flush_s: float = 5e-6):
        self.clock = clock
        self.device = torch.device("cpu")
        self.l2_bytes = 1 << 20
        self.flush_bytes = 4 << 20
        self.clean_bytes = 2 << 20
        self.flush_s = flush_s
        self.log: list = []
        self.captures = 0
        self.pending: list = []
        self.replaying = False

    def events(self, n):
        return [FakeEvent() for _ in range(n)]

    def record(self, ev):
        ev.t = self.clock.now()
        self.log.append("record")

    def elapsed_us(self, a, b):
        return (b.t - a.t) * 1e6

    def sync(self):
        self.log.append("sync")
        work, self.pending = self.pending, []
        for w in work:
            w()

    def side(self, work):
        if not self.replaying:  # a graph never holds a side stream's (uncaptured) work
            self.pending.append(work)

    def defer(self, work):
        self.pending.append(work)

    def flush(self):
        self.clock.advance(self.flush_s)
        self.log.append("flush")

    def burst(self, ms):
        self.clock.advance(ms / 1000.0)
        self.log.append(("burst", ms))

    def load(self, ms):
        self.clock.advance(ms / 1000.0)
        self.log.append(("load", ms))

    def capture(self, fn, calls):
        from warpgauge.bench.timing import Graph

        self.captures += 1
        self.log.append(("capture", calls))
        fn()  # warm-up call, as the CUDA backend does
        out = None
        for _ in range(calls):
            out = fn()
        self.sync()
        graph = None

        def replay():
            self.replaying = True
            try:
                last = None
                for _ in range(calls):
                    last = fn()
            finally:
                self.replaying = False
            if last is not None:  # a real graph rewrites the same output memory
                for o, n in zip(_tup(graph.outputs), _tup(last)):
                    if o is not n and isinstance(o, torch.Tensor):
                        o.copy_(n)

        graph = Graph(replay, out, calls)
        return graph

    def release(self):
        self.log.append("release")

    def healthy(self):
        return None


def _tup(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def fake_provenance() -> dict:
    return {
        "git_commit": None,
        "git_dirty": None,
        "python": "3.11",
        "packages": {
            "torch": torch.__version__,
            "triton": None,
            "numpy": None,
            "warpgauge": "0.1.0",
        },
        "gpu": None,
        "driver": None,
        "cuda": None,
        "hostname": "test",
        "platform": "test",
    }


def fake_telemetry() -> dict:
    from warpgauge import environment

    return environment.null_snapshot("fake device")


class Counter:
    def __init__(self):
        self.calls: dict[str, int] = {}

    def hit(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1


def fake_add_spec(clock: FakeClock, counter: Counter, *, interrupt_after: int | None = None,
                  extra: tuple = ()) -> OpSpec:  # fmt: skip
    """A float32 "add" on CPU tensors. Costs (fake us per call) differ per provider so that the
    statistics are predictable: warpgauge 10, torch 20, compile 15, peer 40."""

    def inputs(ctx: BuildContext, g):
        n = ctx.shape["numel"]
        return {
            "x": torch.randn(n, generator=g, dtype=ctx.dtype),
            "y": torch.randn(n, generator=g, dtype=ctx.dtype),
        }

    def ref(inp, ctx):
        from warpgauge.reference import add_ref

        return (add_ref(inp["x"], inp["y"]),)

    def good(name, cost_us, into_buffer=True):
        def build(inp, ctx):
            x, y = inp["x"], inp["y"]
            out = torch.empty_like(x)

            def fn():
                counter.hit(name)
                if interrupt_after is not None and sum(counter.calls.values()) >= interrupt_after:
                    raise KeyboardInterrupt
                clock.advance(cost_us * 1e-6)
                if into_buffer:
                    return torch.add(x, y, out=out)
                return x + y

            return Built(fn, out_buffers=(out,) if into_buffer else ())

        return build

    def wrong(inp, ctx):
        x, y = inp["x"], inp["y"]

        def fn():
            counter.hit("wrong")
            clock.advance(5e-6)
            return x + 3 * y

        return Built(fn)

    def partial(inp, ctx):
        x, y = inp["x"], inp["y"]
        out = torch.empty_like(x)
        half = x.numel() // 2

        def fn():
            counter.hit("partial")
            clock.advance(5e-6)
            torch.add(x[:half], y[:half], out=out[:half])  # the second half is never written
            return out

        return Built(fn, out_buffers=(out,))

    def raises(inp, ctx):
        def fn():
            counter.hit("raises")
            raise RuntimeError("fake kernel launch failure")

        return Built(fn)

    providers = (
        Provider("warpgauge", "fake warpgauge", "warpgauge", good("warpgauge", 10.0)),
        Provider("torch", "fake torch", "pytorch", good("torch", 20.0), baseline=True),
        Provider("compile", "fake compile", "compile", good("compile", 15.0)),
        Provider("peer", "fake peer (own graphs)", "peer", good("peer", 40.0, into_buffer=False),
                 graph_safe=False),
        Provider("wrong", "wrong result", "peer", wrong),
        Provider("partial", "writes half", "peer", partial),
        Provider("raises", "raises", "peer", raises),
        Provider("absent", "not installed", "peer", raises,
                 available=lambda ctx: "fake_pkg is not installed"),
        *extra,
    )  # fmt: skip
    return OpSpec(
        name="add",
        make_inputs=inputs,
        references={"default": ref},
        work=lambda ctx: (3 * ctx.shape["numel"] * 4, ctx.shape["numel"], "fake"),
        out_specs=lambda ctx: [((ctx.shape["numel"],), ctx.dtype)],
        providers=providers,
    )


def fake_suite(
    numels=(1024, 4096), lanes=("cold", "warm"), max_minutes: float = 60.0, **sampling
) -> Suite:
    base = dict(rounds=3, target_ms=1.0, host_share=0.3, min_samples=3, max_samples=6,
                max_host_samples=3, warmup_calls=1, graph_target_us=40.0,
                max_calls_per_graph=4, burst_ms=200.0, burst_skip_ms=250.0)  # fmt: skip
    base.update(sampling)
    groups = tuple(Group("add", "float32", str(n), (("numel", n),)) for n in numels)
    return Suite(
        name="fake",
        groups=groups,
        lanes=tuple(lanes),
        seed=7,
        max_minutes=max_minutes,
        sampling=Sampling(**base).check(),
        op_settings={"add": {}},
    )


def fake_services(clock: FakeClock, spec: OpSpec, backend: FakeBackend | None = None):
    from warpgauge import artifacts
    from warpgauge.bench.runner import QuietUI, Services

    def ceilings(backend, suite):
        stats = {
            "median_us": 500.0, "p10_us": 500.0, "p90_us": 500.0, "mad_us": 0.0, "min_us": 500.0,
            "max_us": 500.0, "mean_us": 500.0, "n": 1, "samples_us": [500.0],
        }  # fmt: skip
        copy_bytes = 1 << 30
        tbps = 2 * copy_bytes / 500.0 / 1e6
        return {
            "summary": {"copy_tbps": tbps, "copy_bytes": copy_bytes, "mm_tflops": {},
                        "copy_tbps_range": [0.9 * tbps, 1.1 * tbps], "mm_tflops_range": {},
                        "method": "fake"},
            "measurements": [{
                "name": "copy_fake", "kind": "copy", "dtype": None, "shape": {"bytes": copy_bytes},
                "work": {"bytes": 2 * copy_bytes, "flops": 0}, "device_time": stats,
                "tbps": tbps, "tflops": None, "method": "fake",
            }],
        }  # fmt: skip

    return Services(
        backend=backend or FakeBackend(clock),
        clock=clock,
        ops={"add": spec},
        artifacts=artifacts,
        provenance=fake_provenance,
        telemetry=fake_telemetry,
        measure_ceilings=ceilings,
        precompile=None,
        ui=QuietUI(),
        make_generator=lambda device, seed: torch.Generator().manual_seed(seed),
    )


# ------------------------------------------------------------------------------------ dishonest


def dishonest_providers(clock: FakeClock, backend: FakeBackend) -> tuple:
    """Providers that pass the first-call gate and then cheat, one way each. Each must end up
    ``failed_gate``; the honest providers of the same case must stay ok."""

    def cached(inp, ctx):  # computes once, then hands back the same tensor without working
        x, y = inp["x"], inp["y"]
        memo = {}

        def fn():
            if "out" not in memo:
                clock.advance(10e-6)
                memo["out"] = x + y
            clock.advance(0.1e-6)
            return memo["out"]

        return Built(fn)

    def skips_repeats(inp, ctx):  # writes the harness buffer on the first call only
        x, y = inp["x"], inp["y"]
        out = torch.empty_like(x)
        n = {"calls": 0}

        def fn():
            n["calls"] += 1
            if n["calls"] == 1:
                clock.advance(10e-6)
                torch.add(x, y, out=out)
            else:
                clock.advance(0.1e-6)
            return out

        return Built(fn, out_buffers=(out,))

    def side_stream(inp, ctx):  # launches its work on a side stream the events never see
        x, y = inp["x"], inp["y"]
        buf = torch.empty_like(x)

        def work():
            clock.advance(30e-6)
            torch.add(x, y, out=buf)

        def fn():
            clock.advance(1e-6)  # the launch
            backend.side(work)
            return buf

        return Built(fn)

    def lazy(inp, ctx):  # defers its work until somebody synchronizes
        x, y = inp["x"], inp["y"]
        buf = torch.empty_like(x)

        def work():
            clock.advance(30e-6)
            torch.add(x, y, out=buf)

        def fn():
            clock.advance(1e-6)
            backend.defer(work)
            return buf

        return Built(fn)

    def modifies_inputs(inp, ctx):  # correct result, but writes into an input after warm-up
        x, y = inp["x"], inp["y"]
        n = {"calls": 0}

        def fn():
            n["calls"] += 1
            clock.advance(10e-6)
            out = x + y
            if n["calls"] > 6:
                y.mul_(1.5)
            return out

        return Built(fn)

    return (
        Provider("cheat_cached", "returns a cached output", "peer", cached),
        Provider("cheat_skips", "skips work on repeat calls", "peer", skips_repeats),
        Provider("cheat_side_stream", "launches on a side stream", "peer", side_stream),
        Provider("cheat_lazy", "defers its work", "peer", lazy),
        Provider("cheat_modifies", "modifies its inputs", "peer", modifies_inputs),
        Provider("cheat_lazy_events", "defers its work (not captured)", "peer", lazy,
                 graph_safe=False),
        Provider("cheat_side_events", "side stream (not captured)", "peer", side_stream,
                 graph_safe=False),
    )  # fmt: skip


def faulty_providers(clock: FakeClock) -> tuple:
    """A provider that runs out of GPU memory, and one that hangs on its third call."""
    import time as _time

    def oom(inp, ctx):
        def fn():
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

        return Built(fn)

    def hangs(inp, ctx):
        x, y = inp["x"], inp["y"]
        n = {"calls": 0}

        def fn():
            n["calls"] += 1
            if n["calls"] >= 3:
                _time.sleep(30)  # interrupted by the per-provider time limit
            clock.advance(5e-6)
            return x + y

        return Built(fn)

    return (
        Provider("oom", "runs out of GPU memory", "peer", oom),
        Provider("hangs", "hangs", "peer", hangs),
    )
