"""``warpgauge profile``: discover ncu's metrics, profile the selected targets one ncu process per
group (so a timeout loses one group, not the run), extract, check bytes, write and validate."""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from warpgauge import artifacts

from . import artifact as art
from . import ncu as ncu_mod
from .targets import all_targets, select


def _groups(targets, size: int) -> list[list]:
    """Consecutive runs of at most ``size`` targets (priority order kept): one ncu process each,
    so a timeout loses one group and the process start-up is paid once per group."""
    return [targets[i : i + size] for i in range(0, len(targets), size)]


def _gpu_meta() -> dict:
    from warpgauge.environment import provenance

    prov = provenance()
    return {"provenance": prov, "gpu": prov.get("gpu")}


def profile_cli(
    out: Path,
    patterns: list[str] | None = None,
    list_only: bool = False,
    ncu_path: str | None = None,
    group_size: int = 12,
    group_timeout_s: float = 240.0,
    keep_reports: bool = False,
    peers: bool = True,
    profile_id: str | None = None,
    precompile_workers: int = 0,
    full_sections: bool = False,
    rank: int | None = None,
    budget_s: float | None = None,
) -> int:
    from rich.console import Console

    con = Console(highlight=False)
    try:
        targets = select(all_targets(peers=peers), patterns)
        if rank is not None:
            targets = [t for t in targets if t.rank == rank]
    except ValueError as e:
        print(f"warpgauge profile: {e}", file=sys.stderr)
        return 2
    if list_only:
        for t in targets:
            con.print(f"{t.name:44s} {t.kernel_family:26s} model {t.model.total:>12d} B")
        return 0
    try:
        ncu = ncu_mod.find_ncu(ncu_path)
        ver = ncu_mod.version(ncu)
        query = ncu_mod.query_metrics(ncu)
    except ncu_mod.NcuError as e:
        print(f"warpgauge profile: {e}", file=sys.stderr)
        return 2
    disc = ncu_mod.discover(ncu_mod.parse_metric_names(query))
    pid = profile_id or time.strftime("%Y%m%d-%H%M%S-profile", time.gmtime())
    root = Path(out) / pid
    (root / "ncu").mkdir(parents=True, exist_ok=True)
    import gzip

    artifacts.atomic_write_bytes(
        root / "ncu" / "query-metrics.txt.gz", gzip.compress(query.encode(), mtime=0)
    )
    from warpgauge.environment import telemetry_snapshot

    before = telemetry_snapshot()
    gpu_meta = _gpu_meta()
    plans, rows_per_plan, commands, errors = [], [], [], []
    metrics = disc.metrics_arg()
    sections = ncu_mod.FULL_SECTIONS if full_sections else ncu_mod.SECTIONS
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")

    def write() -> dict:
        """The record so far, written with its manifest: a later kill loses one group only."""
        meta = {
            "ncu": {
                "path": ncu,
                "version": ver,
                "sections": list(sections),
                "metrics_requested": metrics,
                "fields_missing": list(disc.missing_fields),
                "commands": commands,
            },  # fmt: skip
            "policy": {"replay_mode": "kernel", "cache_control": "all", "clock_control": "none"},
            **gpu_meta,
            "telemetry": {"before": before, "after": telemetry_snapshot()},
            "errors": errors,
            "_rows_per_plan": rows_per_plan,
        }
        record = art.build_record(pid, targets, plans, [], disc, meta)
        artifacts.atomic_write_json(root / art.PROFILE_FILE, record)
        art.write_manifest(root, pid)
        return record

    deadline = None if budget_s is None else time.perf_counter() + budget_s
    if precompile_workers > 0:
        _precompile(targets, precompile_workers, env, min(group_timeout_s, (budget_s or 1e9) / 3),
                    con)  # fmt: skip
    for gi, group in enumerate(_groups(targets, group_size)):
        stem = f"g{gi:02d}"
        rep = root / "ncu" / f"{stem}.ncu-rep"
        plan_path = root / "ncu" / f"{stem}.plan.json"
        app = [sys.executable, "-m", "warpgauge.profile.runner", "--plan", str(plan_path),
               "--targets", ",".join(t.name for t in group)]  # fmt: skip
        cmd = ncu_mod.command(ncu, str(rep), app, metrics, sections)
        commands.append(
            [c if not c.startswith(str(root)) else os.path.relpath(c, root) for c in cmd]
        )
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left < MIN_GROUP_S:
            errors.append(f"{stem}..: not started, the {budget_s:.0f} s budget was spent")
            break
        limit = group_timeout_s if left is None else min(group_timeout_s, left)
        con.print(f"[profile] {stem}: {len(group)} target(s), limit {limit:.0f} s")
        t0 = time.perf_counter()
        rc, log = _run_group(cmd, env, limit)
        if rc is None:
            errors.append(f"{stem}: timed out after {limit:.0f} s (process group killed)")
        elif rc != 0:
            errors.append(f"{stem}: ncu exited {rc}")
        artifacts.atomic_write_bytes(root / "ncu" / f"{stem}.log", _text(log).encode())
        plan = {"targets": [], "marker": None}
        if plan_path.is_file():
            plan = artifacts.read_json(plan_path)
        rows: list = []
        if rep.is_file():
            try:
                csv_text = ncu_mod._run(ncu_mod.import_command(ncu, str(rep)), timeout=120)
                artifacts.atomic_write_bytes(root / "ncu" / f"{stem}.csv", csv_text.encode())
                rows = ncu_mod.parse_raw_csv(csv_text)
            except ncu_mod.NcuError as e:
                errors.append(f"{stem}: {e}")
            if not keep_reports:
                rep.unlink()
        plans.append(plan)
        rows_per_plan.append(rows)
        con.print(
            f"[profile] {stem}: {len(rows)} kernel row(s) in {time.perf_counter() - t0:.1f} s"
        )
        write()
    record = write()
    problems = art.validate_profile(root)
    print_summary(con, record)
    con.print(f"[profile] wrote {root}")
    for e in errors:
        con.print(f"[profile] problem: {e}")
    if problems:
        con.print(f"INVALID: {len(problems)} problem(s): " + "; ".join(problems[:5]))
        return 1
    return 0 if not errors else 1


