"""Every bench mode through the real runner on the CPU: fake device and clock, the real operator
registry (torch providers, warpgauge under the Triton interpreter), real gates, real artifacts."""

from __future__ import annotations

import dataclasses
import gc
import json

import pytest
import torch

from warpgauge import artifacts
from warpgauge.bench import modes
from warpgauge.bench.modes import fwd_bwd, plans
from warpgauge.bench.modes.host import HostSampler
from warpgauge.bench.operators import Built, Provider, operator
from warpgauge.bench.runner import run_bench
from warpgauge.bench.suite import SuiteError, parse_suite
from warpgauge.bench.timing import Timed

from .test_bench_fakes import FakeBackend, FakeClock, fake_services


class TickingBackend(FakeBackend):
    """Every event record advances the fake clock by 1 us, so every interval is > 0."""

    def record(self, ev):
        self.clock.advance(1e-6)
        super().record(ev)


class TickingClock(FakeClock):
    """Reading the clock takes 0.1 fake us (host loops of calls that cost nothing are > 0)."""

    def now(self):
        self.t += 1e-7
        return self.t


def _suite(mode: str, body: str, **sampling):
    s = parse_suite(f'mode = "{mode}"\nlanes = ["warm"]\ndtypes = ["float32"]\n'
                    f"[compile]\nmodes = []\n{body}")  # fmt: skip
    base = dict(rounds=2, target_ms=0.2, min_samples=2, max_samples=3, max_host_samples=2,
                host_calls=4, burst_ms=0.0, warmup_calls=1, max_calls_per_graph=2)  # fmt: skip
    base.update(sampling)
    return dataclasses.replace(s, sampling=dataclasses.replace(s.sampling, **base))


def _run(tmp_path, suite, sm_count=4):
    clock = TickingClock()
    sv = fake_services(clock, None, TickingBackend(clock))
    sv.ops = modes.specs_for(suite, sm_count=sm_count)
    sv.sampler = modes.sampler_for(suite, clock)
    out = run_bench(suite, sv, ["warpgauge", "bench", "--mode", suite.mode], out_root=tmp_path)
    assert artifacts.validate_run(out.run_dir) == []
    run = json.loads((out.run_dir / "run.json").read_text())
    assert run["config"]["mode"] == suite.mode
    return out, {c["case_id"]: c for c in artifacts.load_run(out.run_dir).cases}


def _prov(case, name):
    return next(p for p in case["providers"] if p["name"] == name)


# ------------------------------------------------------------------------------------ fwd_bwd


def test_fwd_bwd_gates_gradients_and_times_the_step(tmp_path):
    s = _suite("fwd_bwd", '[ops.softmax]\nshapes = ["3x300"]\n[ops.gemm]\nshapes = ["9x10x11,at"]\n'
               '[ops.add_rms_norm]\nshapes = ["3x300"]\n')  # fmt: skip
    s = s.with_overrides(only=["torch", "torch_native", "cublas", "torch_rms_norm"])
    out, cases = _run(tmp_path, s)
    assert out.exit_code == 0
    for cid in ("softmax/float32/3x300/warm", "gemm/float32/9x10x11,at/warm",
                "add_rms_norm/float32/3x300/warm"):  # fmt: skip
        for p in cases[cid]["providers"]:
            assert p["status"] == "ok", (cid, p["name"], p["error"])
            assert p["gate"]["ok"] and p["extra"]["step"].startswith("autograd.grad")
    gemm = cases["gemm/float32/9x10x11,at/warm"]
    assert gemm["work"]["flops"] == 6 * 9 * 10 * 11  # forward + both backward products


def test_fwd_bwd_pass_through_gradients_never_alias_the_inputs(tmp_path):
    s = _suite("fwd_bwd", '[ops.add]\nshapes = ["100"]\n[ops.row_sum]\nshapes = ["3x50"]\n')
    out, cases = _run(tmp_path, s.with_overrides(skip=["warpgauge"]))
    for cid in ("add/float32/100/warm", "row_sum/float32/3x50/warm"):
        for p in cases[cid]["providers"]:
            assert p["status"] == "ok", (cid, p["name"], p["error"])


def test_fwd_bwd_catches_a_wrong_gradient():
    """A provider whose forward is right but whose backward is not fails the gradient gate."""
    spec = fwd_bwd.train_spec(operator("softmax"), ())
    ctx = modes_ctx("softmax", {"rows": 3, "width": 50})
    inputs = spec.make_inputs(ctx, torch.Generator().manual_seed(0))
    refs = spec.references["default"](inputs, ctx)

    class WrongBackward(torch.autograd.Function):
        @staticmethod
        def forward(c, x):
            return torch.softmax(x, -1)

        @staticmethod
        def backward(c, g):
            return g  # the identity: not softmax's Jacobian

    from warpgauge.bench import gates

    good = spec.provider("torch").build(inputs, ctx).fn()
    assert gates.compare_outputs(good, refs).ok
    bad_p = Provider("bad", "bad", "peer", lambda i, c: Built(lambda: WrongBackward.apply(i["x"])))
    bad = fwd_bwd.train_provider(operator("softmax"), bad_p).build(inputs, ctx).fn()
    assert not gates.compare_outputs(bad, refs).ok


