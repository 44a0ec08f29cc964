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