MIN_GROUP_S = 8.0  # a group with less time left than this is not started


def _kill_group(p: subprocess.Popen) -> None:
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(p.pid, signal.SIGKILL)


def _run_group(cmd: list[str], env: dict, limit_s: float) -> tuple[int | None, str]:
    """Run one ncu process in its own session; on timeout, and when this process is itself told
    to stop (SIGTERM, SIGINT), kill that whole process group (ncu and the profiled Python process
    under it), so nothing is left using the GPU. Returns (rc or None on timeout, output)."""
    import signal

    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)  # fmt: skip

    def stop(signum, frame):
        _kill_group(p)
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        out, _ = p.communicate(timeout=limit_s)
        return p.returncode, out or ""
    except subprocess.TimeoutExpired:
        _kill_group(p)
        out, _ = p.communicate()
        return None, f"timed out after {limit_s:.0f} s\n{out or ''}"
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _precompile(targets, workers: int, env: dict, timeout_s: float, con) -> None:
    """Build every target once in ``workers`` parallel processes outside ncu: Triton's on-disk
    cache then holds the kernels, and the profiled processes skip compilation."""
    t0 = time.perf_counter()
    chunks = [targets[i::workers] for i in range(workers) if targets[i::workers]]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "warpgauge.profile.runner",
                "--warm-only",
                "--targets",
                ",".join(t.name for t in chunk),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for chunk in chunks
    ]
    for p in procs:
        try:
            p.wait(timeout=max(1.0, timeout_s - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    con.print(
        f"[profile] precompiled in {len(procs)} process(es): {time.perf_counter() - t0:.1f} s"
    )


def _text(s) -> str:
    return s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s)


def print_summary(con, record: dict) -> None:
    from rich.table import Table

    t = Table(title=f"profile {record['profile_id']} (ncu {record['ncu']['version']})")
    for col in ("target", "kernels", "DRAM read MB", "model MB", "read gap", "write gap",
                "DRAM %", "occ %", "regs", "SM GHz", "top stall", "flag"):  # fmt: skip
        t.add_column(col)
    for e in record["targets"]:
        if e["status"] != "ok":
            t.add_row(e["name"], "-", "-", "-", "-", "-", "-", "-", "-", "-", e["status"], "")
            continue
        k0 = max(e["kernels"], key=lambda k: k["metrics"].get("duration_ns") or 0)
        m = k0["metrics"]
        g = e["gap_pct"]
        top = k0["stalls"][0] if k0["stalls"] else None
        t.add_row(
            e["name"], str(len(e["kernels"])), _mb(e["measured_bytes"]["read"]),
            _mb(e["model_bytes"]["read"]), _pct(g["read"]), _pct(g["write"]),
            _num(m.get("dram_throughput_pct")), _num(m.get("achieved_occupancy_pct")),
            _num(m.get("registers_per_thread"), 0),
            _num((m.get("sm_clock_hz") or 0) / 1e9 or None, 2),
            f"{top['reason']} {top['share_pct']:.0f}%" if top and top["share_pct"] else "-",
            "GAP" if e["flag"]["over_threshold"] else "",
        )  # fmt: skip
    con.print(t)


def _mb(v):
    return "-" if v is None else f"{v / 1e6:.2f}"


def _pct(v):
    return "-" if v is None else f"{v:+.2f}%"


def _num(v, nd=1):
    return "-" if v is None else f"{v:.{nd}f}"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="warpgauge profile", description=__doc__)
    ap.add_argument("--targets", action="append", help="target name substrings (comma-separated)")
    ap.add_argument("--out", type=Path, default=Path("results"), help="receives <profile-id>/")
    ap.add_argument("--list", action="store_true", help="list the targets and exit")
    ap.add_argument("--ncu", default=None, help="path of ncu (default: $NCU, then PATH)")
    ap.add_argument("--group-timeout", type=float, default=240.0, help="seconds per ncu process")
    ap.add_argument("--group-size", type=int, default=12, help="targets per ncu process")
    ap.add_argument("--profile-id", default=None, help="directory name (default: a timestamp)")
    ap.add_argument("--precompile-workers", type=int, default=0, help="compile first, in N procs")
    ap.add_argument("--no-peers", action="store_true", help="warpgauge kernels only")
    ap.add_argument("--full-sections", action="store_true",
                    help="also collect ncu's standard sections (many more replay passes)")  # fmt: skip
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds for all groups: no group starts after it is spent")  # fmt: skip
    ap.add_argument("--rank", type=int, default=None,
                    help="only each family's first (0) or second (1) shape")  # fmt: skip
    ap.add_argument("--validate", type=Path, metavar="DIR", help="check a profile directory")
    a = ap.parse_args(argv)
    if a.validate is not None:
        problems = art.validate_profile(a.validate)
        for p in problems:
            print(f"  - {p}")
        print(f"{'INVALID' if problems else 'OK'}: {a.validate}: {len(problems)} problem(s)")
        return 1 if problems else 0
    pats = [p for v in (a.targets or []) for p in v.replace(",", " ").split()] or None
    return profile_cli(a.out, pats, a.list, a.ncu, a.group_size, a.group_timeout,
                       peers=not a.no_peers, profile_id=a.profile_id,
                       precompile_workers=a.precompile_workers,
                       full_sections=a.full_sections, rank=a.rank,
                       budget_s=a.budget)  # fmt: skip
