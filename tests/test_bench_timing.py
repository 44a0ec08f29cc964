"""Statistics by hand, and the sampling loop with a fake clock and a fake device (no GPU)."""

from __future__ import annotations

import math

import pytest

from warpgauge.bench import stats, timing
from warpgauge.bench.suite import Sampling

from .test_bench_fakes import FakeBackend, FakeClock

# ------------------------------------------------------------------------------------ stats


def test_stats_hand_computed_even():
    s = stats.summarize([4.0, 1.0, 3.0, 2.0])
    # sorted 1 2 3 4; median (2+3)/2; p10: h=0.3 -> 1+0.3*1; p90: h=2.7 -> 3+0.7*1
    assert s["median_us"] == 2.5
    assert s["p10_us"] == pytest.approx(1.3)
    assert s["p90_us"] == pytest.approx(3.7)
    # |x - 2.5| = 1.5 1.5 .5 .5 -> median 1.0
    assert s["mad_us"] == 1.0
    assert (s["min_us"], s["max_us"], s["mean_us"], s["n"]) == (1.0, 4.0, 2.5, 4)
    assert s["samples_us"] == [4.0, 1.0, 3.0, 2.0]  # raw, in the order taken


def test_stats_hand_computed_odd_with_outlier():
    s = stats.summarize([10.0, 10.0, 11.0, 10.0, 100.0])
    # sorted 10 10 10 11 100: median 10; p90: h=3.6 -> 11 + 0.6*89 = 64.4; p10: h=0.4 -> 10
    assert s["median_us"] == 10.0
    assert s["p90_us"] == pytest.approx(64.4)
    assert s["p10_us"] == 10.0
    # deviations 0 0 1 0 90 -> sorted 0 0 0 1 90 -> 0
    assert s["mad_us"] == 0.0
    assert s["mean_us"] == pytest.approx(28.2)


def test_stats_single_and_empty_and_bad():
    s = stats.summarize([7.5])
    assert s["median_us"] == s["p10_us"] == s["p90_us"] == s["min_us"] == s["max_us"] == 7.5
    assert s["mad_us"] == 0.0 and s["n"] == 1
    assert stats.summarize([]) is None
    with pytest.raises(ValueError):
        stats.summarize([1.0, math.nan])
    with pytest.raises(ValueError):
        stats.summarize([-1.0])


def test_stats_satisfy_the_artifact_rules():
    from warpgauge import artifacts

    xs = [3.1, 2.9, 3.0, 3.3, 2.7, 9.0, 3.05]
    assert artifacts.stats_problems(stats.summarize(xs), "$") == []


# ------------------------------------------------------------------------------------ rotation


def test_rotation_order():
    names = ["a", "b", "c"]
    assert [timing.rotation(names, r) for r in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]
    assert timing.rotation([], 3) == []


def test_spread():
    assert timing.spread(10, 3) == [4, 3, 3]
    assert timing.spread(2, 3) == [1, 1, 0]
    assert sum(timing.spread(401, 7)) == 401


def _fake_fn(clock, log, name, cost_us):
    def fn():
        log.append(name)
        clock.advance(cost_us * 1e-6)

    return fn


def test_interleaved_rounds_rotate_and_count():
    clock = FakeClock()
    backend = FakeBackend(clock)
    calls: list[str] = []
    timed = [
        timing.Timed(n, _fake_fn(clock, calls, n, c), None, 1, n_device=5, n_host=2)
        for n, c in (("a", 1.0), ("b", 2.0), ("c", 3.0))
    ]
    orders = timing.sample_interleaved(backend, timed, "cold", rounds=3)
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    for t, cost in zip(timed, (1.0, 2.0, 3.0)):
        assert len(t.device_samples) == 5 and len(t.host_samples) == 2
        assert all(x == pytest.approx(cost) for x in t.device_samples + t.host_samples)
    # calls happen in rotating blocks: round 0 starts with a, round 1 with b, round 2 with c
    firsts = []
    prev = None
    for name in calls:
        if name != prev:
            firsts.append(name)
        prev = name
    assert firsts[:3] == ["a", "b", "c"] and firsts[3:6] == ["b", "c", "a"]
    assert firsts[6:9] == ["c", "a", "b"]


