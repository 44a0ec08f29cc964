"""Statistics by hand, and the sampling loop with a fake clock and a fake device (no GPU)."""

from __future__ import annotations

import dataclasses
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


# ------------------------------------------------------------------------------------ order


def _adjacent(orders):
    pairs = {}
    for o in orders:
        for a, b in zip(o, o[1:]):
            pairs[(a, b)] = pairs.get((a, b), 0) + 1
    return pairs


@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7])
def test_williams_square_is_balanced(n):
    rows = timing.williams_rows(n)
    assert len(rows) == (n if n % 2 == 0 else 2 * n)
    assert all(sorted(r) == list(range(n)) for r in rows)
    # every item leads equally often
    leads = [r[0] for r in rows]
    assert all(leads.count(i) == len(rows) // n for i in range(n))
    # every ordered pair is adjacent equally often: once (even n) or twice (odd n)
    pairs = _adjacent(rows)
    want = 1 if n % 2 == 0 else 2
    assert set(pairs) == {(a, b) for a in range(n) for b in range(n) if a != b}
    assert set(pairs.values()) == {want}


def test_round_orders_vary_leaders_and_neighbours():
    names = ["warpgauge", "torch", "compile", "compile_max", "compile_nocg", "liger"]
    orders = timing.round_orders(names, 6, seed=11)
    assert all(sorted(o) == sorted(names) for o in orders)
    assert len({o[0] for o in orders}) == 6  # six rounds: six different leaders
    # nobody is always behind the same neighbour (a cyclic shift keeps every neighbour fixed)
    for name in names:
        behind = {o[o.index(name) - 1] for o in orders if o.index(name) > 0}
        assert len(behind) > 1, name
    # round 0's leader depends on the case's seed, not on the declaration order
    firsts = {timing.round_orders(names, 1, seed=s)[0][0] for s in range(40)}
    assert len(firsts) >= 4
    assert timing.round_orders(names, 4, seed=3) == timing.round_orders(names, 4, seed=3)
    assert timing.round_orders([], 3, seed=1) == []


def test_spread():
    assert timing.spread(10, 3) == [4, 3, 3]
    assert timing.spread(2, 3) == [1, 1, 0]
    assert sum(timing.spread(401, 7)) == 401


def _fake_fn(clock, log, name, cost_us):
    def fn():
        log.append(name)
        clock.advance(cost_us * 1e-6)

    return fn


RULE = timing.StopRule(min_samples=6, max_samples=40, max_rse=0.01, min_rounds=3, max_rounds=8,
                       cap_s=1.0, batch_s=20e-6, host_samples=3)  # fmt: skip


def test_rounds_interleave_and_stop_on_noise():
    clock = FakeClock()
    backend = FakeBackend(clock)
    calls: list[str] = []
    timed = [
        timing.Timed(n, _fake_fn(clock, calls, n, c), None, 1, est_us=c)
        for n, c in (("a", 1.0), ("b", 2.0), ("c", 3.0))
    ]
    rounds = timing.sample_rounds(backend, timed, "cold", RULE, seed=5, clock=clock)
    # constant costs: zero noise, so each stops after the minimum rounds and samples
    assert len(rounds) == 3
    for t, cost in zip(timed, (1.0, 2.0, 3.0)):
        assert t.stopped == "noise" and t.noise == 0.0
        assert len(t.device_samples) >= RULE.min_samples and len(t.host_samples) == 3
        assert all(x == pytest.approx(cost) for x in t.device_samples + t.host_samples)
        assert [b["round"] for b in t.batches] == [0, 1, 2]  # spread over the rounds
    # calls happen in blocks in each round's order
    blocks = []
    for name in calls:
        if not blocks or blocks[-1] != name:
            blocks.append(name)
    assert blocks == [n for r in rounds for n in r["order"]]


def test_noisy_provider_samples_until_max_samples():
    clock = FakeClock()
    backend = FakeBackend(clock)
    costs = iter([1.0, 3.0] * 1000)  # 100 % spread: the median never gets within 1 %

    def noisy():
        clock.advance(next(costs) * 1e-6)

    quiet = timing.Timed("quiet", lambda: clock.advance(2e-6), None, 1, est_us=2.0)
    loud = timing.Timed("loud", noisy, None, 1, est_us=2.0)
    timing.sample_rounds(backend, [quiet, loud], "warm", RULE, seed=1, clock=clock)
    assert quiet.stopped == "noise" and len(quiet.device_samples) < RULE.max_samples
    assert loud.stopped in ("max_samples", "max_rounds")
    assert len(loud.device_samples) > len(quiet.device_samples)
    assert loud.noise is not None and loud.noise > RULE.max_rse


def test_time_cap_stops_a_slow_provider():
    clock = FakeClock()
    backend = FakeBackend(clock)
    costs = iter([1000.0, 3000.0] * 1000)
    slow = timing.Timed("slow", lambda: clock.advance(next(costs) * 1e-6), None, 1, est_us=2000)
    rule = timing.StopRule(min_samples=4, max_samples=400, max_rse=0.01, min_rounds=2,
                           max_rounds=50, cap_s=0.05, batch_s=1e-3, host_samples=0)  # fmt: skip
    timing.sample_rounds(backend, [slow], "cold", rule, seed=1, clock=clock)
    assert slow.stopped == "time_cap"
    assert 0.05 <= slow.spent_s < 0.05 + 0.02  # one batch past the cap at most


class _Reader:
    """Fake NVML: SM clock per reading from a list (then the last value)."""

    def __init__(self, clock, mhz):
        self.clock, self.mhz = clock, list(mhz)

    def read(self):
        from warpgauge.bench.clocks import Reading

        m = self.mhz.pop(0) if len(self.mhz) > 1 else self.mhz[0]
        return Reading(self.clock.now(), m, 1980, 400.0, ("sw_power_cap",) if m < 1500 else ())


def test_throttled_batches_are_flagged_and_remeasured():
    clock = FakeClock()
    backend = FakeBackend(clock)
    t = timing.Timed("k", lambda: clock.advance(2e-6), None, 1, est_us=2.0)
    # readings: before round 0, after batch 0 (throttled: 1000 MHz < 75 % of 1980), then fine
    reader = _Reader(clock, [1980, 1000, 1980])
    rule = dataclasses.replace(RULE, batch_s=1e-9)  # batches of min_samples / min_rounds = 2
    rounds = timing.sample_rounds(backend, [t], "cold", rule, seed=1, clock=clock, reader=reader)
    assert t.batches[0]["throttled"] is True and t.batches[0]["sm_mhz"] == 1000
    assert all(b["throttled"] is False for b in t.batches[1:])
    first = t.batches[0]["n"]
    assert t.n_throttled == first
    # the throttled batch does not count: a fourth round replaces it
    assert len(rounds) == 4 and len(t.kept(RULE.min_samples)) == len(t.device_samples) - first
    assert rounds[0]["clock"]["sm_mhz"] == 1980


def test_without_nvml_samples_are_not_flagged():
    clock = FakeClock()
    t = timing.Timed("k", lambda: clock.advance(2e-6), None, 1, est_us=2.0)
    timing.sample_rounds(FakeBackend(clock), [t], "cold", RULE, seed=1, clock=clock)
    assert set(t.device_flags) == {None} and t.n_throttled == 0


def test_graph_replay_divides_by_calls_and_warm_lane_primes():
    clock = FakeClock()
    backend = FakeBackend(clock)
    calls: list[str] = []
    fn = _fake_fn(clock, calls, "k", 2.0)
    graph = backend.capture(fn, 4)
    calls.clear()
    t = timing.Timed("k", fn, graph, 4, est_us=2.0)
    rule = timing.StopRule(min_samples=3, max_samples=3, min_rounds=1, max_rounds=1,
                           host_samples=0)  # fmt: skip
    timing.sample_rounds(backend, [t], "warm", rule, seed=0, clock=clock)
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

    good = timing.Timed("good", lambda: clock.advance(1e-6), None, 1, est_us=1.0)
    bad = timing.Timed("bad", flaky, None, 1, est_us=1.0)
    timing.sample_rounds(backend, [good, bad], "cold", RULE, seed=0, clock=clock)
    assert len(good.device_samples) >= RULE.min_samples
    assert bad.error and "boom" in bad.error and bad.device_samples == []
    assert isinstance(bad.exception, RuntimeError)


def test_calls_per_graph_from_device_time():
    s = Sampling(graph_target_us=100.0, max_calls_per_graph=8)
    assert timing.calls_per_graph(10.0, "cold", s) == 1
    assert timing.calls_per_graph(10.0, "warm", s) == 8  # ceil(100/10)=10, capped at 8
    assert timing.calls_per_graph(30.0, "warm", s) == 4
    assert timing.calls_per_graph(1000.0, "warm", s) == 1


def test_replay_device_time_keeps_the_host_ahead():
    clock = FakeClock()
    backend = FakeBackend(clock, flush_s=7e-6)
    graph = backend.capture(lambda: clock.advance(3e-6), 1)
    backend.log.clear()
    assert timing.replay_device_us(backend, graph) == pytest.approx(3.0)
    # an untimed replay first (a fresh graph's slow first launch), then two flushes keep the
    # device busy before the first start event
    assert backend.log[:4] == ["sync", "sync", "flush", "flush"]


def test_replay_device_time_is_the_shortest_interval():
    """A host gap lengthens one interval (and, in the median of five, could have set the warm
    graph's size from 3 of them): the sizing takes the shortest replay."""
    clock = FakeClock()
    backend = FakeBackend(clock)
    n = {"replays": 0}

    def call():
        n["replays"] += 1
        # the first three timed replays (after the untimed one) wait 15 us for the host
        clock.advance(3e-6 + (15e-6 if n["replays"] in (3, 4, 5) else 0.0))

    graph = backend.capture(call, 1)
    n["replays"] = 1  # capture's warm-up and captured call
    assert timing.replay_device_us(backend, graph) == pytest.approx(3.0)
    assert n["replays"] == 1 + 1 + 5


def test_batch_size_spreads_samples_over_rounds():
    t = timing.Timed("k", lambda: None, None, 1, est_us=1.0)
    rule = timing.StopRule(min_samples=10, max_samples=400, min_rounds=4, batch_s=1.0)
    assert rule.batch_size(t, 1.0) == 100  # time says 1e6; at most a 4th of max_samples
    assert rule.batch_size(t, 1e6) == 3  # long calls: enough for min_samples in 4 rounds
    t.device_samples = [1.0] * 399
    assert rule.batch_size(t, 1.0) == 1


# ------------------------------------------------------------------------------------ warm-up


class _Ready:
    """Fake NVML whose clocks come up after ``after`` readings; capped while ``capped`` > 0."""

    def __init__(self, clock, after=3, capped=0):
        self.clock, self.after, self.capped, self.n = clock, after, capped, 0

    def read(self):
        from warpgauge.bench.clocks import Reading

        self.n += 1
        up = self.n > self.after
        reasons = ()
        if self.capped > 0:
            self.capped -= 1
            reasons = ("sw_power_cap",)
        return Reading(self.clock.now(), 1980 if up else 1100, 1980, 300.0, reasons)


def _warmup(clock, reader, **kw):
    from warpgauge.bench.clocks import ClockWarmup

    loads = []

    def load(ms):
        loads.append(ms)
        clock.advance(ms / 1000.0)

    kw.setdefault("max_ms", 300.0)
    w = ClockWarmup(clock, load, reader, wait=lambda ms: clock.advance(ms / 1000.0), **kw)
    return w, loads


def test_warmup_runs_until_clocks_are_up_and_uncapped():
    clock = FakeClock()
    w, loads = _warmup(clock, _Ready(clock, after=5))
    rec = w.before_case()
    # readings 1-5 low (a 10 ms piece after each), 6 good (one more piece: two in a row are
    # needed), 7 good: done after 6 pieces
    assert rec["skipped"] is False and rec["pieces"] == 6 and len(loads) == 6
    assert rec["burst_ms"] == pytest.approx(60.0)
    assert rec["ready"] is True and rec["clocks"]["sm_mhz"] == 1980


def test_warmup_is_bounded_and_says_when_clocks_never_come_up():
    clock = FakeClock()
    w, loads = _warmup(clock, _Ready(clock, after=10**6), max_ms=100.0)
    rec = w.before_case()
    assert rec["burst_ms"] == pytest.approx(100.0) and rec["ready"] is False


def test_warmup_waits_for_a_power_cap_to_clear():
    clock = FakeClock()
    # clocks up but power-capped for 6 readings: it waits idle 20 ms after each (120 ms), then
    # loads its 30 ms minimum (readings 7-9 good) and stops at reading 10
    reader = _Ready(clock, after=0, capped=6)
    w, loads = _warmup(clock, reader, max_ms=300.0)
    rec = w.before_case()
    assert rec["settle_ms"] == pytest.approx(120.0) and len(loads) == 3
    assert rec["ready"] is True and rec["clocks"]["reasons"] == []
    # recently busy and capped (after a GEMM case): no load needed, but it waits for the cap
    reader.capped = 2
    rec = w.before_case()
    assert rec["skipped"] is True and rec["settle_ms"] == pytest.approx(40.0)
    assert rec["burst_ms"] == 0.0 and rec["ready"] is True
    # a cap that never clears: bounded by settle_ms, recorded as not ready
    clock.advance(1.0)
    reader.capped = 10**6
    rec = w.before_case()
    assert rec["settle_ms"] == pytest.approx(200.0) and rec["ready"] is False


def test_warmup_skip_rule_and_without_nvml():
    from warpgauge.bench.clocks import NoClocks

    clock = FakeClock()
    w, loads = _warmup(clock, NoClocks(), skip_ms=250.0)
    first = w.before_case()
    # no NVML: the fixed minimum (30 ms) of load, clocks unknown
    assert first["skipped"] is False and first["burst_ms"] == pytest.approx(30.0)
    assert first["ready"] is None and first["clocks"] is None
    clock.advance(0.1)
    second = w.before_case()
    assert second["skipped"] is True and second["last_burst_ended_ms_ago"] == pytest.approx(100.0)
    clock.advance(0.3)
    assert w.before_case()["skipped"] is False


def test_throttle_rule():
    from warpgauge.bench.clocks import Reading, ready, throttled

    assert throttled(Reading(0, 1480, 1980, None, ())) is True  # 74.7 %
    assert throttled(Reading(0, 1485, 1980, None, ())) is False  # 75 %
    assert throttled(None) is None and throttled(Reading(0, None, 1980, None, ())) is None
    assert ready(Reading(0, 1980, 1980, None, ("gpu_idle",))) is True
    assert ready(Reading(0, 1980, 1980, None, ("sw_power_cap",))) is False
    assert ready(Reading(0, 1700, 1980, None, ())) is False  # below 90 %


def test_estimate_and_flush_measurement():
    clock = FakeClock()
    backend = FakeBackend(clock, flush_s=7e-6)
    assert timing.measure_flush_us(backend) == pytest.approx(7.0)
    assert timing.estimate_us(backend, lambda: clock.advance(3e-6)) == pytest.approx(3.0)


def test_median_rse_by_hand():
    # n = 10: j = floor((10 - 1.96 * 3.162) / 2) = 1, k = ceil((10 + 6.198) / 2) = 9
    xs = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0, 19.0]
    assert stats.median_ci(xs) == (10.0, 18.0)
    assert stats.median_rse(xs) == pytest.approx((18.0 - 10.0) / (2 * 1.959963984540054) / 14.5)
    assert stats.median_rse([5.0] * 20) == 0.0
    assert stats.median_rse([5.0]) is None and stats.median_ci([]) is None
    # n = 100: j = floor((100 - 19.6) / 2) = 40, k = ceil(59.8) = 60
    ys = list(range(1, 101))
    assert stats.median_ci([float(y) for y in ys]) == (40.0, 60.0)
