"""The timing engine on a real GPU: the clock warm-up leaves clocks up and uncapped, the ceilings
are calibrated and confirmed, and a run through the real CUDA backend catches dishonest providers
with real CUDA semantics (a real side stream, a graph that captured nothing, a cached output,
inputs written in place) while honest providers pass every check. Skipped without CUDA."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

N = 4 << 20  # float32 elements: 16 MiB per tensor


@pytest.fixture(scope="module")
def backend():
    from warpgauge.bench.device import CudaBackend

    return CudaBackend(0)


@pytest.fixture(scope="module")
def nvml():
    from warpgauge.bench.clocks import NvmlClocks

    return NvmlClocks(0)


def test_warmup_brings_clocks_up_without_a_power_cap(backend, nvml):
    import time

    from warpgauge.bench.clocks import ClockWarmup
    from warpgauge.bench.timing import MonotonicClock

    if not nvml.available:
        pytest.skip(f"NVML unavailable: {nvml.error}")
    time.sleep(1.0)  # let the clocks drop
    rec = ClockWarmup(MonotonicClock(), backend.load, nvml).before_case()
    print(json.dumps(rec))
    assert rec["skipped"] is False and rec["burst_ms"] <= 200.0 + 50.0
    assert rec["ready"] is True, rec
    assert "sw_power_cap" not in rec["clocks"]["reasons"]
    assert rec["clocks"]["sm_mhz"] >= 0.9 * rec["clocks"]["max_sm_mhz"]


def test_ceilings_calibrate_and_confirm(backend):
    from warpgauge import artifacts
    from warpgauge.bench import ceilings

    out = ceilings.measure_ceilings(backend, ["bfloat16"], 256 << 20, (1024, 2048), reps=5)
    s = out["summary"]
    confirmations = [m for m in out["measurements"] if m["extra"]["role"] == "confirmation"]
    assert len(confirmations) == 2 and all(len(m["extra"]["runs"]) == 7 for m in confirmations)
    lo, hi = s["copy_tbps_range"]
    assert 0 < lo <= s["copy_tbps"] <= hi
    lo, hi = s["mm_tflops_range"]["bfloat16"]
    assert 0 < lo <= s["mm_tflops"]["bfloat16"] <= hi
    record = {"schema_version": 1, "kind": "ceilings", "run_id": "r",
              "created_at": artifacts.utc_now(), "measurements": out["measurements"]}  # fmt: skip
    assert artifacts.ceilings_problems(record, {"run_id": "r", "ceilings": s}) == []


def _spec():
    from warpgauge.bench.providers import Built, OpSpec, Provider

    def inputs(ctx, g):
        return {
            "x": torch.randn(N, generator=g, device=ctx.device),
            "y": torch.randn(N, generator=g, device=ctx.device),
        }

    def ref(inp, ctx):
        return ((inp["x"].double() + inp["y"].double()).float(),)

    def into_buffer(inp, ctx):
        x, y = inp["x"], inp["y"]
        out = torch.empty_like(x)
        return Built(lambda: torch.add(x, y, out=out), out_buffers=(out,))

    def allocating(inp, ctx):
        x, y = inp["x"], inp["y"]
        return Built(lambda: x + y)

    def cached(inp, ctx):
        x, y = inp["x"], inp["y"]
        memo = {}

        def fn():
            if "out" not in memo:
                memo["out"] = x + y
            return memo["out"]

        return Built(fn)

    def side_stream(inp, ctx):
        x, y = inp["x"], inp["y"]
        buf = torch.empty_like(x)
        a = torch.randn(2048, 2048, device=ctx.device)
        c = torch.empty_like(a)
        side = torch.cuda.Stream(device=ctx.device)

        def fn():
            # never joined back to the current stream: the timing events see none of this; the
            # matmul (~0.3 ms) stands for real work that is far longer than its launch
            with torch.cuda.stream(side):
                torch.mm(a, a, out=c)
                torch.add(x, y, out=buf)
            return buf

        return Built(fn)

    def modifies(inp, ctx):
        x, y = inp["x"], inp["y"]
        n = {"calls": 0}

        def fn():
            n["calls"] += 1
            out = x + y
            if n["calls"] > 8:
                y.mul_(1.0 + 2.0**-10)
            return out

        return Built(fn)

    return OpSpec(
        name="add",
        make_inputs=inputs,
        references={"default": ref},
        work=lambda ctx: (3 * N * 4, N, "gpu test"),
        out_specs=lambda ctx: [((N,), torch.float32)],
        providers=(
            Provider("warpgauge", "torch.add(out=)", "warpgauge", into_buffer),
            Provider("torch", "x + y", "pytorch", allocating, baseline=True),
            Provider("cheat_cached", "cached output", "peer", cached),
            Provider("cheat_side_stream", "side stream", "peer", side_stream),
            Provider("cheat_side_events", "side stream, not graphed", "peer", side_stream,
                     graph_safe=False),
            Provider("cheat_modifies", "modifies its inputs", "peer", modifies),
        ),
    )  # fmt: skip


def test_a_run_catches_dishonest_providers_on_the_gpu(tmp_path, backend, nvml):
    from warpgauge import artifacts, environment
    from warpgauge.bench.runner import QuietUI, Services, run_bench
    from warpgauge.bench.suite import Group, Sampling, Suite
    from warpgauge.bench.timing import MonotonicClock

    suite = Suite(
        name="gpu-engine",
        groups=(Group("add", "float32", "4M", (("numel", N),)),),
        lanes=("cold", "warm"),
        seed=3,
        max_minutes=5.0,
        sampling=Sampling(
            rounds=3, target_ms=40.0, min_samples=10, max_samples=200, max_host_samples=20
        ).check(),  # fmt: skip
        op_settings={"add": {}},
    )

    def ceilings(b, s):
        from warpgauge.bench.ceilings import measure_ceilings

        return measure_ceilings(b, [], 256 << 20, (1024,), reps=5)

    sv = Services(
        backend=backend,
        clock=MonotonicClock(),
        ops={"add": _spec()},
        artifacts=artifacts,
        provenance=lambda: environment.provenance(device_index=0),
        telemetry=lambda: environment.telemetry_snapshot(0),
        measure_ceilings=ceilings,
        ui=QuietUI(),
        clocks=nvml,
    )
    out = run_bench(suite, sv, ["pytest"], out_root=tmp_path)
    assert out.exit_code == 0 and out.status == "complete", sv.ui.lines
    assert artifacts.validate_run(out.run_dir) == []
    for cid in out.finished:
        case = json.loads((out.run_dir / "cases" / artifacts.case_filename(cid)).read_text())
        by = {p["name"]: p for p in case["providers"]}
        print(cid, json.dumps(case["warmup"]))
        for name in ("warpgauge", "torch"):
            p = by[name]
            e = p["extra"]
            print(name, p["status"], p["error"], e.get("noise"), e.get("hidden_work_check"))
            assert p["status"] == "ok", p["error"]
            assert e["regate"]["ok"] is True and e["hidden_work_check"]["hidden"] is False
            assert e["device_method"] == "graph" and e["noise"]["n"] >= 10
            if case["lane"] == "warm":
                assert e["calls_per_replay"] >= 2  # 16 MiB adds: ~15 us, 200 us per replay
        for name in ("cheat_cached", "cheat_side_stream", "cheat_side_events", "cheat_modifies"):
            p = by[name]
            print(name, p["status"], (p["error"] or "")[:200])
            assert p["status"] in ("failed_gate", "error"), (name, p["status"])
            assert p["device_time"] is None
        assert "modified its inputs" in by["cheat_modifies"]["error"]
        if nvml.available:
            assert all(r["clock"] is not None for r in case["extra"]["rounds"])
