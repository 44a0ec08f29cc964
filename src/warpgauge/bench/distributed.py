"""One run on several GPUs of one host: ``torchrun --nproc-per-node N -m warpgauge bench ...``
(or ``warpgauge bench --gpus N``, which starts torchrun itself).

Rank 0 opens the run (a new directory, or ``--resume``: repair, then take in every case a rank of
an earlier session finished) and shards its unfinished cases with :mod:`shard` (cost-balanced
LPT over groups). The plan is broadcast over gloo (metadata only; nothing is measured through
a collective). Each rank measures its share with the ordinary :class:`Runner` into a rank run,
``ranks/s<session>-r<rank>/`` inside the run directory: its own ceilings, telemetry, provenance
(device identity) and case files, each written atomically the moment it finishes. Rank 0 then
gathers what each rank finished and merges it: every case file is copied into ``cases/`` with
the run's id and ``extra.rank`` (rank, local rank, GPU, that rank's ceilings); ``run.json`` gets
``world_size`` and ``ranks`` (per-rank device identity and ceilings); one manifest lists all.

A case is measured entirely on one GPU, so every ratio inside it compares providers on that GPU;
its rates are checked against its own rank's ceilings (``rules.case_ceilings``).

A rank that fails or is interrupted loses only its unfinished cases: its rank run holds the rest,
and ``--resume`` (on any number of GPUs, 1 included) takes them in before sharding what is left.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from .errors import format_error
from .runner import EXIT_OWN_GATE, Runner, RunOutcome
from .shard import shard_cases
from .suite import Suite

RANKS_DIR = "ranks"
# NVLink multicast off in every process a multi-GPU run starts (NCCL, symmetric memory, NVSHMEM).
NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}  # fmt: skip


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int

    @classmethod
    def from_env(cls, env=None) -> RankInfo | None:
        """The torchrun environment, or None outside torchrun."""
        env = os.environ if env is None else env
        if "LOCAL_RANK" not in env or "WORLD_SIZE" not in env or "RANK" not in env:
            return None
        try:
            return cls(int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["LOCAL_RANK"]))
        except ValueError as e:
            raise ValueError(
                f"RANK/WORLD_SIZE/LOCAL_RANK must be integers (torchrun sets them): {e}"
            ) from None


class RankUI:
    """What a rank other than 0 prints: its info lines, prefixed; no progress bar (rank 0 has
    the run's)."""

    def __init__(self, rank: int):
        self.prefix = f"[rank {rank}] "

    def info(self, msg: str) -> None:
        print(self.prefix + msg, file=sys.stderr, flush=True)

    def start(self, total: int, description: str) -> None:
        self.info(f"{total} case(s) of {description}")

    def case_done(self, case_id: str, row: dict) -> None:
        self.info(f"done {case_id}")

    def stop(self) -> None:
        pass

    def summary(self, rows: list[dict], copy_tbps: float | None) -> None:
        pass


def nvls_off_env(env=None) -> dict:
    """``env`` (default: this process's) with NVLink multicast switched off."""
    return {**(os.environ if env is None else env), **NVLS_OFF}


def torchrun_command(gpus: int, argv: list[str]) -> list[str]:
    """The torchrun command line that ``--gpus N`` runs: ``argv`` (bench's arguments) without
    ``--gpus``, one process per GPU on this host."""
    if gpus < 1:
        raise ValueError(f"--gpus must be >= 1, got {gpus}")
    rest, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--gpus":
            skip = True
            continue
        if a.startswith("--gpus="):
            continue
        rest.append(a)
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={gpus}", "-m", "warpgauge", *rest]  # fmt: skip


def init_gloo(info: RankInfo, timeout_s: float = 3600.0) -> None:
    """The gloo process group for the run's metadata (torchrun's env:// rendezvous)."""
    from datetime import timedelta

    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group(
            "gloo", rank=info.rank, world_size=info.world_size, timeout=timedelta(seconds=timeout_s)
        )


# ------------------------------------------------------------------------------------ merging


def _rank_dirs(run_dir: Path) -> list[Path]:
    root = run_dir / RANKS_DIR
    return sorted(p for p in root.iterdir() if (p / "run.json").is_file()) if root.is_dir() else []


def merge_rank_runs(art, run_dir: Path, ui) -> list[dict]:
    """Copy every finished case of every rank run under ``ranks/`` that ``cases/`` lacks into the
    run (its id, ``extra.rank``), list the rank files in the manifest; returns one entry per
    rank run (``ranks`` of run.json)."""
    run = art.read_json(run_dir / art.RUN_FILE)
    expected = set(run["expected_cases"])
    entries = []
    for sub in _rank_dirs(run_dir):
        try:
            loaded = art.load_run(sub)
        except (OSError, ValueError) as e:
            ui.info(f"rank run {sub.name} is unreadable ({e}); its cases are measured again")
            continue
        sr = loaded.run
        meta = (sr.get("extra") or {}).get("rank") or {}
        gpu = (sr.get("provenance") or {}).get("gpu")
        entry = {"dir": f"{RANKS_DIR}/{sub.name}", "run_id": sr["run_id"], **meta,
                 "gpu": gpu, "ceilings": sr.get("ceilings"), "status": sr.get("status"),
                 "telemetry": sr.get("telemetry"), "cases": []}  # fmt: skip
        for case in loaded.cases:
            cid = case.get("case_id")
            if cid not in expected:
                continue
            entry["cases"].append(cid)
            if art.find_case(run_dir, cid) is not None:  # .json, or .json.gz once compacted
                continue
            rec = dict(case)
            rec["run_id"] = run["run_id"]
            rec["extra"] = {**(case.get("extra") or {}), "rank": {
                **{k: meta.get(k) for k in ("rank", "local_rank", "world_size", "session")},
                "rank_run": entry["dir"], "gpu": gpu, "ceilings": sr.get("ceilings"),
            }}  # fmt: skip
            art.write_case(run_dir, rec)
        entries.append(entry)
    hung = _hung_of(run_dir, art)
    if hung != run.get("extra", {}).get("hung", []):  # a provider hung in a rank: skip it on resume
        run.setdefault("extra", {})["hung"] = hung
        art.write_run(run_dir, run)
    rel = [r for r in art.list_files(run_dir) if r.startswith(RANKS_DIR + "/")]
    if rel:
        art.update_manifest(run_dir, rel, run["run_id"])
    return entries


def _hung_of(run_dir: Path, art) -> list[dict]:
    """Providers recorded as hung in the run or any of its rank runs (one entry per group and
    provider, first record kept)."""
    seen: dict = {}
    for path in [run_dir, *_rank_dirs(run_dir)]:
        try:
            recs = (art.read_json(path / art.RUN_FILE).get("extra") or {}).get("hung") or []
        except (OSError, ValueError):
            continue
        for h in recs:
            seen.setdefault((h.get("group"), h.get("provider")), h)
    return list(seen.values())


# ------------------------------------------------------------------------------------ running


def _code(reason: str | None) -> int:
    if reason is None:
        return 0
    if "Ctrl-C" in reason or "SIGTERM" in reason:
        return 130
    return 3 if reason.startswith("time budget") else 1


def _open_main(suite: Suite, services, argv, out_root, resume) -> dict:
    """Rank 0: create or reopen the run; returns what every rank needs (plain data)."""
    art, ui = services.artifacts, services.ui
    main = Runner(suite, services, argv)
    if resume is not None:
        from .resume import repair_run_dir

        repair_run_dir(art, ui, Path(resume))
        merge_rank_runs(art, Path(resume), ui)
        run, done = main._open_resume(Path(resume))
        if run is None:
            return {"dir": str(main.run_dir), "run_id": main.run_id, "todo": [], "session": 0}
        session = len(run.get("extra", {}).get("resumes", []))
    else:
        run, done = main._open_new(Path(out_root or "results"))
        session = 0
    todo = [c for c in run["expected_cases"] if c not in done]
    hung = run.get("extra", {}).get("hung", [])
    return {"dir": str(main.run_dir), "run_id": main.run_id, "todo": todo, "session": session,
            "hung": hung}  # fmt: skip


def run_distributed(
    suite: Suite,
    make_services: Callable[[int], object],
    argv: list[str],
    info: RankInfo,
    out_root: Path | None = None,
    resume: Path | None = None,
) -> RunOutcome:
    """One rank's part of a multi-GPU run (the gloo group must be initialized). Every rank
    returns the run's outcome (the same exit code everywhere)."""
    import torch.distributed as dist

    services = make_services(info.local_rank)
    ui = services.ui
    plan: dict = {}
    if info.rank == 0:
        try:
            plan = _open_main(suite, services, argv, out_root, resume)
            plan["shards"] = shard_cases(suite, services.ops, plan["todo"], info.world_size)
        except Exception as e:
            plan = {"error": format_error(e)}
    box = [plan]
    dist.broadcast_object_list(box, src=0)
    plan = box[0]
    if "error" in plan:
        ui.info(f"rank {info.rank}: the run could not be opened: {plan['error']}")
        return RunOutcome(1, None, "interrupted", reason=plan["error"])
    run_dir = Path(plan["dir"])
    mine = plan.get("shards", [[]] * info.world_size)[info.rank] if plan["todo"] else []
    report = {"rank": info.rank, "cases": len(mine), "reason": None, "code": 0}
    if mine:
        want = set(mine)
        sub_suite = replace(
            suite,
            groups=tuple(g for g in suite.groups if any(g.case_id(x) in want for x in suite.lanes)),
        )
        name = f"s{plan['session']}-r{info.rank}"
        runner = Runner(sub_suite, services, argv)
        runner.only = want
        runner.target = (f"{plan['run_id']}.{name}", run_dir / RANKS_DIR / name)
        meta = {"rank": info.rank, "local_rank": info.local_rank, "world_size": info.world_size,
                "session": plan["session"]}  # fmt: skip
        try:
            outcome = _run_rank(runner, meta, plan.get("hung", []))
            report.update(reason=outcome.reason, code=_code(outcome.reason))
        except Exception as e:  # the rank's own cases stay on disk for --resume
            report.update(reason=f"rank {info.rank} crashed: {format_error(e)}", code=1)
    reports: list = [None] * info.world_size if info.rank == 0 else []
    dist.gather_object(report, reports if info.rank == 0 else None, dst=0)
    final = {}
    if info.rank == 0:
        try:
            final = _close_main(services, run_dir, reports, info)
        except Exception as e:
            final = {"code": 1, "status": "interrupted", "reason": f"closing: {format_error(e)}"}
    box = [final]
    dist.broadcast_object_list(box, src=0)
    final = box[0]
    return RunOutcome(final["code"], run_dir, final["status"], final.get("finished", []),
                      final.get("missing", []), final.get("reason"))  # fmt: skip


def run_repeated(
    suite: Suite,
    make_services: Callable[[int], object],
    argv: list[str],
    info: RankInfo,
    repeat: int = 1,
    out_root: Path | None = None,
    resume: Path | None = None,
) -> tuple[int, list[Path]]:
    """``--repeat N`` on several ranks: N runs, each sharded by the same assignment (same suite,
    same costs); stops after a run that ended early. Returns (exit code, run directories)."""
    codes, dirs = [], []
    for _ in range(repeat):
        outcome = run_distributed(suite, make_services, argv, info, out_root, resume)
        codes.append(outcome.exit_code)
        if outcome.run_dir is not None:
            dirs.append(outcome.run_dir)
        if outcome.exit_code != 0 and outcome.status != "complete":
            break
    return (max(codes, key=abs) if codes else 1), dirs


def _run_rank(runner: Runner, meta: dict, hung: list[dict]) -> RunOutcome:
    """The rank run, with ``extra.rank`` in its run.json from the start (a merge after a crash
    still knows which rank and GPU it was) and the run's hung providers (not run again)."""
    art = runner.sv.artifacts
    real_write_run = art.write_run

    class _Art:
        def __getattr__(self, name):
            return getattr(art, name)

        @staticmethod
        def write_run(run_dir, record):
            record.setdefault("extra", {})["rank"] = meta
            if hung:
                record["extra"].setdefault("hung", list(hung))
            return real_write_run(run_dir, record)

    runner.sv = replace(runner.sv, artifacts=_Art())
    return runner.run(out_root=None)


def _close_main(services, run_dir: Path, reports: list[dict], info: RankInfo) -> dict:
    art, ui = services.artifacts, services.ui
    entries = merge_rank_runs(art, run_dir, ui)
    run = art.read_json(run_dir / art.RUN_FILE)
    run.setdefault("world_size", info.world_size)
    run["telemetry"] = {**(run.get("telemetry") or {"before": None}), "after": services.telemetry()}
    run["ranks"] = entries
    extra = run.setdefault("extra", {})
    extra.setdefault("sessions", []).append({"world_size": info.world_size, "ranks": reports})
    if not (run.get("ceilings") or {}).get("copy_tbps"):
        first = next((e for e in entries if (e.get("ceilings") or {}).get("copy_tbps")), None)
        if first is not None:  # the run-level ceilings: the lowest rank's, with its file
            run["ceilings"] = first["ceilings"]
            cpath = run_dir / first["dir"] / art.CEILINGS_FILE
            if cpath.is_file():
                rec = {**art.read_json(cpath), "run_id": run["run_id"]}
                art.write_ceilings(run_dir, rec)
    reasons = [r["reason"] for r in reports if r.get("reason")]
    if reasons:
        run["notes"] = f"interrupted: {reasons[0].splitlines()[0]}"
    art.write_run(run_dir, run)
    from warpgauge.environment import host_gpus  # every GPU of the host, as the run ends

    final = art.finish_run(run_dir, "complete", host_gpus_after=host_gpus())
    own = [f"{c['case_id']} {p['name']}" for c in art.load_run(run_dir).cases
           for p in c.get("providers", [])
           if p.get("family") == "warpgauge" and p.get("status") == "failed_gate"]  # fmt: skip
    code = EXIT_OWN_GATE if own else 0
    if final["status"] != "complete":
        code = max((r["code"] for r in reports), key=abs, default=1) or 1
        ui.info(
            f"run {final['run_id']} is INTERRUPTED; to finish it: warpgauge bench --resume {run_dir}"
        )
    ui.info(f"{len(final['finished_cases'])} of {len(final['expected_cases'])} case(s) finished "
            f"on {info.world_size} rank(s); run directory {run_dir}")  # fmt: skip
    return {"code": code, "status": final["status"], "finished": final["finished_cases"],
            "missing": final["missing_cases"], "reason": reasons[0] if reasons else None}  # fmt: skip
