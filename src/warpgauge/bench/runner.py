"""The suite runner: inputs -> gates -> setup -> graph capture -> interleaved sampling -> stats ->
one case artifact per (operator, dtype, shape, lane), written the moment the case finishes.

Everything the runner touches outside Python is injected through :class:`Services` (device
backend, clock, operator registry, artifact writer, telemetry, ceilings, precompile, UI), so tests
drive the real loop on the CPU with fake providers and a fake clock. ``default_services`` builds
the only configuration that produces numbers: a CUDA device.

Interruption: every finished case is on disk (atomic write + manifest update) before the next one
starts. Ctrl-C, SIGTERM, a crash, or the ``--max-minutes`` budget end the run with ``run.json``
status "interrupted", its finished and missing cases listed; ``--resume`` runs only the missing
ones, with the same suite and seeds, into the same directory.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import re
import signal
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import gates, stats, timing
from .suite import Group, Suite, SuiteError

ERROR_TAIL_LINES = 8
ERROR_MAX_CHARS = 2000


class Terminated(KeyboardInterrupt):
    """SIGTERM (e.g. ``timeout``), handled like Ctrl-C."""


class DeviceLost(RuntimeError):
    """The device stopped working (a sticky CUDA error); the run cannot go on."""


def format_error(e: BaseException) -> str:
    """``Type: message`` plus the last lines of the traceback, bounded in length."""
    head = f"{type(e).__name__}: {e}".strip()
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    lines = [ln.rstrip() for chunk in tb[:-1] for ln in chunk.splitlines() if ln.strip()]
    tail = "\n".join(lines[-ERROR_TAIL_LINES:])
    text = head if not tail else f"{head}\n{tail}"
    return (
        text if len(text) <= ERROR_MAX_CHARS else text[: ERROR_MAX_CHARS - 20] + " ... [truncated]"
    )


# ------------------------------------------------------------------------------------ services


class QuietUI:
    """A UI that prints nothing (tests) but remembers what it was told."""

    def __init__(self):
        self.lines: list[str] = []
        self.done: list[str] = []

    def info(self, msg: str) -> None:
        self.lines.append(msg)

    def start(self, total: int, description: str) -> None:
        self.lines.append(f"start {total} {description}")

    def case_done(self, case_id: str, row: dict) -> None:
        self.done.append(case_id)

    def stop(self) -> None:
        pass

    def summary(self, rows: list[dict], copy_tbps: float | None) -> None:
        self.lines.append(f"summary {len(rows)}")


@dataclass
class Services:
    backend: timing.Backend
    clock: timing.Clock
    ops: dict  # op name -> providers.OpSpec
    artifacts: Any  # warpgauge.artifacts (or a stand-in with the same functions)
    provenance: Callable[[], dict]
    telemetry: Callable[[], dict]
    measure_ceilings: Callable[[timing.Backend, Suite], dict] | None = None
    precompile: Callable[..., dict] | None = None
    reset_compiler: Callable[[], None] = lambda: None
    ui: Any = field(default_factory=QuietUI)
    make_generator: Callable[[Any, int], Any] | None = None
    # Context held while graphs are captured and samples taken (real: torch.compile may not
    # recompile in there; a recompile raises and the provider is recorded as an error).
    sampling_guard: Callable[[], Any] = contextlib.nullcontext
    # How one lane is sampled (the mode's: timing.sample_interleaved except in host mode).
    sampler: Callable[..., list] = timing.sample_interleaved


def default_services(suite: Suite, device_index: int = 0, ui=None) -> Services:
    """The real services: CUDA backend, NVML telemetry, the operator registry. Raises
    RuntimeError without a CUDA device."""
    import torch

    from warpgauge import artifacts, environment

    from . import ceilings, modes, precompile

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device is visible")

    def reset_compiler():
        torch._dynamo.reset()

    def sampling_guard():
        set_stance = getattr(torch.compiler, "set_stance", None)
        return set_stance("fail_on_recompile") if set_stance else contextlib.nullcontext()

    def measure(backend, s: Suite):
        dtypes = sorted({g.dtype for g in s.groups})
        return ceilings.measure_ceilings(
            backend, dtypes, s.ceilings.copy_bytes, s.ceilings.mm_sizes
        )

    return Services(
        backend=timing.CudaBackend(device_index),
        clock=timing.MonotonicClock(),
        ops=modes.specs_for(suite, device=torch.device("cuda", device_index)),
        artifacts=artifacts,
        provenance=lambda: environment.provenance(device_index=device_index),
        telemetry=lambda: environment.telemetry_snapshot(device_index),
        measure_ceilings=measure,
        precompile=functools.partial(precompile.run_precompile, device_index=device_index),
        reset_compiler=reset_compiler,
        ui=ui or QuietUI(),
        sampling_guard=sampling_guard,
        sampler=modes.sampler_for(suite, timing.MonotonicClock()),
    )


# ------------------------------------------------------------------------------------ state


@dataclass
class PState:
    """One provider within one group (shared by the group's lanes)."""

    provider: Any
    status: str = "pending"
    error: str | None = None
    gate: gates.GateResult | None = None
    setup_s: float | None = None
    built: Any = None
    est_us: float | None = None
    graphs: dict = field(default_factory=dict)  # calls -> replay
    capture_error: str | None = None
    refs: tuple = ()
    relative: bool = False  # the op's gate mode (OpSpec.relative_check)
    extra: dict = field(default_factory=dict)


@dataclass
class RunOutcome:
    exit_code: int
    run_dir: Path | None
    status: str
    finished: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    reason: str | None = None


def _utc_stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def new_run_dir(out_root: Path, suite: Suite) -> tuple[str, Path]:
    name = re.sub(r"[^A-Za-z0-9._+-]", "-", suite.name)[:40].strip("-") or "suite"
    base = f"{_utc_stamp()}-{name}{'-quick' if suite.quick else ''}"
    run_id, n = base, 2
    while (out_root / run_id).exists():
        run_id, n = f"{base}-{n}", n + 1
    return run_id, out_root / run_id


# ------------------------------------------------------------------------------------ runner


class Runner:
    def __init__(self, suite: Suite, services: Services, argv: list[str]):
        self.suite = suite
        self.sv = services
        self.argv = list(argv)
        self.run_dir: Path | None = None
        self.run_id: str | None = None
        self.copy_tbps: float | None = None
        self.flush_us = 0.0
        self.precompiled: dict = {}
        self.summary_rows: list[dict] = []
        self._op_stats: dict[str, dict] = {}
        self._critical = False
        self._pending: BaseException | None = None
        self.tracker = timing.WarmupTracker(
            services.clock,
            services.backend.burst,
            suite.sampling.burst_ms,
            suite.sampling.burst_skip_ms,
        )

    # -------------------------------------------------------------------------------- entry

    def run(self, out_root: Path | None = None, resume: Path | None = None) -> RunOutcome:
        sv, clock = self.sv, self.sv.clock
        t_start = clock.now()
        deadline = t_start + self.suite.max_minutes * 60.0
        if resume is not None:
            run, done = self._open_resume(resume)
            if run is None:
                return RunOutcome(0, self.run_dir, "complete", done, [])
        else:
            run, done = self._open_new(Path(out_root or "results"))
        expected = run["expected_cases"]
        todo = [c for c in expected if c not in done]
        reason = None
        status = "interrupted"
        phases: dict[str, float] = {}
        previous = self._install_signals()
        try:
            sv.ui.info(
                f"run {self.run_id}: {len(todo)} of {len(expected)} case(s) to measure -> {self.run_dir}"
            )
            if not run["ceilings"].get("copy_tbps") and sv.measure_ceilings is not None:
                t0 = clock.now()
                self._ceilings(run)
                phases["ceilings_s"] = clock.now() - t0
            self.copy_tbps = run["ceilings"].get("copy_tbps")
            self.flush_us = timing.measure_flush_us(sv.backend) if todo else 0.0
            groups = self._groups_todo(todo)
            if groups and sv.precompile is not None and self.suite.compile.precompile_workers > 0:
                t0 = clock.now()
                budget = max(0.0, (deadline - clock.now()) * self.suite.compile.precompile_share)
                self.precompiled = (
                    sv.precompile(self.suite, [g for g, _ in groups], budget, sv.ui, sv.ops) or {}
                )
                phases["precompile_s"] = clock.now() - t0
            t0 = clock.now()
            reason = self._measure(groups, deadline)
            phases["measure_s"] = clock.now() - t0
            status = "complete" if reason is None else "interrupted"
        except Terminated:
            reason = "terminated by SIGTERM (for example by `timeout`)"
        except KeyboardInterrupt:
            reason = "interrupted by the user (Ctrl-C)"
        except DeviceLost as e:
            reason = f"the device stopped working: {e}"
        except Exception as e:  # a bug in the harness: keep what finished, say what broke
            reason = f"crashed: {format_error(e)}"
        finally:
            sv.ui.stop()
        try:
            return self._close(run, status, reason, phases, t_start)
        finally:
            self._restore_signals(previous)

    # -------------------------------------------------------------------------------- setup

    def _open_new(self, out_root: Path) -> tuple[dict, set]:
        art, sv = self.sv.artifacts, self.sv
        out_root.mkdir(parents=True, exist_ok=True)
        self.run_id, self.run_dir = new_run_dir(out_root, self.suite)
        self.run_dir.mkdir(parents=True)
        expected = self.suite.case_ids()
        run = {
            "schema_version": 1,
            "kind": "run",
            "run_id": self.run_id,
            "created_at": art.utc_now(),
            "finished_at": None,
            "command": self.argv,
            "config": self.suite.to_config(),
            "expected_cases": expected,
            "provenance": sv.provenance(),
            "ceilings": {"copy_tbps": None, "copy_bytes": None, "mm_tflops": {}, "method": None},
            "status": "running",
            "finished_cases": [],
            "missing_cases": list(expected),
            "telemetry": {"before": sv.telemetry(), "after": None},
            "extra": {"resumes": []},
        }
        art.write_run(self.run_dir, run)
        return run, set()

    def _open_resume(self, resume: Path) -> tuple[dict | None, set]:
        art, sv = self.sv.artifacts, self.sv
        self._repair(Path(resume))
        loaded = art.load_run(resume)
        run = loaded.run
        self.run_dir, self.run_id = Path(resume), run["run_id"]
        done = {c["case_id"] for c in loaded.cases if isinstance(c, dict) and "case_id" in c}
        todo = [c for c in run["expected_cases"] if c not in done]
        if not todo:
            sv.ui.info(f"run {self.run_id} has every expected case; nothing to resume")
            if run["status"] != "complete":
                art.finish_run(self.run_dir, "complete")
            return None, done
        run["status"] = "running"
        run["finished_cases"] = [c for c in run["expected_cases"] if c in done]
        run["missing_cases"] = todo
        run.setdefault("extra", {}).setdefault("resumes", []).append(
            {"command": self.argv, "at": art.utc_now(), "missing_before": len(todo)}
        )
        art.write_run(self.run_dir, run)
        return run, done

    def _repair(self, run_dir: Path) -> None:
        """Before resuming: drop temp files of writes that never completed (a SIGKILL mid-write)
        and list in the manifest any complete, valid case file a kill left unlisted."""
        art, ui = self.sv.artifacts, self.sv.ui
        is_temp = getattr(art, "_is_temp", lambda rel: rel.rsplit("/", 1)[-1].startswith("."))
        manifest_path = run_dir / art.MANIFEST_FILE
        listed = set()
        if manifest_path.exists():
            with contextlib.suppress(Exception):
                listed = set(art.read_json(manifest_path)["files"])
        run = art.read_json(run_dir / art.RUN_FILE)
        for rel in art.list_files(run_dir):
            path = run_dir / rel
            if is_temp(rel):
                path.unlink()
                ui.info(f"resume: removed {rel}, the temp file of an interrupted write")
                continue
            if not rel.startswith(art.CASES_DIR + "/") or rel in listed:
                continue
            try:
                case = art.read_json(path)
                problems = art.schema_errors("case", case) or art.case_problems(case, run)
                if not problems and rel != f"{art.CASES_DIR}/{art.case_filename(case['case_id'])}":
                    problems = ["file name does not match its case id"]
            except Exception as e:
                problems = [str(e)]
            if problems:
                path.unlink()
                ui.info(
                    f"resume: removed {rel}, not a valid case file ({problems[0]}); it is measured again"
                )
            else:
                art.update_manifest(run_dir, [rel], run["run_id"])
                ui.info(
                    f"resume: listed {rel} in the manifest (written just before an interruption)"
                )

    def _ceilings(self, run: dict) -> None:
        sv = self.sv
        sv.ui.info("measuring ceilings (device copy, torch.mm)")
        self.tracker.before_case()
        tel_before = sv.telemetry()
        result = sv.measure_ceilings(sv.backend, self.suite)
        self.tracker.last_end = sv.clock.now()  # the ceilings keep the clocks up like a burst
        record = {
            "schema_version": 1,
            "kind": "ceilings",
            "run_id": self.run_id,
            "created_at": sv.artifacts.utc_now(),
            "measurements": result["measurements"],
            "telemetry": {"before": tel_before, "after": sv.telemetry()},
        }
        run["ceilings"] = result["summary"]
        with self._critical_section():
            sv.artifacts.write_ceilings(self.run_dir, record)
            sv.artifacts.write_run(self.run_dir, run)
        s = result["summary"]
        mm = ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in s["mm_tflops"].items())
        sv.ui.info(f"ceilings: copy {s['copy_tbps']:.2f} TB/s; mm {mm or 'n/a'}")

    def _groups_todo(self, todo: list[str]) -> list[tuple[Group, list[str]]]:
        want = set(todo)
        out = []
        for g in self.suite.groups:
            lanes = [lane for lane in self.suite.lanes if g.case_id(lane) in want]
            if lanes:
                out.append((g, lanes))
        return out

    # -------------------------------------------------------------------------------- measuring

    def _measure(self, groups, deadline: float) -> str | None:
        """Run every group; returns None when all ran, else why the run stopped early."""
        sv, clock = self.sv, self.sv.clock
        total = sum(len(lanes) for _, lanes in groups)
        sv.ui.start(total, f"{self.suite.name}{' (quick)' if self.suite.quick else ''}")
        current_op = None
        try:
            for group, lanes in groups:
                if group.op != current_op:
                    if current_op is not None:
                        self._op_done(current_op)
                    current_op = group.op
                    self._op_stats.setdefault(
                        group.op, {"start": clock.now(), "cases": 0, "setup": {}}
                    )
                if clock.now() >= deadline:
                    return self._budget_reason()
                n = self._run_group(group, lanes, deadline)
                self._op_stats[group.op]["cases"] += n
                if n < len(lanes):
                    return self._budget_reason()
            return None
        finally:
            if current_op is not None:
                self._op_done(current_op)

    def _budget_reason(self) -> str:
        return (
            f"time budget reached (--max-minutes {self.suite.max_minutes:g}): no new case was "
            "started; `warpgauge bench --resume RUN` measures the rest"
        )

    def _op_done(self, op: str) -> None:
        """One line per operator: elapsed time, and where the setup time went (by family)."""
        st = self._op_stats.get(op)
        if not st or st.get("reported"):
            return
        st["reported"] = True
        secs = self.sv.clock.now() - st["start"]
        setup = ", ".join(f"{fam} {s:.1f} s" for fam, s in sorted(st["setup"].items()))
        self.sv.ui.info(f"{op}: {st['cases']} case(s) in {secs:.1f} s (setup: {setup or 'none'})")

    def _run_group(self, group: Group, lanes: list[str], deadline: float) -> int:
        """Measure ``lanes`` of ``group``; returns how many lane cases were written."""
        sv = self.sv
        spec = sv.ops[group.op]
        t0 = sv.clock.now()
        ctx = self._context(group)
        states: list[PState] = []
        inputs: dict = {}
        refs: dict = {}
        group_error = None
        work = (0, 0, "unavailable")
        written = 0
        try:
            try:
                work = spec.work(ctx)
            except Exception as e:
                work = (0, 0, f"work model failed: {type(e).__name__}: {e}")
            try:
                inputs = spec.make_inputs(ctx, self._generator(ctx, group))
            except Exception as e:
                group_error = f"making the inputs failed: {format_error(e)}"
                self._check_device()
            states = [
                self._prepare(p, spec, ctx, inputs, refs, group, group_error)
                for p in spec.providers
            ]
            for st in states:  # say what went wrong now, not only in the artifact
                if st.status in ("error", "failed_gate"):
                    head = (st.error or "").splitlines()[0][:240]
                    sv.ui.info(f"  {group.key} {st.provider.name}: {st.status}: {head}")
            stats_op = self._op_stats.setdefault(group.op, {"start": t0, "cases": 0, "setup": {}})
            for st in states:
                if st.setup_s:
                    fam = st.provider.family
                    stats_op["setup"][fam] = stats_op["setup"].get(fam, 0.0) + st.setup_s
            for lane in lanes:
                if sv.clock.now() >= deadline:
                    break
                record = self._measure_lane(group, lane, states, work, t0)
                with self._critical_section():
                    sv.artifacts.write_case(self.run_dir, record)
                written += 1
                row = summary_row(record, self.copy_tbps)
                self.summary_rows.append(row)
                sv.ui.case_done(record["case_id"], row)
        finally:
            compiled = any(s.provider.family == "compile" and s.status != "absent" for s in states)
            for s in states:
                s.built, s.graphs = None, {}
            states.clear()
            inputs.clear()
            refs.clear()
            if compiled:
                sv.reset_compiler()
            with contextlib.suppress(Exception):
                sv.backend.release()
            gc.collect()
        return written

    def _context(self, group: Group):
        from .providers import context_for

        return context_for(
            group.op,
            group.dtype,
            group.shape,
            self.suite.settings_for(group.op),
            self.sv.backend.device,
        )

    def _generator(self, ctx, group: Group):
        seed = group.seed(self.suite.seed)
        if self.sv.make_generator is not None:
            return self.sv.make_generator(ctx.device, seed)
        import torch

        return torch.Generator(device=ctx.device).manual_seed(seed)

    def _check_device(self) -> None:
        problem = self.sv.backend.healthy()
        if problem:
            raise DeviceLost(problem)

    def _prepare(self, p, spec, ctx, inputs, refs, group: Group, group_error) -> PState:
        """Availability, build, gate, warm-up, estimate. Never raises for a provider's fault."""
        sv, clock = self.sv, self.sv.clock
        st = PState(p)
        st.extra["reference"] = p.reference
        if p.description:
            st.extra["description"] = p.description
        pre = self.precompiled.get((group.key, p.name))
        if pre:
            st.extra["precompile"] = pre
        try:
            reason = p.available(ctx)
        except Exception as e:
            reason = f"availability check failed: {type(e).__name__}: {e}"
        if reason:
            st.status, st.error = "absent", reason
            return st
        if group_error:
            st.status, st.error = "error", group_error
            return st
        try:
            if p.reference not in refs:
                refs[p.reference] = tuple(spec.references[p.reference](inputs, ctx))
        except Exception as e:
            st.status, st.error = "error", f"computing the FP64 reference failed: {format_error(e)}"
            self._check_device()
            return st
        t0 = clock.now()
        try:
            built = p.build(inputs, ctx)
            build_s = clock.now() - t0
            gate, call_s = gates.run_gate(
                built.fn,
                refs[p.reference],
                device=ctx.device,
                out_buffers=built.out_buffers,
                out_specs=spec.out_specs(ctx),
                sync=sv.backend.sync,
                clock=clock.now,
                relative=spec.relative_check,
            )
            st.gate = gate
            st.refs = refs[p.reference]
            st.relative = spec.relative_check
            st.extra.update(built.notes)
            st.extra["first_call_s"] = call_s
            if not gate.ok:
                st.status, st.error = (
                    "failed_gate",
                    f"output does not match the reference: {gate.detail}",
                )
                st.setup_s = build_s + call_s
                return st
            t1 = clock.now()
            for _ in range(self.suite.sampling.warmup_calls):
                built.fn()
            sv.backend.sync()
            st.setup_s = build_s + call_s + (clock.now() - t1)
            st.est_us = timing.estimate_us(sv.backend, built.fn)
            st.built = built
            st.status = "ok"
        except Exception as e:
            st.status, st.error = "error", format_error(e)
            st.built = None
            self._check_device()
        return st

    def _timed_for_lane(self, st: PState, lane: str) -> timing.Timed | None:
        """Capture (or reuse) the provider's graph for this lane and plan its samples."""
        sv, s = self.sv, self.suite.sampling
        p, fn = st.provider, st.built.fn
        calls = timing.calls_per_graph(st.est_us, lane, s)
        replay = None
        if not p.graph_safe:
            st.extra["capture"] = "not captured: this provider replays its own CUDA graphs"
            calls = 1
        elif calls in st.graphs:
            replay = st.graphs[calls]
        elif st.capture_error is None:
            try:
                replay = sv.backend.capture(fn, calls)
                st.graphs[calls] = replay
                if st.built.out_buffers and not self._replay_matches(st, replay):
                    return None
            except timing.CaptureError as e:
                st.capture_error = str(e)
                st.extra["capture"] = f"capture failed, timed per call: {e}"
                self._check_device()
        if replay is None:
            calls = 1
        n_dev, n_host = timing.plan_samples(st.est_us, lane, calls, self.flush_us, s)
        return timing.Timed(p.name, fn, replay, calls, n_dev, n_host)

    def _replay_matches(self, st: PState, replay) -> bool:
        """For a provider writing into our buffers: poison them, replay the graph once, gate."""
        bufs = st.built.out_buffers
        gates.poison(bufs)
        replay()
        self.sv.backend.sync()
        result = gates.compare_outputs(bufs if len(bufs) > 1 else bufs[0], st.refs, st.relative)
        if not result.ok:
            st.status = "failed_gate"
            st.gate = result
            st.error = f"CUDA-graph replay wrote a wrong result: {result.detail}"
            st.built = None
            return False
        return True

    def _measure_lane(self, group: Group, lane: str, states: list[PState], work, t0: float) -> dict:
        sv = self.sv
        with sv.sampling_guard():
            return self._measure_lane_guarded(group, lane, states, work, t0)

    def _measure_lane_guarded(self, group, lane, states, work, t0) -> dict:
        sv = self.sv
        timed: list[timing.Timed] = []
        by_name: dict[str, PState] = {}
        for st in states:
            if st.status != "ok" or st.built is None:
                continue
            try:
                t = self._timed_for_lane(st, lane)
            except Exception as e:
                st.status, st.error, st.built = (
                    "error",
                    f"preparing the timed call: {format_error(e)}",
                    None,
                )
                self._check_device()
                continue
            if t is not None:
                timed.append(t)
                by_name[t.name] = st
        if timed:
            warmup = self.tracker.before_case()
        else:  # nothing to time: no burst
            warmup = {"burst_ms": 0.0, "skipped": True, "last_burst_ended_ms_ago": None}
        tel_before = sv.telemetry()
        orders = sv.sampler(sv.backend, timed, lane, self.suite.sampling.rounds)
        tel_after = sv.telemetry()
        for t in timed:
            if t.error is not None:
                by_name[t.name].status = "error"
                by_name[t.name].error = t.error
                by_name[t.name].built = None
                self._check_device()
        providers = [self._provider_record(st, next((t for t in timed if t.name == st.provider.name), None))
                     for st in states]  # fmt: skip
        case = {
            "schema_version": 1,
            "kind": "case",
            "run_id": self.run_id,
            "case_id": group.case_id(lane),
            "op": group.op,
            "dtype": group.dtype,
            "shape": group.shape,
            "shape_label": group.shape_label,
            "lane": lane,
            "work": {"bytes": int(work[0]), "flops": int(work[1])},
            "warmup": warmup,
            "order": [t.name for t in timed],
            "telemetry": {"before": tel_before, "after": tel_after},
            "created_at": sv.artifacts.utc_now(),
            "providers": providers,
            "extra": {
                "work_model": work[2],
                "rounds": orders,
                "lane_policy": (
                    f"cold: L2 flushed ({sv.backend.flush_bytes} bytes written) before every timed "
                    "interval, outside it"
                    if lane == "cold"
                    else "warm: no flush; cache diagnostic only (inputs may stay in L2)"
                ),
                "flush_us": self.flush_us,
                "seed": group.seed(self.suite.seed),
                "group_elapsed_s": sv.clock.now() - t0,
            },
        }
        sv.artifacts.fill_derived(case, self.copy_tbps)
        return case

    def _provider_record(self, st: PState, t: timing.Timed | None) -> dict:
        p = st.provider
        ok = st.status == "ok" and t is not None and t.error is None and bool(t.device_samples)
        error = st.error
        if ok and sorted(t.device_samples)[len(t.device_samples) // 2] <= 0.0:
            ok, error = False, "device time below the event timer's resolution (median 0 us)"
        status = "ok" if ok else ("error" if st.status == "ok" else st.status)
        if status == "error" and not error:
            error = "no timing samples were taken"
        extra = dict(st.extra)
        if t is not None:
            extra.update({
                "device_method": t.device_method,
                "calls_per_replay": t.calls,
                "est_us": st.est_us,
            })  # fmt: skip
        return {
            "name": p.name,
            "label": p.label,
            "family": p.family,
            "baseline": bool(p.baseline),
            "status": status,
            "error": None if status == "ok" else error,
            "gate": st.gate.record() if st.gate is not None and status != "absent" else None,
            "setup_s": st.setup_s,
            "device_time": stats.summarize(t.device_samples) if ok else None,
            "host_time": (stats.summarize(t.host_samples) if ok and t.host_samples else None),
            "derived": dict.fromkeys(
                ("tbps", "tflops", "speedup_vs_best_pytorch", "pct_copy_ceiling")
            ),
            "extra": extra,
        }

    # -------------------------------------------------------------------------------- closing

    def _close(
        self, run: dict, status: str, reason: str | None, phases: dict, t_start: float
    ) -> RunOutcome:
        sv, art = self.sv, self.sv.artifacts
        elapsed = sv.clock.now() - t_start
        code = 0
        try:
            fresh = art.load_run(self.run_dir).run
            fresh["telemetry"] = {"before": (fresh.get("telemetry") or {}).get("before") or sv.telemetry(),
                                  "after": sv.telemetry()}  # fmt: skip
            extra = fresh.setdefault("extra", {})
            extra.setdefault("sessions", []).append({
                "command": self.argv, "elapsed_s": elapsed, "phases": phases,
                "stopped_because": reason,
            })  # fmt: skip
            if reason:
                fresh["notes"] = f"interrupted: {reason.splitlines()[0]}"
            else:
                fresh.pop("notes", None)
            with self._critical_section():
                art.write_run(self.run_dir, fresh)
                final = art.finish_run(self.run_dir, status)
        except BaseException as e:  # the artifact layer failed, or a second Ctrl-C: say so
            if not isinstance(e, Exception):
                reason = reason or "interrupted while closing the run"
            sv.ui.info(f"could not close run.json: {format_error(e)}")
            return RunOutcome(1, self.run_dir, "interrupted", [], [], reason)
        finished, missing = final["finished_cases"], final["missing_cases"]
        if self.summary_rows:
            sv.ui.summary(self.summary_rows, self.copy_tbps)
        sv.ui.info(
            f"{len(finished)} of {len(final['expected_cases'])} case(s) finished in {elapsed:.1f} s; run directory {self.run_dir}"
        )
        if final["status"] != "complete":
            sv.ui.info(f"run {self.run_id} is INTERRUPTED: {reason or 'cases are missing'}")
            sv.ui.info(f"finished: {_head(finished)}")
            sv.ui.info(f"not measured: {_head(missing)}")
            sv.ui.info(f"to finish it: warpgauge bench --resume {self.run_dir}")
            code = (
                130
                if reason and ("Ctrl-C" in reason or "SIGTERM" in reason)
                else (3 if reason and reason.startswith("time budget") else 1)
            )
        return RunOutcome(code, self.run_dir, final["status"], finished, missing, reason)

    # -------------------------------------------------------------------------------- signals

    def _install_signals(self):
        """SIGINT and SIGTERM raise at once, except inside a critical section (writing an
        artifact and its manifest entry), where they are held until the write is complete."""
        if threading.current_thread() is not threading.main_thread():
            return None

        def handler(signum, frame):
            exc = Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
            if self._critical:
                self._pending = exc
                return
            raise exc

        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError, OSError):
                previous[sig] = signal.signal(sig, handler)
        return previous

    @staticmethod
    def _restore_signals(previous) -> None:
        for sig, old in (previous or {}).items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(sig, old)

    @contextlib.contextmanager
    def _critical_section(self):
        self._critical = True
        try:
            yield
        finally:
            self._critical = False
            if self._pending is not None:
                exc, self._pending = self._pending, None
                raise exc


