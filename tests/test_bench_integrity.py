"""The checks after timing and the faults, end to end through the runner on fakes: every
dishonest provider is caught, every fault recorded, and the honest providers are unaffected."""

from __future__ import annotations

import json

import pytest
import torch

from warpgauge import artifacts
from warpgauge.bench import integrity
from warpgauge.bench.errors import ProviderTimeout, time_limit
from warpgauge.bench.runner import run_bench

from .test_bench_fakes import (
    Counter,
    FakeBackend,
    FakeClock,
    dishonest_providers,
    fake_add_spec,
    fake_services,
    fake_suite,
    faulty_providers,
)


def _cases(run_dir):
    return {
        c["case_id"]: c
        for c in (json.loads(p.read_text()) for p in sorted((run_dir / "cases").glob("*.json")))
    }


def _by_name(case):
    return {p["name"]: p for p in case["providers"]}


@pytest.fixture(scope="module")
def dishonest_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dishonest")
    clock, counter = FakeClock(), Counter()
    backend = FakeBackend(clock)
    spec = fake_add_spec(clock, counter, extra=dishonest_providers(clock, backend))
    sv = fake_services(clock, spec, backend)
    out = run_bench(fake_suite(numels=(1024,)), sv, ["x"], out_root=tmp)
    return out, _cases(out.run_dir)


@pytest.mark.parametrize(
    "name, why",
    [
        ("cheat_cached", "graph replay after timing"),  # the graph holds no work
        ("cheat_skips", "CUDA-graph replay wrote a wrong result"),
        ("cheat_side_stream", "graph replay after timing"),  # side-stream work is not captured
        ("cheat_lazy", "work outside the timed interval"),
        ("cheat_modifies", "modified its inputs"),
        ("cheat_lazy_events", "work outside the timed interval"),
        ("cheat_side_events", "work outside the timed interval"),
    ],
)
def test_each_dishonest_provider_is_caught(dishonest_run, name, why):
    out, cases = dishonest_run
    for case in cases.values():
        p = _by_name(case)[name]
        assert p["status"] == "failed_gate", (name, p["status"], p["error"])
        assert why in p["error"], p["error"]
        assert p["device_time"] is None and p["gate"]["ok"] is False
        assert name not in [q["name"] for q in case["providers"] if q["status"] == "ok"]


def test_cached_output_is_caught_without_graphs_too():
    clock = FakeClock()
    backend = FakeBackend(clock)
    cheat = next(p for p in dishonest_providers(clock, backend) if p.name == "cheat_cached")
    x, y = torch.randn(64), torch.randn(64)
    built = cheat.build({"x": x, "y": y}, None)
    ref = (x.double() + y.double()).float()
    assert torch.equal(built.fn(), x + y)  # it passes a first-call gate
    result = integrity.regate(fn=built.fn, graph=None, refs=(ref,), relative=False, out_buffers=(),
                              out_specs=[], device="cpu", sync=backend.sync,
                              inputs={"x": x, "y": y})  # fmt: skip
    assert not result.ok and "eager call after timing" in result.detail and result.n_nan == 64


def test_honest_providers_stay_ok_next_to_cheats(dishonest_run):
    out, cases = dishonest_run
    assert out.exit_code == 0
    assert artifacts.validate_run(out.run_dir) == []
    for case in cases.values():
        by = _by_name(case)
        for name, us in (("warpgauge", 10.0), ("torch", 20.0), ("compile", 15.0), ("peer", 40.0)):
            p = by[name]
            assert p["status"] == "ok" and p["extra"]["regate"]["ok"] is True
            assert p["device_time"]["median_us"] == pytest.approx(us)
            assert p["extra"]["hidden_work_check"]["hidden"] is False
            # gate, warm-up, capture, every batch (>= 3 rounds), after timing
            assert p["extra"]["inputs_checked"] >= 6
        # the inputs were restored after cheat_modifies: later providers still pass
        assert by["cheat_modifies"]["error"].endswith("inputs restored")


