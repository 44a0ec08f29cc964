"""The runner end to end on the CPU: fake device, fake clock, fake providers, real artifacts."""

from __future__ import annotations

import json

import pytest
import torch

from warpgauge import artifacts
from warpgauge.bench.runner import Runner, run_bench

from .test_bench_fakes import (
    Counter,
    FakeBackend,
    FakeClock,
    fake_add_spec,
    fake_services,
    fake_suite,
)


def _case(run_dir, case_id):
    return json.loads((run_dir / "cases" / artifacts.case_filename(case_id)).read_text())


def _prov(case, name):
    return next(p for p in case["providers"] if p["name"] == name)


@pytest.fixture
def complete_run(tmp_path):
    clock, counter = FakeClock(), Counter()
    sv = fake_services(clock, fake_add_spec(clock, counter))
    suite = fake_suite()
    outcome = run_bench(suite, sv, ["warpgauge", "bench", "--test"], out_root=tmp_path)
    return outcome, sv, counter, suite


def test_complete_run_is_valid(complete_run):
    outcome, sv, counter, suite = complete_run
    assert outcome.exit_code == 0 and outcome.status == "complete"
    assert outcome.missing == [] and outcome.finished == suite.case_ids()
    assert artifacts.validate_run(outcome.run_dir) == []
    run = json.loads((outcome.run_dir / "run.json").read_text())
    assert run["status"] == "complete" and run["config"]["name"] == "fake"


def test_statuses_and_statistics(complete_run):
    outcome, sv, counter, suite = complete_run
    case = _case(outcome.run_dir, "add/float32/1024/cold")
    status = {p["name"]: p["status"] for p in case["providers"]}
    assert status == {
        "warpgauge": "ok", "torch": "ok", "compile": "ok", "peer": "ok",
        "wrong": "failed_gate", "partial": "failed_gate", "raises": "error", "absent": "absent",
    }  # fmt: skip
    wg = _prov(case, "warpgauge")
    # fake costs: warpgauge 10 us per call; graph replay divides by calls per replay
    assert wg["device_time"]["median_us"] == pytest.approx(10.0)
    assert wg["extra"]["device_method"] == "graph"
    assert wg["host_time"]["median_us"] == pytest.approx(10.0)
    # best PyTorch = compile (15 us) < torch (20 us); speedup = 15 / 10
    assert wg["derived"]["speedup_vs_best_pytorch"] == pytest.approx(1.5)
    assert wg["derived"]["tbps"] == pytest.approx(3 * 1024 * 4 / 10.0 / 1e6)
    peer = _prov(case, "peer")
    assert peer["extra"]["device_method"] == "events"
    assert peer["device_time"]["median_us"] == pytest.approx(40.0)
    assert _prov(case, "absent")["error"] == "fake_pkg is not installed"
    assert "fake kernel launch failure" in _prov(case, "raises")["error"]
    assert case["order"] == ["warpgauge", "torch", "compile", "peer"]
    rounds = [r["order"] for r in case["extra"]["rounds"]]
    assert len(rounds) == 3 and all(sorted(o) == sorted(case["order"]) for o in rounds)
    assert len({o[0] for o in rounds}) == 3  # a different provider leads each round


def test_wrong_result_is_never_timed(complete_run):
    outcome, sv, counter, suite = complete_run
    # one gate call per group, never again: no warm-up, no capture, no sample
    assert counter.calls["wrong"] == len(suite.groups)
    assert counter.calls["partial"] == len(suite.groups)
    for cid in suite.case_ids():
        wrong = _prov(_case(outcome.run_dir, cid), "wrong")
        assert wrong["device_time"] is None and wrong["host_time"] is None
        assert wrong["gate"]["ok"] is False and wrong["gate"]["n_bad"] > 0


def test_unwritten_output_fails_through_poison(complete_run):
    outcome, sv, counter, suite = complete_run
    partial = _prov(_case(outcome.run_dir, "add/float32/4096/warm"), "partial")
    assert partial["status"] == "failed_gate"
    assert partial["gate"]["n_nan"] == 2048  # the unwritten half holds the poison
    assert partial["device_time"] is None