def test_fwd_bwd_providers_without_a_backward_are_absent_with_a_reason():
    spec = fwd_bwd.train_spec(operator("int4_linear"), ())
    ctx = modes_ctx("int4_linear", {"M": 1, "N": 64, "K": 256, "group_size": 128})
    assert spec.provider("tinygemm").available(ctx) == "tinygemm has no backward"
    # out= providers train through their train= build; one without it is refused clearly
    p = Provider("outbuf", "writes out=", "pytorch",
                 lambda i, c: Built(lambda: None, out_buffers=(torch.empty(1),)))  # fmt: skip
    with pytest.raises(TypeError, match="out= buffers"):
        fwd_bwd.train_provider(operator("add"), p).build({"x": 0, "y": 0, "_grad_outputs": ()},
                                                         ctx)  # fmt: skip


def modes_ctx(op, shape, dtype="float32"):
    from warpgauge.bench.operators import context_for

    return context_for(op, dtype, shape, operator(op).settings, "cpu")


# ------------------------------------------------------------------------------------ host


class _Costly:
    def __init__(self, clock, cost_us, log, name):
        self.clock, self.cost, self.log, self.name = clock, cost_us, log, name

    def __call__(self):
        self.log.append(self.name)
        self.clock.advance(self.cost * 1e-6)


def test_host_sampler_times_back_to_back_calls_interleaved():
    clock, log = FakeClock(), []
    backend = TickingBackend(clock)
    timed = [Timed(n, _Costly(clock, c, log, n), None, 1, 1.0)
             for n, c in (("a", 3.0), ("b", 30.0), ("c", 7.0))]  # fmt: skip
    from warpgauge.bench.timing import StopRule

    sampler = HostSampler(clock, calls=5, rounds=6)
    assert gc.isenabled()
    sampler(backend, timed, "warm", StopRule(min_samples=2, max_samples=2, min_rounds=1))
    assert gc.isenabled()  # re-enabled after sampling
    for t, cost in zip(timed, (3.0, 30.0, 7.0)):
        assert len(t.host_samples) == 6
        assert t.host_samples == pytest.approx([cost] * 6)  # per call: the loop / calls
    # balanced order (a Williams square over 3 providers): every provider leads two of 6 rounds
    host_calls = log[-90:]
    leaders = [host_calls[i * 15] for i in range(6)]
    assert sorted(leaders) == ["a", "a", "b", "b", "c", "c"]


def test_host_mode_records_host_time_per_call(tmp_path):
    s = _suite("host", '[ops.add]\nshapes = ["1000"]\n[ops.row_sum]\nshapes = ["3x40"]\n',
               host_share=0.0)  # fmt: skip
    out, cases = _run(tmp_path, s.with_overrides(skip=["warpgauge"]))
    assert out.exit_code == 0 and json.loads((out.run_dir / "run.json").read_text())[
        "config"]["sampling"]["host_calls"] == 4  # fmt: skip
    p = _prov(cases["add/float32/1000/warm"], "torch")
    assert p["status"] == "ok" and p["host_time"]["n"] == 6  # 3 x rounds host loops
    g = _prov(cases["add/float32/1000/warm"], "torch_grad")  # the autograd path, beside it
    assert g["status"] == "ok" and g["extra"]["requires_grad"] == ["x", "y"]
    assert _prov(cases["row_sum/float32/3x40/warm"], "torch_native_grad")["status"] == "ok"
    assert "excluded_from_best" in g["extra"]
    from warpgauge.bench.modes import host_report

    text = host_report.markdown(out.run_dir)
    assert "| add/float32/1000/warm | torch_grad | ok |" in text


# ------------------------------------------------------------------------------------ accuracy


def test_accuracy_records_each_output_error_beside_pytorch(tmp_path):
    s = _suite("accuracy", '[ops.add_rms_norm]\nshapes = ["3x64"]\n')
    out, cases = _run(tmp_path, s)
    case = cases["add_rms_norm/float32/3x64/warm"]
    for name in ("warpgauge", "torch", "torch_rms_norm"):
        errs = _prov(case, name)["extra"]["errors"]
        assert [e["output"] for e in errs] == ["y", "h", "dx", "dr", "dw"]
        assert all(e["ok"] and e["worst_ratio"] is not None for e in errs), (name, errs)
    from warpgauge.bench.modes import accuracy_report

    text = accuracy_report.markdown(out.run_dir)
    assert "| add_rms_norm | dw |" in text and "comparisons" in text