def test_faults_are_recorded_and_the_run_goes_on(tmp_path):
    clock, counter = FakeClock(), Counter()
    spec = fake_add_spec(clock, counter, extra=faulty_providers(clock))
    sv = fake_services(clock, spec)
    suite = fake_suite(numels=(1024,), provider_timeout_s=0.3)
    out = run_bench(suite, sv, ["x"], out_root=tmp_path)
    assert out.exit_code == 0 and out.status == "complete"
    for case in _cases(out.run_dir).values():
        by = _by_name(case)
        assert by["oom"]["status"] == "error"
        assert by["oom"]["error"].startswith("out of GPU memory")
        assert by["hangs"]["status"] == "error" and "timed out" in by["hangs"]["error"]
        assert "per-provider time limit of 0.3 s" in by["hangs"]["error"]
        assert by["raises"]["status"] == "error"
        assert all(by[n]["status"] == "ok" for n in ("warpgauge", "torch", "compile", "peer"))


def test_time_limit_interrupts_python_and_is_a_noop_when_off():
    import time

    with (
        pytest.raises(ProviderTimeout, match="per-provider time limit of 0.05 s"),
        time_limit(0.05, "the fake"),
    ):
        time.sleep(5)
    with time_limit(0, "off"):
        pass
    with time_limit(1.0, "fast"):
        pass  # finishes: the timer is cleared
    time.sleep(1.1)  # no stray alarm fires after the block