def test_flush_never_inside_a_timed_interval(tmp_path):
    clock, counter = FakeClock(), Counter()
    backend = FakeBackend(clock)
    sv = fake_services(clock, fake_add_spec(clock, counter), backend)
    run_bench(fake_suite(numels=(1024,), lanes=("cold",)), sv, ["x"], out_root=tmp_path)
    inside = False
    flushes = 0
    # measure_flush_us times the flush itself (on purpose) before any provider is captured
    first_capture = next(
        i for i, e in enumerate(backend.log) if isinstance(e, tuple) and e[0] == "capture"
    )
    for entry in backend.log[first_capture:]:
        if entry == "record":
            inside = not inside
        elif entry == "flush":
            flushes += 1
            assert not inside, "an L2 flush was enqueued between a start and an end event"
        elif entry == "sync":
            pass
    assert flushes > 0 and not inside


def test_warmup_recorded_per_case(complete_run):
    outcome, sv, counter, suite = complete_run
    warmups = [_case(outcome.run_dir, c)["warmup"] for c in suite.case_ids()]
    # the ceilings count as a burst; every case then takes longer than 250 fake ms? no: the fake
    # cases are short, so bursts alternate with skips; both kinds are recorded faithfully
    assert all(
        {"burst_ms", "skipped", "last_burst_ended_ms_ago", "ready"} <= set(w) for w in warmups
    )
    assert any(w["skipped"] for w in warmups)
    for w in warmups:
        if w["skipped"]:
            assert w["last_burst_ended_ms_ago"] < 250.0 and w["burst_ms"] == 0.0
        else:
            # no NVML in the fakes: the fixed minimum of the light load, clocks unknown
            assert w["burst_ms"] == pytest.approx(30.0) and w["ready"] is None


def _calls_per_group(tmp_path) -> int:
    clock, counter = FakeClock(), Counter()
    run_bench(fake_suite(numels=(1024,)), fake_services(clock, fake_add_spec(clock, counter)),
              ["x"], out_root=tmp_path / "count")  # fmt: skip
    return sum(counter.calls.values())


def test_interrupt_then_resume(tmp_path):
    clock, counter = FakeClock(), Counter()
    suite = fake_suite(numels=(1024, 2048, 4096))
    # Ctrl-C arrives in the middle of the second group
    spec = fake_add_spec(clock, counter, interrupt_after=int(1.5 * _calls_per_group(tmp_path)))
    sv = fake_services(clock, spec)
    first = run_bench(suite, sv, ["warpgauge", "bench"], out_root=tmp_path)
    assert first.exit_code == 130 and first.status == "interrupted"
    assert first.finished and first.missing
    assert set(first.finished) | set(first.missing) == set(suite.case_ids())
    run = json.loads((first.run_dir / "run.json").read_text())
    assert run["status"] == "interrupted" and run["missing_cases"] == first.missing
    problems = artifacts.validate_run(first.run_dir)
    assert any("coverage" in p for p in problems) and any("status" in p for p in problems)
    # everything that finished is intact: only coverage and status are reported
    assert all(("coverage" in p) or ("status is" in p) for p in problems)
    # every finished case is a valid artifact on its own
    for cid in first.finished:
        assert _case(first.run_dir, cid)["case_id"] == cid

    clock2, counter2 = FakeClock(), Counter()
    sv2 = fake_services(clock2, fake_add_spec(clock2, counter2))
    second = Runner(suite, sv2, ["warpgauge", "bench", "--resume", str(first.run_dir)]).run(
        resume=first.run_dir
    )
    assert second.exit_code == 0 and second.status == "complete"
    assert artifacts.validate_run(first.run_dir) == []
    # the resumed session measured only what was missing
    assert sv2.ui.done == first.missing
    run = json.loads((first.run_dir / "run.json").read_text())
    assert len(run["extra"]["resumes"]) == 1 and len(run["extra"]["sessions"]) == 2


def test_time_budget_stops_starting_cases(tmp_path):
    clock, counter = FakeClock(), Counter()
    # each case takes ~0.03 s of fake warm-up time; 0.05 fake seconds of budget
    suite = fake_suite(numels=(1024, 2048, 4096), max_minutes=0.05 / 60, burst_skip_ms=0.0)
    sv = fake_services(clock, fake_add_spec(clock, counter))
    out = run_bench(suite, sv, ["x"], out_root=tmp_path)
    assert out.exit_code == 3 and out.status == "interrupted"
    assert "time budget" in out.reason
    assert 0 < len(out.finished) < len(suite.case_ids())
    assert any("--resume" in line for line in sv.ui.lines)


