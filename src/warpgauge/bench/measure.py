"""One group (operator, dtype, shape): inputs, references, per-provider preparation and gate, then
for each lane graph capture, clock warm-up, sampling in rounds, the checks after timing, and the
case record. The runner (``runner.py``) decides which groups run and writes what this returns.

Per provider (``prepare``): availability, FP64 reference, build (setup, never timed), gate (first
call, output poisoned), input check, warm-up calls, a per-call estimate. Per lane
(``measure_lane``): a one-call graph whose replay gives the device time that sizes the warm lane's
graph (``timing.calls_per_graph``), the clock warm-up (``clocks.ClockWarmup``), sampling
(``timing.sample_rounds``: seeded balanced order, NVML readings between batches, the noise
stopping rule, inputs checked after every batch), then ``integrity.regate`` and
``integrity.hidden_work`` on what was timed, and ``integrity.above_ceilings`` on the derived rates.
"""

from __future__ import annotations

import contextlib
import zlib
from dataclasses import dataclass, field
from typing import Any

from . import gates, integrity, stats, timing
from .errors import DeviceLost, ProviderTimeout, format_error, is_oom, time_limit
from .suite import Group

DERIVED_KEYS = ("tbps", "tflops", "speedup_vs_best_pytorch", "pct_copy_ceiling")
# torch.compile modes that replay Inductor's own CUDA graph trees (never captured into ours)
CUDAGRAPH_TREE_MODES = ("max-autotune", "reduce-overhead")
CUDAGRAPH_TREE_NOTE = (
    "timed per call between CUDA events: Inductor's CUDA graph trees replay their own graphs, "
    "which are not nested in ours, and on every call they copy each input that is not a "
    "parameter or marked static (torch._dynamo.mark_static_address) into the graph's static "
    "input buffers; the same compiled code without CUDA graphs does not pay those copies, so "
    "this lane is not compared as the best PyTorch option"
)


@dataclass
class PState:
    """One provider within one group (shared by the group's lanes)."""

    provider: Any
    status: str = "pending"
    error: str | None = None
    gate: gates.GateResult | None = None
    setup_s: float | None = None
    built: Any = None
    est_us: float | None = None  # per call, back-to-back events (host-bound for short calls)
    replay_us: float | None = None  # device time of one replay of a one-call graph
    graphs: dict = field(default_factory=dict)  # calls -> timing.Graph
    capture_error: str | None = None
    refs: tuple = ()
    relative: bool = False  # the op's gate mode (OpSpec.relative_check)
    extra: dict = field(default_factory=dict)

    def fail(self, status: str, error: str, gate: gates.GateResult | None = None) -> None:
        self.status, self.error, self.built, self.graphs = status, error, None, {}
        if gate is not None:
            self.gate = gate


def _provider_error(e: BaseException) -> str:
    if isinstance(e, ProviderTimeout):
        return f"timed out: {e}"
    if is_oom(e):
        return f"out of GPU memory: {format_error(e)}"
    return format_error(e)