def test_time_limit_never_fires_inside_an_import(tmp_path, monkeypatch):
    """A limit that fires while a provider's call imports a module waits for the import to end
    (an exception inside it would leave a half-initialized module for every later caller)."""
    import sys
    import time

    (tmp_path / "wg_slow_import_mod.py").write_text("import time\ntime.sleep(0.4)\nDONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    t0 = time.perf_counter()
    with pytest.raises(ProviderTimeout), time_limit(0.05, "the importer"):
        import wg_slow_import_mod  # noqa: F401

        time.sleep(5)
    assert 0.4 <= time.perf_counter() - t0 < 2.0
    assert sys.modules["wg_slow_import_mod"].DONE is True
    sys.modules.pop("wg_slow_import_mod")


def test_warpgauge_failing_its_own_gate_exits_non_zero(tmp_path):
    clock, counter = FakeClock(), Counter()
    spec = fake_add_spec(clock, counter)
    wrong = next(p for p in spec.providers if p.name == "wrong")
    import dataclasses

    providers = tuple(
        dataclasses.replace(wrong, name="warpgauge", family="warpgauge")
        if p.name == "warpgauge"
        else p
        for p in spec.providers
    )
    sv = fake_services(clock, dataclasses.replace(spec, providers=providers))
    out = run_bench(fake_suite(numels=(1024,)), sv, ["x"], out_root=tmp_path)
    assert out.status == "complete" and out.exit_code == 4
    run = json.loads((out.run_dir / "run.json").read_text())
    assert len(run["extra"]["warpgauge_failed_gate"]) == 2  # both lanes
    assert any("FAILED ITS OWN GATE" in line for line in sv.ui.lines)


def test_rate_above_the_ceiling_is_flagged(tmp_path):
    clock, counter = FakeClock(), Counter()
    sv = fake_services(clock, fake_add_spec(clock, counter))
    real = sv.measure_ceilings

    def low(backend, suite):  # a copy ceiling below what warpgauge's fake rate reaches
        r = real(backend, suite)
        r["summary"]["copy_tbps"] = 0.0010
        r["measurements"][0]["device_time"]["median_us"] = 2 * (1 << 30) / 0.0010 / 1e6
        r["measurements"][0]["device_time"].update(
            {k: r["measurements"][0]["device_time"]["median_us"]
             for k in ("p10_us", "p90_us", "min_us", "max_us", "mean_us")},
            samples_us=[r["measurements"][0]["device_time"]["median_us"]],
        )  # fmt: skip
        r["measurements"][0]["tbps"] = 0.0010
        return r

    sv.measure_ceilings = low
    out = run_bench(fake_suite(numels=(1024,)), sv, ["x"], out_root=tmp_path)
    case = _cases(out.run_dir)["add/float32/1024/cold"]
    wg = _by_name(case)["warpgauge"]
    # warpgauge: 3 * 1024 * 4 bytes / 10 us = 0.00123 TB/s > 0.0010
    flag = wg["extra"]["above_ceiling"]
    assert flag["flags"][0]["metric"] == "tbps" and flag["flags"][0]["ceiling"] == 0.0010
    assert "peer" not in [p["name"] for p in case["providers"] if p["extra"].get("above_ceiling")]
    run = json.loads((out.run_dir / "run.json").read_text())
    assert "add/float32/1024/cold warpgauge" in run["extra"]["above_ceiling"]


def test_fingerprint_detects_changes_and_restore_undoes_them():
    g = torch.Generator().manual_seed(0)
    inp = {"x": torch.randn(100, generator=g), "w": torch.randn(3, 4, generator=g).half()}
    before = integrity.fingerprint(inp)
    assert integrity.changed(before, inp) == []
    inp["w"][1, 2] = -inp["w"][1, 2]
    assert integrity.changed(before, inp) == [0]  # sorted keys: w before x
    x0 = inp["x"].clone()
    inp["x"][[3, 7]] = inp["x"][[7, 3]]  # a swap keeps the plain sum, not the weighted one
    assert integrity.changed(before, inp) == [0, 1]
    g = torch.Generator().manual_seed(0)
    fresh = {"x": torch.randn(100, generator=g), "w": torch.randn(3, 4, generator=g).half()}
    integrity.restore(inp, fresh)
    assert integrity.changed(before, inp) == [] and torch.equal(inp["x"], x0)


def test_a_call_stuck_in_the_driver_is_recorded_and_ends_the_process(tmp_path):
    """SIGALRM cannot interrupt a call blocked in C (a kernel that never finishes); the watchdog
    records the provider in run.json and ends the process (here: a fake exit)."""
    import signal
    import threading

    from warpgauge.bench.providers import Built, Provider

    clock, counter = FakeClock(), Counter()
    released = threading.Event()
    exits = []

    def stuck(inp, ctx):
        x, y = inp["x"], inp["y"]
        n = {"calls": 0}

        def fn():
            n["calls"] += 1
            if n["calls"] == 3:  # block like a driver call: no signal reaches Python
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
                try:
                    released.wait(10)
                finally:
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
            clock.advance(5e-6)
            return x + y

        return Built(fn)

    spec = fake_add_spec(clock, counter, extra=(Provider("stuck", "blocks in C", "peer", stuck),))
    sv = fake_services(clock, spec)
    sv.stuck_grace_s = 0.2

    def fake_exit(code):
        exits.append(code)
        released.set()

    sv.exit_process = fake_exit
    out = run_bench(
        fake_suite(numels=(1024,), provider_timeout_s=0.2), sv, ["x"], out_root=tmp_path
    )
    assert exits == [5]
    run = json.loads((out.run_dir / "run.json").read_text())
    hung = run["extra"]["hung"]
    assert [(h["group"], h["provider"]) for h in hung] == [("add/float32/1024", "stuck")]
    assert "stuck (build, gate and warm-up)" in hung[0]["what"]
    # the session that ended here is recorded (the fake exit lets this one go on and close too)
    assert "hung inside the driver" in run["extra"]["sessions"][0]["stopped_because"]
    assert any("blocked in the driver" in line for line in sv.ui.lines)


def test_resume_skips_a_provider_that_hung(tmp_path):
    from warpgauge.bench.runner import Runner

    clock, counter = FakeClock(), Counter()
    suite = fake_suite(numels=(1024, 2048))
    # a Ctrl-C while the second group is prepared, after the first group's cases are written
    c0 = Counter()
    run_bench(fake_suite(numels=(1024,)), fake_services(FakeClock(), fake_add_spec(FakeClock(), c0)),
              ["x"], out_root=tmp_path / "count")  # fmt: skip
    per_group = sum(c0.calls.values())
    sv = fake_services(clock, fake_add_spec(clock, counter, interrupt_after=per_group + 5))
    first = run_bench(suite, sv, ["x"], out_root=tmp_path)
    assert first.status == "interrupted" and "add/float32/2048/cold" in first.missing
    path = first.run_dir / "run.json"
    run = json.loads(path.read_text())
    run["extra"]["hung"] = [{"group": "add/float32/2048", "provider": "torch",
                             "what": "torch (sampling)", "limit_s": 300, "at": "x"}]  # fmt: skip
    artifacts.write_run(first.run_dir, run)
    clock2 = FakeClock()
    sv2 = fake_services(clock2, fake_add_spec(clock2, Counter()))
    second = Runner(suite, sv2, ["x"]).run(resume=first.run_dir)
    assert second.status == "complete" and sv2.ui.done == first.missing
    case = _cases(first.run_dir)["add/float32/2048/cold"]
    torch_p = _by_name(case)["torch"]
    assert torch_p["status"] == "error" and "hung in an earlier session" in torch_p["error"]
    assert _by_name(case)["warpgauge"]["status"] == "ok"


def test_two_output_providers_are_regated_on_both_outputs(tmp_path):
    """Like add_rms_norm's (y, h): the graph's and the eager call's outputs are tuples; a provider
    that stops writing its second output after the first call is caught."""
    import dataclasses

    from warpgauge.bench.providers import Built, Provider

    clock, counter = FakeClock(), Counter()
    base = fake_add_spec(clock, counter)

    def ref(inp, ctx):
        x, y = inp["x"].double(), inp["y"].double()
        return ((x + y).float(), (x - y).float())

    def honest(inp, ctx):
        x, y = inp["x"], inp["y"]
        a, b = torch.empty_like(x), torch.empty_like(x)

        def fn():
            clock.advance(8e-6)
            return torch.add(x, y, out=a), torch.sub(x, y, out=b)

        return Built(fn, out_buffers=(a, b))

    def second_once(inp, ctx):
        x, y = inp["x"], inp["y"]
        n = {"calls": 0}
        memo = {}

        def fn():
            n["calls"] += 1
            clock.advance(8e-6)
            if n["calls"] == 1:
                memo["b"] = x - y
            return x + y, memo["b"]

        return Built(fn)

    spec = dataclasses.replace(
        base,
        references={"default": ref},
        out_specs=lambda ctx: [((ctx.shape["numel"],), ctx.dtype)] * 2,
        providers=(
            Provider("warpgauge", "two outputs", "warpgauge", honest),
            Provider("torch", "two outputs", "pytorch", honest, baseline=True),
            Provider("second_once", "caches its second output", "peer", second_once),
        ),
    )
    out = run_bench(
        fake_suite(numels=(1024,)), fake_services(clock, spec), ["x"], out_root=tmp_path
    )
    assert out.exit_code == 0
    for case in _cases(out.run_dir).values():
        by = _by_name(case)
        assert by["warpgauge"]["status"] == "ok" and by["warpgauge"]["extra"]["regate"]["ok"]
        assert by["second_once"]["status"] == "failed_gate"
        assert "output 1" in by["second_once"]["error"]


def _clock_with_sync_delays(delays_us):
    """A clock advanced 1 us per provider call and by the next delay at each synchronize."""
    t = [0.0]
    it = iter(delays_us)

    def call():
        t[0] += 1e-6

    def sync():
        t[0] += next(it, 0.0) * 1e-6

    return call, sync, lambda: t[0]


def test_hidden_work_repeats_a_loop_slowed_by_the_host_only():
    from warpgauge.bench import integrity

    # loop 1: the process was descheduled before its synchronize (5 ms); loop 2 is clean
    call, sync, now = _clock_with_sync_delays([0.0, 5000.0, 0.0, 0.0])
    rec = integrity.hidden_work(call, sync, now, device_us=1.0, host_us=1.0)
    assert rec["hidden"] is False and len(rec["attempts"]) == 2
    assert rec["attempts"][0]["hidden"] is True


def test_hidden_work_that_shows_in_every_loop_is_flagged():
    from warpgauge.bench import integrity

    # work deferred to the synchronize every time: 50 us per call more than host or device time
    call, sync, now = _clock_with_sync_delays([0.0, 100 * 50.0] * 3)
    rec = integrity.hidden_work(call, sync, now, device_us=1.0, host_us=1.0, target_s=1e-4)
    assert rec["hidden"] is True and len(rec["attempts"]) == 3