def test_resume_of_complete_run_does_nothing(complete_run):
    outcome, sv, counter, suite = complete_run
    clock2 = FakeClock()
    sv2 = fake_services(clock2, fake_add_spec(clock2, Counter()))
    again = Runner(suite, sv2, ["x"]).run(resume=outcome.run_dir)
    assert again.exit_code == 0 and again.status == "complete" and sv2.ui.done == []


def test_rich_ui_renders_a_run(tmp_path):
    import io

    from rich.console import Console

    from warpgauge.bench.ui import RichUI

    buf = io.StringIO()
    clock, counter = FakeClock(), Counter()
    sv = fake_services(clock, fake_add_spec(clock, counter))
    sv.ui = RichUI(Console(file=buf, width=140, highlight=False))
    out = run_bench(fake_suite(numels=(1024,)), sv, ["x"], out_root=tmp_path)
    text = buf.getvalue()
    assert out.exit_code == 0
    assert "[1/2" in text and "add/float32/1024/cold" in text  # per-case lines in a log
    assert "best PyTorch" in text and "1.50x" in text  # the summary table
    assert "add: 2 case(s)" in text


class _SignalDuringWrite:
    """The real artifact module, except that the first write_case sends SIGTERM to this process
    halfway through (after the case file is written, before the manifest is updated)."""

    def __init__(self):
        self.sent = False

    def __getattr__(self, name):
        return getattr(artifacts, name)

    def write_case(self, run_dir, record):
        import os
        import signal as sig

        from warpgauge.artifacts import CASES_DIR, atomic_write_json, case_filename, update_manifest

        rel = f"{CASES_DIR}/{case_filename(record['case_id'])}"
        atomic_write_json(run_dir / rel, json.loads(artifacts.dumps(record)))
        if not self.sent:
            self.sent = True
            os.kill(os.getpid(), sig.SIGTERM)  # arrives inside the critical section
        update_manifest(run_dir, [rel], record["run_id"])


def test_sigterm_during_a_write_is_held_until_the_write_completes(tmp_path):
    clock, counter = FakeClock(), Counter()
    sv = fake_services(clock, fake_add_spec(clock, counter))
    sv.artifacts = _SignalDuringWrite()
    out = run_bench(fake_suite(numels=(1024, 2048)), sv, ["x"], out_root=tmp_path)
    assert out.exit_code == 130 and "SIGTERM" in out.reason
    assert out.finished == ["add/float32/1024/cold"]
    problems = artifacts.validate_run(out.run_dir)
    assert all(("coverage" in p) or ("status is" in p) for p in problems), problems


def test_resume_repairs_a_kill_mid_write(tmp_path):
    clock, counter = FakeClock(), Counter()
    suite = fake_suite(numels=(1024, 2048))
    n = int(1.5 * _calls_per_group(tmp_path))
    sv = fake_services(clock, fake_add_spec(clock, counter, interrupt_after=n))
    first = run_bench(suite, sv, ["x"], out_root=tmp_path)
    assert first.status == "interrupted" and first.missing and len(first.finished) >= 2
    # simulate a SIGKILL: one case file written but never listed, one temp file left behind
    victim = f"cases/{artifacts.case_filename(first.finished[-1])}"
    artifacts.update_manifest(first.run_dir, remove=[victim])
    (first.run_dir / "cases" / ".half-written.json.tmp").write_text("{")
    assert any("not listed" in p for p in artifacts.validate_run(first.run_dir))

    clock2 = FakeClock()
    sv2 = fake_services(clock2, fake_add_spec(clock2, Counter()))
    second = Runner(suite, sv2, ["x"]).run(resume=first.run_dir)
    assert second.status == "complete" and artifacts.validate_run(first.run_dir) == []
    assert sv2.ui.done == first.missing  # the unlisted case was kept, not measured again
    assert any("listed" in line for line in sv2.ui.lines)
    assert any("temp file" in line for line in sv2.ui.lines)