def _head(ids: list[str], n: int = 12) -> str:
    if not ids:
        return "none"
    more = f" ... and {len(ids) - n} more" if len(ids) > n else ""
    return ", ".join(ids[:n]) + more


def summary_row(case: dict, copy_tbps: float | None) -> dict:
    """One line of the end-of-run table: warpgauge vs the best PyTorch provider."""
    wg = next((p for p in case["providers"] if p["family"] == "warpgauge"), None)
    from warpgauge.artifacts import best_pytorch

    best = best_pytorch(case)
    wg_ok = wg is not None and wg["status"] == "ok"
    return {
        "case_id": case["case_id"],
        "op": case["op"],
        "dtype": case["dtype"],
        "shape": case["shape_label"],
        "lane": case["lane"],
        "wg_status": wg["status"] if wg else "absent",
        "wg_us": wg["device_time"]["median_us"] if wg_ok else None,
        "best_name": best["name"] if best else None,
        "best_us": best["device_time"]["median_us"] if best else None,
        "speedup": wg["derived"]["speedup_vs_best_pytorch"] if wg_ok else None,
        "tbps": wg["derived"]["tbps"] if wg_ok else None,
        "pct_copy": wg["derived"]["pct_copy_ceiling"] if wg_ok else None,
    }


def run_bench(
    suite: Suite,
    services: Services,
    argv: list[str],
    out_root: Path | None = None,
    resume: Path | None = None,
) -> RunOutcome:
    """Measure ``suite`` (or finish the run at ``resume``) and return how it ended."""
    if resume is not None and not Path(resume).is_dir():
        raise SuiteError(f"--resume: {resume} is not a run directory")
    return Runner(suite, services, argv).run(out_root=out_root, resume=resume)


def suite_for_resume(run_dir: Path, artifacts) -> Suite:
    """The suite a run was made with, from its run.json."""
    loaded = artifacts.load_run(run_dir)
    return Suite.from_config(loaded.run["config"])