def test_graph_replay_divides_by_calls_and_warm_lane_primes():
    clock = FakeClock()
    backend = FakeBackend(clock)
    calls: list[str] = []
    fn = _fake_fn(clock, calls, "k", 2.0)
    replay = backend.capture(fn, 4)
    calls.clear()
    t = timing.Timed("k", fn, replay, 4, n_device=3, n_host=0)
    timing.sample_interleaved(backend, [t], "warm", rounds=1)
    assert t.device_samples == [pytest.approx(2.0)] * 3
    # one priming replay + three timed replays, four calls each; no flush in the warm lane
    assert len(calls) == 16 and "flush" not in backend.log


def test_a_provider_failing_mid_sampling_loses_only_itself():
    clock = FakeClock()
    backend = FakeBackend(clock)
    n = {"calls": 0}

    def flaky():
        n["calls"] += 1
        clock.advance(1e-6)
        if n["calls"] > 3:
            raise RuntimeError("boom")

    good = timing.Timed("good", lambda: clock.advance(1e-6), None, 1, 4, 0)
    bad = timing.Timed("bad", flaky, None, 1, 4, 0)
    timing.sample_interleaved(backend, [good, bad], "cold", rounds=2)
    assert len(good.device_samples) == 4
    assert bad.error and "boom" in bad.error and bad.device_samples == []


def test_plan_samples_and_calls_per_graph():
    s = Sampling(target_ms=10.0, host_share=0.5, min_samples=5, max_samples=100, max_host_samples=20,
                 graph_target_us=100.0, max_calls_per_graph=8)  # fmt: skip
    assert timing.calls_per_graph(10.0, "cold", s) == 1
    assert timing.calls_per_graph(10.0, "warm", s) == 8  # ceil(100/10)=10, capped at 8
    assert timing.calls_per_graph(30.0, "warm", s) == 4
    assert timing.calls_per_graph(1000.0, "warm", s) == 1
    n_dev, n_host = timing.plan_samples(1000.0, "cold", 1, 50.0, s)
    assert (n_dev, n_host) == (5, 5)  # long kernel: the minimum
    n_dev, n_host = timing.plan_samples(1.0, "warm", 8, 0.0, s)
    assert (n_dev, n_host) == (100, 20)  # short kernel: the maximum


# ------------------------------------------------------------------------------------ warm-up


def test_warmup_skip_rule_with_fake_clock():
    clock = FakeClock()
    bursts = []

    def burst(ms):
        bursts.append(ms)
        clock.advance(ms / 1000.0)

    w = timing.WarmupTracker(clock, burst, burst_ms=200.0, skip_ms=250.0)
    first = w.before_case()
    assert first == {
        "burst_ms": pytest.approx(200.0),
        "skipped": False,
        "last_burst_ended_ms_ago": None,
    }
    clock.advance(0.1)  # 100 ms after the burst ended: skip
    second = w.before_case()
    assert second["skipped"] is True and second["burst_ms"] == 0.0
    assert second["last_burst_ended_ms_ago"] == pytest.approx(100.0)
    clock.advance(0.149)  # 249 ms: still skip
    assert w.before_case()["skipped"] is True
    clock.advance(0.002)  # 251 ms: burst again
    third = w.before_case()
    assert third["skipped"] is False and third["last_burst_ended_ms_ago"] == pytest.approx(251.0)
    assert bursts == [200.0, 200.0]


def test_warmup_disabled():
    clock = FakeClock()
    w = timing.WarmupTracker(clock, lambda ms: None, burst_ms=0.0, skip_ms=250.0)
    assert w.before_case()["skipped"] is True


def test_estimate_and_flush_measurement():
    clock = FakeClock()
    backend = FakeBackend(clock, flush_s=7e-6)
    assert timing.measure_flush_us(backend) == pytest.approx(7.0)
    assert timing.estimate_us(backend, lambda: clock.advance(3e-6)) == pytest.approx(3.0)