def test_warm_graph_size_comes_from_device_time(tmp_path):
    """Finding 1: an eager, back-to-back estimate measures the host for short kernels (46.8 us
    against 2.43 us of device time for add at 257 elements), so graphs got too few calls. Two
    providers with the same device time and different host costs now get the same calls."""
    import dataclasses

    from warpgauge.bench.providers import Built, Provider

    clock, counter = FakeClock(), Counter()
    backend = FakeBackend(clock)

    def short(host_us, device_us):
        def build(inp, ctx):
            x, y = inp["x"], inp["y"]
            out = torch.empty_like(x)

            def fn():
                clock.advance((device_us if backend.replaying else host_us) * 1e-6)
                return torch.add(x, y, out=out)

            return Built(fn, out_buffers=(out,))

        return build

    spec = fake_add_spec(clock, counter)
    spec = dataclasses.replace(spec, providers=(
        Provider("warpgauge", "host-bound eager", "warpgauge", short(46.8, 2.43)),
        Provider("torch", "cheap eager", "pytorch", short(5.0, 2.43), baseline=True),
    ))  # fmt: skip
    sv = fake_services(clock, spec, backend)
    suite = fake_suite(numels=(257,), graph_target_us=40.0, max_calls_per_graph=50)
    out = run_bench(suite, sv, ["x"], out_root=tmp_path)
    warm = _case(out.run_dir, "add/float32/257/warm")
    for name in ("warpgauge", "torch"):
        p = _prov(warm, name)
        assert p["extra"]["replay_us"] == pytest.approx(2.43)
        assert p["extra"]["calls_per_replay"] == 17  # ceil(40 / 2.43), not ceil(40 / 46.8) = 1
        assert p["device_time"]["median_us"] == pytest.approx(2.43)
    cold = _case(out.run_dir, "add/float32/257/cold")
    assert all(p["extra"]["calls_per_replay"] == 1 for p in cold["providers"])


def test_cudagraph_tree_lane_is_marked_excluded_from_best(tmp_path):
    """Finding 5: the max-autotune lane (Inductor's CUDA graph trees, timed per call) pays an
    input copy per call that the same code without graphs does not; its record says so, unless
    its provider marked the inputs static (``Built.notes["static_inputs"]``)."""
    import dataclasses

    from warpgauge.bench.providers import Built

    clock, counter = FakeClock(), Counter()
    spec = fake_add_spec(clock, counter)
    torch_p = next(p for p in spec.providers if p.name == "torch")

    def static_build(inp, ctx):
        b = torch_p.build(inp, ctx)
        return Built(b.fn, b.out_buffers, {"static_inputs": True})

    extra = (
        dataclasses.replace(torch_p, name="cma", family="compile", baseline=False,
                            compile_mode="max-autotune", graph_safe=False),
        dataclasses.replace(torch_p, name="cma_static", family="compile", baseline=False,
                            compile_mode="max-autotune", graph_safe=False, build=static_build),
    )  # fmt: skip
    spec = dataclasses.replace(spec, providers=spec.providers + extra)
    out = run_bench(fake_suite(numels=(1024,)), fake_services(clock, spec), ["x"],
                    out_root=tmp_path)  # fmt: skip
    case = _case(out.run_dir, "add/float32/1024/cold")
    assert "CUDA graph trees" in _prov(case, "cma")["extra"]["excluded_from_best"]
    assert "excluded_from_best" not in _prov(case, "cma_static")["extra"]
    assert "excluded_from_best" not in _prov(case, "compile")["extra"]


def test_round_zero_leader_varies_across_cases(tmp_path):
    """Finding 3: the base order put warpgauge first in round 0 of every case."""
    clock, counter = FakeClock(), Counter()
    sv = fake_services(clock, fake_add_spec(clock, counter))
    out = run_bench(fake_suite(numels=(256, 512, 1024, 2048, 4096)), sv, ["x"], out_root=tmp_path)
    leaders, behind_wg = set(), set()
    for cid in out.finished:
        rounds = [r["order"] for r in _case(out.run_dir, cid)["extra"]["rounds"]]
        leaders.add(rounds[0][0])
        behind_wg |= {o[o.index("warpgauge") - 1] for o in rounds if o.index("warpgauge") > 0}
    assert len(leaders) >= 3 and len(behind_wg) >= 2


def test_a_failing_ceiling_measurement_does_not_stop_the_run(tmp_path):
    clock, counter = FakeClock(), Counter()
    sv = fake_services(clock, fake_add_spec(clock, counter))

    def broken(backend, suite):
        raise RuntimeError("fake cuBLAS failure")

    sv.measure_ceilings = broken
    out = run_bench(fake_suite(numels=(1024,)), sv, ["x"], out_root=tmp_path)
    assert out.exit_code == 0 and out.status == "complete"
    run = json.loads((out.run_dir / "run.json").read_text())
    assert "fake cuBLAS failure" in run["extra"]["ceilings_error"]
    wg = _prov(_case(out.run_dir, "add/float32/1024/cold"), "warpgauge")
    assert wg["status"] == "ok" and wg["derived"]["pct_copy_ceiling"] is None
    assert artifacts.validate_run(out.run_dir) == []