class GroupMeasurer:
    """Measures the lanes of one group. ``host`` is the runner: it provides ``suite``, ``sv``
    (services), ``tracker`` (clock warm-up), ``flush_us``, ``ceilings`` (the run's summary),
    ``precompiled``, ``run_id``."""

    def __init__(self, host, group: Group):
        self.h = host
        self.sv = host.sv
        self.suite = host.suite
        self.group = group
        self.spec = self.sv.ops[group.op]
        self.ctx = None
        self.inputs: dict = {}
        self.refs: dict = {}
        self.states: list[PState] = []
        self.prints: list = []
        self.work = (0, 0, "unavailable")
        self.group_error: str | None = None
        self.limit = getattr(self.suite.sampling, "provider_timeout_s", 0.0)
        self.input_checks: dict[str, int] = {}  # provider -> times its inputs were checked
        self.inputs_note: str | None = None

    def _limit(self, name: str, phase: str):
        """The per-provider time limit around one phase; a call stuck in the driver past it is
        recorded by the runner (``provider_stuck``), which then ends the process."""
        key = self.group.key
        stuck = getattr(self.h, "provider_stuck", None)
        on_stuck = None if stuck is None else (lambda what: stuck(key, name, what, self.limit))
        return time_limit(self.limit, f"{name} ({phase})", on_stuck, self.sv.stuck_grace_s)

    # -------------------------------------------------------------------------------- setup

    def setup(self) -> None:
        from .providers import context_for

        g, spec = self.group, self.spec
        self.ctx = context_for(
            g.op, g.dtype, g.shape, self.suite.settings_for(g.op), self.sv.backend.device
        )
        try:
            self.work = spec.work(self.ctx)
        except Exception as e:
            self.work = (0, 0, f"work model failed: {type(e).__name__}: {e}")
        try:
            self.inputs = self._make_inputs()
        except Exception as e:
            self.group_error = f"making the inputs failed: {format_error(e)}"
            self.check_device()
        if self.group_error is None:
            try:
                self.prints = integrity.fingerprint(self.inputs)
            except Exception as e:  # an input type the fingerprint cannot read: say so, go on
                self.prints = []
                self.inputs_note = f"inputs not checked: {type(e).__name__}: {e}"
                self.check_device()
        self.states = [self.prepare(p) for p in spec.providers]

    def _make_inputs(self) -> dict:
        seed = self.group.seed(self.suite.seed)
        if self.sv.make_generator is not None:
            gen = self.sv.make_generator(self.ctx.device, seed)
        else:
            import torch

            gen = torch.Generator(device=self.ctx.device).manual_seed(seed)
        return self.spec.make_inputs(self.ctx, gen)

    def check_device(self) -> None:
        problem = self.sv.backend.healthy()
        if problem:
            raise DeviceLost(problem)

    def inputs_check(self, st_name: str) -> None:
        """Raise IntegrityFailure (after restoring the inputs) if a call changed them."""
        if not self.prints:
            return
        self.input_checks[st_name] = self.input_checks.get(st_name, 0) + 1
        bad = integrity.changed(self.prints, self.inputs)
        if bad:
            integrity.restore(self.inputs, self._make_inputs())
            if integrity.changed(self.prints, self.inputs):
                raise DeviceLost("the inputs could not be restored after a provider changed them")
            raise integrity.IntegrityFailure(
                f"{st_name} modified its inputs (input tensor(s) {bad} changed); inputs restored"
            )

    def prepare(self, p) -> PState:
        """Availability, build, gate, input check, warm-up, estimate. Never raises for a
        provider's fault."""
        sv, clock, spec, ctx = self.sv, self.sv.clock, self.spec, self.ctx
        st = PState(p)
        st.extra["reference"] = p.reference
        if p.description:
            st.extra["description"] = p.description
        pre = self.h.precompiled.get((self.group.key, p.name))
        if pre:
            st.extra["precompile"] = pre
        try:
            reason = p.available(ctx)
        except Exception as e:
            reason = f"availability check failed: {type(e).__name__}: {e}"
        if reason:
            st.status, st.error = "absent", reason
            return st
        if self.group_error:
            st.status, st.error = "error", self.group_error
            return st
        hung = getattr(self.h, "hung", {}).get((self.group.key, p.name))
        if hung:
            st.status = "error"
            st.error = (f"hung in an earlier session of this run: {hung['what']} did not return "
                        f"within the {hung['limit_s']:g} s limit; not run again")  # fmt: skip
            return st
        try:
            if p.reference not in self.refs:
                self.refs[p.reference] = tuple(spec.references[p.reference](self.inputs, ctx))
        except Exception as e:
            st.status, st.error = "error", f"computing the FP64 reference failed: {format_error(e)}"
            self.check_device()
            return st
        t0 = clock.now()
        try:
            with self._limit(p.name, "build, gate and warm-up"):
                built = p.build(self.inputs, ctx)
                build_s = clock.now() - t0
                gate, call_s = gates.run_gate(
                    built.fn,
                    self.refs[p.reference],
                    device=ctx.device,
                    out_buffers=built.out_buffers,
                    out_specs=spec.out_specs(ctx),
                    sync=sv.backend.sync,
                    clock=clock.now,
                    relative=spec.relative_check,
                )
                st.gate, st.refs, st.relative = gate, self.refs[p.reference], spec.relative_check
                st.extra.update(built.notes)
                st.extra["first_call_s"] = call_s
                st.setup_s = build_s + call_s
                self.inputs_check(p.name)
                if not gate.ok:
                    st.fail("failed_gate", f"output does not match the reference: {gate.detail}")
                    return st
                t1 = clock.now()
                for _ in range(self.suite.sampling.warmup_calls):
                    built.fn()
                sv.backend.sync()
                self.inputs_check(p.name)
                st.setup_s += clock.now() - t1
                st.est_us = timing.estimate_us(sv.backend, built.fn)
            st.built, st.status = built, "ok"
        except integrity.IntegrityFailure as e:
            st.fail("failed_gate", str(e), _failed(str(e)))
        except Exception as e:
            st.fail("error", _provider_error(e))
            self._recover(e)
        return st

    def _recover(self, e: BaseException) -> None:
        if is_oom(e):
            with contextlib.suppress(Exception):
                self.sv.backend.release()
        self.check_device()

    # -------------------------------------------------------------------------------- lanes

    def timed_for_lane(self, st: PState, lane: str) -> timing.Timed | None:
        """Capture (or reuse) the provider's graphs for this lane. The warm lane's calls per graph
        come from the device time of a one-call graph's replay (``timing.calls_per_graph``)."""
        sv, s = self.sv, self.suite.sampling
        p, fn = st.provider, st.built.fn
        graph, calls = None, 1
        if not p.graph_safe:
            st.extra["capture"] = "not captured: this provider replays its own CUDA graphs"
        elif st.capture_error is None:
            try:
                one = st.graphs.get(1)
                if one is None:
                    one = st.graphs[1] = sv.backend.capture(fn, 1)
                    if st.built.out_buffers and not self._replay_matches(st, one):
                        return None
                    st.replay_us = timing.replay_device_us(sv.backend, one)
                calls = timing.calls_per_graph(st.replay_us, lane, s)
                graph = st.graphs.get(calls)
                if graph is None:
                    graph = st.graphs[calls] = sv.backend.capture(fn, calls)
            except timing.CaptureError as e:
                st.capture_error = str(e)
                st.extra["capture"] = f"capture failed, timed per call: {e}"
                graph, calls = None, 1
                self.check_device()
        est = st.replay_us if graph is not None and st.replay_us else st.est_us
        return timing.Timed(p.name, fn, graph, calls, est or 0.0)

    def _replay_matches(self, st: PState, graph) -> bool:
        """For a provider writing into our buffers: poison them, replay the graph once, gate."""
        bufs = st.built.out_buffers
        gates.poison(bufs)
        graph()
        self.sv.backend.sync()
        result = gates.compare_outputs(bufs if len(bufs) > 1 else bufs[0], st.refs, st.relative)
        if not result.ok:
            st.fail(
                "failed_gate", f"CUDA-graph replay wrote a wrong result: {result.detail}", result
            )
            return False
        return True

    def measure_lane(self, lane: str, t0: float) -> dict:
        with self.sv.sampling_guard():
            return self._measure_lane(lane, t0)

    def _measure_lane(self, lane: str, t0: float) -> dict:
        sv, g = self.sv, self.group
        timed: list[timing.Timed] = []
        by_name: dict[str, PState] = {}
        pre = None
        if any(st.status == "ok" and st.built is not None for st in self.states):
            pre = self._warm()  # clocks up before the replays that size graphs
        for st in self.states:
            if st.status != "ok" or st.built is None:
                continue
            try:
                with self._limit(st.provider.name, "graph capture"):
                    t = self.timed_for_lane(st, lane)
                    self.inputs_check(st.provider.name)
            except integrity.IntegrityFailure as e:
                st.fail("failed_gate", str(e), _failed(str(e)))
                continue
            except Exception as e:
                st.fail("error", f"preparing the timed call: {_provider_error(e)}")
                self._recover(e)
                continue
            if t is not None:
                timed.append(t)
                by_name[t.name] = st
        if timed:
            warmup = self._warm()
        else:  # nothing to time: no warm-up
            warmup = {"burst_ms": 0.0, "skipped": True, "last_burst_ended_ms_ago": None}
        tel_before = sv.telemetry()
        rule = timing.StopRule.from_sampling(self.suite.sampling)
        rounds = sv.sampler(  # the mode's (timing.sample_rounds but in host mode)
            sv.backend, timed, lane, rule, seed=zlib.crc32(g.case_id(lane).encode()),
            clock=sv.clock, reader=sv.clocks, flush_us=self.h.flush_us,
            after_batch=lambda t: self.inputs_check(t.name),
            guard=lambda t: self._limit(t.name, "sampling"),
        )  # fmt: skip
        tel_after = sv.telemetry()
        self.h.tracker.touch()
        for t in timed:
            st = by_name[t.name]
            if t.error is not None:
                if isinstance(t.exception, integrity.IntegrityFailure):
                    st.fail("failed_gate", str(t.exception), _failed(str(t.exception)))
                else:
                    st.fail("error", _provider_error(t.exception) if t.exception else t.error)
                    self._recover(t.exception or RuntimeError(t.error))
            else:
                self._after_timing(st, t)
        providers = [self.provider_record(st, next((t for t in timed if t.name == st.provider.name), None))
                     for st in self.states]  # fmt: skip
        case = {
            "schema_version": 1,
            "kind": "case",
            "run_id": self.h.run_id,
            "case_id": g.case_id(lane),
            "op": g.op,
            "dtype": g.dtype,
            "shape": g.shape,
            "shape_label": g.shape_label,
            "lane": lane,
            "work": {"bytes": int(self.work[0]), "flops": int(self.work[1])},
            "warmup": warmup,
            "order": [t.name for t in timed],
            "telemetry": {"before": tel_before, "after": tel_after},
            "created_at": sv.artifacts.utc_now(),
            "providers": providers,
            "extra": {
                "work_model": self.work[2],
                "rounds": rounds,
                "stop_rule": rule.record(),
                "lane_policy": (
                    f"cold: L2 flushed ({sv.backend.flush_bytes} bytes written, then "
                    f"{getattr(sv.backend, 'clean_bytes', 0)} bytes of a clean buffer read) before "
                    "every timed interval, outside it"
                    if lane == "cold"
                    else "warm: no flush; cache diagnostic only (inputs may stay in L2)"
                ),
                "flush_us": self.h.flush_us,
                "capture_warmup": pre,
                "inputs_check": self.inputs_note or "exact fingerprints compared after every phase",
                "seed": g.seed(self.suite.seed),
                "group_elapsed_s": sv.clock.now() - t0,
            },
        }
        sv.artifacts.fill_derived(case, (self.h.ceilings or {}).get("copy_tbps"))
        for pr in case["providers"]:
            flag = integrity.above_ceilings(case, pr, self.h.ceilings)
            if flag is not None:
                pr["extra"]["above_ceiling"] = flag
        return case

    def _warm(self) -> dict:
        """The clock warm-up; a failure of it is recorded, never fatal to the case."""
        try:
            return self.h.tracker.before_case()
        except Exception as e:
            self.check_device()
            return {"burst_ms": 0.0, "skipped": True, "last_burst_ended_ms_ago": None,
                    "method": f"warm-up failed: {type(e).__name__}: {e}"}  # fmt: skip

    def _after_timing(self, st: PState, t: timing.Timed) -> None:
        """Gate again what was timed, check for work outside the timed interval."""
        sv = self.sv
        try:
            with self._limit(st.provider.name, "checks after timing"):
                result = integrity.regate(
                    fn=st.built.fn,
                    graph=t.replay,
                    refs=st.refs,
                    relative=st.relative,
                    out_buffers=st.built.out_buffers,
                    out_specs=self.spec.out_specs(self.ctx),
                    device=self.ctx.device,
                    sync=sv.backend.sync,
                    inputs=self.inputs,
                )
                st.extra["regate"] = {"ok": result.ok, "detail": result.detail[:500]}
                self.inputs_check(st.provider.name)
                if not result.ok:
                    self._discard(st, t, f"failed the gate after timing: {result.detail}", result)
                    return
                kept = t.kept(self.suite.sampling.min_samples)
                dev = stats.median(kept) if kept else 0.0
                host = stats.median(t.host_samples) if t.host_samples else None
                hw = integrity.hidden_work(st.built.fn, sv.backend.sync, sv.clock.now, dev, host)
                st.extra["hidden_work_check"] = hw
                if hw["hidden"]:
                    self._discard(
                        st, t,
                        "work outside the timed interval: back-to-back calls plus a device "
                        f"synchronize took {hw['wall_us_per_call']:.1f} us per call against "
                        f"{hw['host_us_per_call']:.1f} us host and {dev:.1f} us device time "
                        "(a side stream, or work deferred until synchronization)",
                        _failed("hidden work"),
                    )  # fmt: skip
        except integrity.IntegrityFailure as e:
            self._discard(st, t, str(e), _failed(str(e)))
        except Exception as e:
            st.fail("error", f"checks after timing: {_provider_error(e)}")
            t.error = st.error
            self._recover(e)

    def _discard(self, st: PState, t: timing.Timed, why: str, gate: gates.GateResult) -> None:
        kept = t.kept(self.suite.sampling.min_samples)
        st.extra["discarded"] = {"device_median_us": stats.median(kept) if kept else None}
        st.fail("failed_gate", why, gate)
        t.error = why

    # -------------------------------------------------------------------------------- records

    def provider_record(self, st: PState, t: timing.Timed | None) -> dict:
        p = st.provider
        ok = st.status == "ok" and t is not None and t.error is None and bool(t.device_samples)
        error = st.error
        min_n = self.suite.sampling.min_samples
        kept = t.kept(min_n) if t is not None else []
        if ok and stats.median(kept) <= 0.0:
            ok, error = False, "device time below the event timer's resolution (median 0 us)"
        status = "ok" if ok else ("error" if st.status == "ok" else st.status)
        if status == "error" and not error:
            error = "no timing samples were taken"
        extra = dict(st.extra)
        if p.name in self.input_checks:
            extra["inputs_checked"] = self.input_checks[p.name]  # fingerprint comparisons
        if t is not None:
            extra.update({
                "device_method": t.device_method,
                "calls_per_replay": t.calls,
                "est_us": st.est_us,
                "replay_us": st.replay_us,
                "noise": {
                    "rse_median": t.noise, "target": timing.StopRule.from_sampling(
                        self.suite.sampling).max_rse,
                    "stopped": t.stopped, "n": len(t.device_samples), "spent_s": t.spent_s,
                },
                "throttled": {
                    "n": t.n_throttled, "rule": "SM clock < 75% of max (NVML), batch bracketed",
                    "kept_in_stats": len(kept) == len(t.device_samples) and t.n_throttled > 0,
                },
                "batches": t.batches,
            })  # fmt: skip
        if getattr(p, "compile_mode", None) in CUDAGRAPH_TREE_MODES and not st.extra.get(
            "static_inputs"
        ):
            extra["excluded_from_best"] = CUDAGRAPH_TREE_NOTE
        gate = st.gate.record() if st.gate is not None and status != "absent" else None
        if status == "failed_gate" and gate is not None and gate["ok"]:
            gate = _failed(error or "failed").record()
        return {
            "name": p.name,
            "label": p.label,
            "family": p.family,
            "baseline": bool(p.baseline),
            "status": status,
            "error": None if status == "ok" else error,
            "gate": gate,
            "setup_s": st.setup_s,
            "device_time": stats.summarize(kept) if ok else None,
            "host_time": (stats.summarize(t.host_samples) if ok and t.host_samples else None),
            "derived": dict.fromkeys(DERIVED_KEYS),
            "extra": extra,
        }

    def close(self) -> None:
        compiled = any(s.provider.family == "compile" and s.status != "absent" for s in self.states)
        for s in self.states:
            s.built, s.graphs = None, {}
        self.states.clear()
        self.inputs.clear()
        self.refs.clear()
        if compiled:
            self.sv.reset_compiler()
        with contextlib.suppress(Exception):
            self.sv.backend.release()


def _failed(detail: str) -> gates.GateResult:
    return gates.GateResult(False, None, None, None, 0, 0, detail=detail)