# ------------------------------------------------------------------------------------ plans


def test_plans_specs_force_every_candidate_and_the_rule(tmp_path):
    s = _suite("plans", '[ops.softmax]\nshapes = ["3x8193", "64x300"]\n')
    specs = modes.specs_for(s, sm_count=4)
    names = [p.name for p in specs["softmax"].providers]
    assert names[0] == "rule" and specs["softmax"].providers[0].baseline
    wide, narrow = plans.candidates(3, 8193, 4, "softmax"), plans.candidates(64, 300, 4, "softmax")
    assert set(names[1:]) == set(wide) | set(narrow) and len(names) == len(set(names))
    assert {k.split("_")[0] for k in wide} == {"resident", "looped", "split", "coop"}  # all kinds
    only_wide = next(k for k in wide if k not in narrow)
    ctx = modes_ctx("softmax", {"rows": 64, "width": 300})
    assert "not a candidate" in specs["softmax"].provider(only_wide).available(ctx)
    # measured end to end on cells small enough for the interpreter
    small = _suite("plans", '[ops.softmax]\nshapes = ["2x1100", "2x300"]\n')
    out, cases = _run(tmp_path, small)
    case = cases["softmax/float32/2x1100/warm"]
    status = {p["name"]: p["status"] for p in case["providers"]}
    cands = plans.candidates(2, 1100, 4, "softmax")
    assert {k for k, v in status.items() if v == "ok"} == {"rule", *cands}, status
    assert {k for k, v in status.items() if v == "absent"} == set(status) - {"rule", *cands}
    rule = plans.rule_key(2, 1100, 4, "softmax")
    assert _prov(case, "rule")["extra"]["plan"] == rule and rule in cands
    assert all(_prov(case, k)["extra"]["plan"] == k for k in cands)
    from warpgauge.bench.modes import regret

    cells = regret.load_cells(out.run_dir)
    assert len(cells) == 2 and all(c.sm_count == 4 for c in cells)
    assert sorted({c.label: c for c in cells}["2x1100"].times) == sorted(cands)


def test_candidates_prefer_the_kernels_own_list(monkeypatch):
    from warpgauge.kernels.plans import RowPlan

    monkeypatch.setattr(RowPlan, "candidates", staticmethod(
        lambda rows, width, sm, op="": [RowPlan.looped(2048), RowPlan("looped", 2048, 8),
                                        RowPlan("split", 2048, 4, 3), RowPlan("split", 2048, 4, 5)]),
        raising=False)  # fmt: skip
    got = plans.candidates(8, 40000, 4, "softmax")
    assert list(got) == ["looped_2048", "looped_2048_w8", "split_2048", "split_2048_x2"]
    assert got["split_2048_x2"].split == 5


# ------------------------------------------------------------------------------------ selection


def test_only_and_skip_select_providers():
    s = _suite("fwd", '[ops.softmax]\nshapes = ["3x40"]\n[ops.add]\nshapes = ["8"]\n')
    specs = modes.specs_for(s.with_overrides(only=["warpgauge", "softmax.torch"]))
    assert [p.name for p in specs["softmax"].providers] == ["warpgauge", "torch"]
    assert [p.name for p in specs["add"].providers] == ["warpgauge"]
    skipped = modes.specs_for(s.with_overrides(skip=["torch_native", "add.torch"]))
    assert "torch_native" not in [p.name for p in skipped["softmax"].providers]
    assert [p.name for p in skipped["add"].providers] == ["warpgauge"]
    with pytest.raises(SuiteError, match="no provider named"):
        modes.specs_for(s.with_overrides(only=["cudnn"]))
    globbed = modes.specs_for(s.with_overrides(only=["warp*", "softmax.torch_*"]))
    assert [p.name for p in globbed["softmax"].providers] == ["warpgauge", "torch_native"]


def test_a_mode_without_the_operator_says_so():
    s = _suite("plans", '[ops.gemm]\nshapes = ["8^3"]\n')
    with pytest.raises(SuiteError, match="no plans form"):
        modes.specs_for(s, sm_count=4)


def test_outputs_that_require_grad_can_be_poisoned():
    """The host mode's _grad providers return autograd outputs; the gate after timing poisons
    them in place (a view made by autograd must not make that fail)."""
    from warpgauge.bench import gates

    leaf = torch.randn(4, requires_grad=True)
    view = leaf.view(2, 2)  # in-place on this raises unless detached first
    gates.poison([view])
    assert torch.isnan(leaf.detach()).all()
