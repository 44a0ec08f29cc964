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
import gc
import re
import signal
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from . import clocks, timing
from .errors import DeviceLost, Terminated, format_error
from .measure import GroupMeasurer, PState
from .resume import repair_run_dir
from .services import QuietUI, Services, default_services
from .suite import Group, Suite, SuiteError
from .ui import summary_row

__all__ = [
    "DeviceLost", "GroupMeasurer", "PState", "QuietUI", "RunOutcome", "Runner", "Services",
    "Terminated", "default_services", "format_error", "run_bench", "suite_for_resume",
]  # fmt: skip


# ------------------------------------------------------------------------------------ state


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
        self.ceilings: dict | None = None
        self.hung: dict = {}  # (group key, provider) -> record, from earlier sessions
        # One rank of a multi-GPU run (bench/distributed.py): measure only these cases, into a
        # rank run at exactly this (run id, directory). None: the whole suite, a new directory.
        self.only: set[str] | None = None
        self.target: tuple[str, Path] | None = None
        self.tracker = clocks.ClockWarmup(
            services.clock,
            services.backend.load,
            services.clocks,
            max_ms=suite.sampling.burst_ms,
            skip_ms=suite.sampling.burst_skip_ms,
        )

    # -------------------------------------------------------------------------------- entry

    def run(self, out_root: Path | None = None, resume: Path | None = None) -> RunOutcome:
        sv, clock = self.sv, self.sv.clock
        t_start = self._t_start = clock.now()
        deadline = t_start + self.suite.max_minutes * 60.0
        if resume is not None:
            run, done = self._open_resume(resume)
            if run is None:
                return RunOutcome(0, self.run_dir, "complete", done, [])
        else:
            run, done = self._open_new(Path(out_root or "results"))
        expected = run["expected_cases"]
        todo = [c for c in expected if c not in done and (self.only is None or c in self.only)]
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
                try:
                    self._ceilings(run)
                except (KeyboardInterrupt, DeviceLost):
                    raise
                except Exception as e:  # no ceiling: the cases are still measured, % is null
                    sv.ui.info(f"ceilings could not be measured: {format_error(e)}")
                    run.setdefault("extra", {})["ceilings_error"] = format_error(e)
                    self._check_device()
                    with self._critical_section():
                        sv.artifacts.write_run(self.run_dir, run)
                phases["ceilings_s"] = clock.now() - t0
            self.hung = {
                (h["group"], h["provider"]): h for h in run.get("extra", {}).get("hung", [])
            }
            self.copy_tbps = run["ceilings"].get("copy_tbps")
            self.ceilings = run["ceilings"]
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
        self.run_id, self.run_dir = self.target or new_run_dir(out_root, self.suite)
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
        repair_run_dir(self.sv.artifacts, self.sv.ui, run_dir)

    def _ceilings(self, run: dict) -> None:
        sv = self.sv
        sv.ui.info("measuring ceilings (calibrate candidates, then 7 confirmation runs)")
        warmup = self.tracker.before_case()
        tel_before = sv.telemetry()
        result = sv.measure_ceilings(sv.backend, self.suite)
        self.tracker.touch()  # the ceilings keep the clocks up like a warm-up
        record = {
            "schema_version": 1,
            "kind": "ceilings",
            "run_id": self.run_id,
            "created_at": sv.artifacts.utc_now(),
            "measurements": result["measurements"],
            "telemetry": {"before": tel_before, "after": sv.telemetry()},
            "extra": {"warmup": warmup},
        }
        run["ceilings"] = result["summary"]
        with self._critical_section():
            sv.artifacts.write_ceilings(self.run_dir, record)
            sv.artifacts.write_run(self.run_dir, run)
        s = result["summary"]
        rng = s.get("mm_tflops_range") or {}
        mm = ", ".join(
            f"{k} {v:.0f} TFLOP/s" + (f" ({rng[k][0]:.0f}-{rng[k][1]:.0f})" if k in rng else "")
            for k, v in s["mm_tflops"].items()
        )
        crng = s.get("copy_tbps_range")
        copy = f"{s['copy_tbps']:.2f} TB/s" + (f" ({crng[0]:.2f}-{crng[1]:.2f})" if crng else "")
        sv.ui.info(f"ceilings (median of confirmation runs, range): copy {copy}; mm {mm or 'n/a'}")

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
        t0 = sv.clock.now()
        gm = GroupMeasurer(self, group)
        written = 0
        try:
            gm.setup()
            for st in gm.states:  # say what went wrong now, not only in the artifact
                if st.status in ("error", "failed_gate"):
                    head = (st.error or "").splitlines()[0][:240]
                    sv.ui.info(f"  {group.key} {st.provider.name}: {st.status}: {head}")
            stats_op = self._op_stats.setdefault(group.op, {"start": t0, "cases": 0, "setup": {}})
            for st in gm.states:
                if st.setup_s:
                    fam = st.provider.family
                    stats_op["setup"][fam] = stats_op["setup"].get(fam, 0.0) + st.setup_s
            for lane in lanes:
                if sv.clock.now() >= deadline:
                    break
                record = gm.measure_lane(lane, t0)
                with self._critical_section():
                    sv.artifacts.write_case(self.run_dir, record)
                written += 1
                self._note_case(record)
        finally:
            gm.close()
            gc.collect()
        return written

    def _note_case(self, record: dict) -> None:
        """Remember what the exit code and the summary need; print one line."""
        row = summary_row(record, self.copy_tbps)
        self.summary_rows.append(row)
        for p in record["providers"]:
            if p["family"] == "warpgauge" and p["status"] == "failed_gate":
                head = (p["error"] or "").splitlines()[0][:200]
                self.sv.ui.info(f"  {record['case_id']}: warpgauge failed its gate: {head}")
        self.sv.ui.case_done(record["case_id"], row)

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
            own, above = self._flags_of_run()
            extra["warpgauge_failed_gate"] = own
            extra["above_ceiling"] = above
            if reason:
                fresh["notes"] = f"interrupted: {reason.splitlines()[0]}"
            else:
                fresh.pop("notes", None)
            with self._critical_section():
                art.write_run(self.run_dir, fresh)
                from warpgauge.environment import host_gpus  # every GPU of the host, as it ends

                final = art.finish_run(self.run_dir, status, host_gpus_after=host_gpus())
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
        if above:
            sv.ui.info(f"rate above the run's ceiling (flagged in the case files): {_head(above)}")
        if own:
            sv.ui.info(f"warpgauge FAILED ITS OWN GATE in {len(own)} case(s): {_head(own)}")
            code = EXIT_OWN_GATE
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

    def provider_stuck(self, group_key: str, name: str, what: str, limit_s: float) -> None:
        """Called from the watchdog thread while the main thread is blocked in the driver: record
        the hung provider in run.json, say so, and end the process (the CUDA context cannot be
        recovered in-process). ``--resume`` skips that provider and measures the rest."""
        sv, art = self.sv, self.sv.artifacts
        try:
            run = art.read_json(self.run_dir / art.RUN_FILE)
            entry = {"group": group_key, "provider": name, "what": what, "limit_s": limit_s,
                     "at": art.utc_now()}  # fmt: skip
            run.setdefault("extra", {}).setdefault("hung", []).append(entry)
            run["status"] = "interrupted"
            run["notes"] = f"interrupted: {what} hung inside the driver"
            t0 = getattr(self, "_t_start", None)
            run["extra"].setdefault("sessions", []).append({  # this session ends here
                "command": self.argv, "elapsed_s": None if t0 is None else sv.clock.now() - t0,
                "phases": {}, "stopped_because": f"{what} hung inside the driver",
            })  # fmt: skip
            art.write_run(self.run_dir, run)
            sv.ui.info(
                f"{group_key} {name}: {what} did not return within {limit_s:g} s (blocked in the "
                f"driver); recorded in run.json. To finish the run without it: "
                f"warpgauge bench --resume {self.run_dir}"
            )
        finally:
            sv.exit_process(EXIT_HUNG)

    def _check_device(self) -> None:
        problem = self.sv.backend.healthy()
        if problem:
            raise DeviceLost(problem)

    def _flags_of_run(self) -> tuple[list[str], list[str]]:
        """Every case on disk (all sessions): warpgauge providers that failed their gate, and
        providers flagged above the run's ceiling."""
        own, above = [], []
        for case in self.sv.artifacts.load_run(self.run_dir).cases:
            if not isinstance(case, dict):
                continue
            for p in case.get("providers", []):
                tag = f"{case.get('case_id')} {p.get('name')}"
                if p.get("family") == "warpgauge" and p.get("status") == "failed_gate":
                    own.append(tag)
                if (p.get("extra") or {}).get("above_ceiling"):
                    above.append(tag)
        return own, above

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


EXIT_OWN_GATE = 4  # the run finished, but a warpgauge provider failed its gate somewhere
EXIT_HUNG = 5  # a provider hung inside the driver: recorded, the process ended; --resume goes on


def _head(ids: list[str], n: int = 12) -> str:
    if not ids:
        return "none"
    more = f" ... and {len(ids) - n} more" if len(ids) > n else ""
    return ", ".join(ids[:n]) + more


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
