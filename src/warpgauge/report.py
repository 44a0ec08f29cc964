"""Render a run directory into a report a person can read in a minute, from the artifacts alone.

``render_report(run_dir, out_dir=None)`` writes ``report.md``, ``report.html`` (self-contained:
figures embedded as base64 PNG data URIs) and one ``<op>.png`` per operator into ``out_dir``
(default ``<run_dir>/report``). It needs the JSON files and matplotlib (Agg, no display), not a
GPU, torch or the kernels, so a run can be re-rendered anywhere. Only the default location is
inside the run: there the manifest entries of ``report/`` are refreshed (the data files'
entries are never touched, so corrupted data still fails ``warpgauge validate``); any other
``out_dir`` leaves the run directory byte for byte as it was.

What the report shows: the run's facts and validation verdict; per operator the verdict
(geometric-mean speedup against the best PyTorch provider, wins / ties / losses, the worst case,
each peer's geometric mean); then per operator the speedup figure (``plots.speedup_figure``),
the speedup table (losses coloured), host times; and every provider that was absent, failed
its gate or raised, with its reason on one line and the full text folded away.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import report_tables
from .artifacts import (
    MANIFEST_FILE,
    REPORT_DIR,
    SCHEMA_SKIPPED,
    ArtifactError,
    Run,
    atomic_write_bytes,
    excluded_from_best,
    load_run,
    read_json,
    update_manifest,
    validate_run,
)
from .environment import other_gpu_work
from .htmldoc import Cell, to_html, to_markdown
from .plots import provider_colors, speedup_figure
from .report_tables import (
    OVERLAP_MARK,
    host_table,
    issues_table,
    op_verdicts,
    speedup_table,
    verdict_table,
    warm_table,
)

__all__ = [
    "ReportError", "build_blocks", "host_table", "issues_table", "op_verdicts", "ops_of",
    "render_report", "report_cli", "report_tables", "speedup_table", "verdict_table", "warm_table",
]  # fmt: skip


def ops_of(run: Run) -> list[str]:
    """Operators in config order, then any other operator a case file holds."""
    ops = []
    for op in run.run.get("config", {}).get("ops", []):
        if isinstance(op, str) and op not in ops:
            ops.append(op)
    ops = [op for op in ops if any(c["op"] == op for c in run.cases)]
    for c in run.cases:
        if c["op"] not in ops:
            ops.append(c["op"])
    return ops


# ------------------------------------------------------------------------------------ facts


def gib(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**30:.1f} GiB"


def _run_facts(run: Run) -> list[list[str]]:
    r = run.run
    prov = r.get("provenance", {})
    gpu = prov.get("gpu")
    ceil = r.get("ceilings", {})
    expected = r.get("expected_cases", [])
    have = {c["case_id"] for c in run.cases}
    missing_files = [c for c in expected if c not in have]
    status = r.get("status", "?")
    if missing_files:
        status += f" ({len(missing_files)} of {len(expected)} expected cases missing)"
    else:
        status += f" ({len(expected)} of {len(expected)} expected cases present)"
    gpu_text = "none recorded"
    if gpu:
        l2 = f"{gpu['l2_bytes'] / 2**20:.0f} MiB L2" if gpu.get("l2_bytes") else "L2 unknown"
        gpu_text = (
            f"{gpu['name']} ({gpu['sm_count']} SMs, {l2}, {gib(gpu.get('memory_bytes'))}, "
            f"compute capability {gpu['capability']})"
        )
    pk = dict(prov.get("packages", {}))
    own = pk.pop("warpgauge", None)
    packages = f"warpgauge {own or 'version not recorded (runs before 0.2 recorded null)'}; "
    packages += ", ".join(f"{k} {v}" for k, v in pk.items() if v) or "—"
    absent = ", ".join(k for k, v in pk.items() if not v)
    if absent:
        packages += f" (not installed: {absent})"
    commit = prov.get("git_commit") or "unknown"
    if prov.get("git_claimed_commit"):  # a copy whose .git is older than its files
        commit += (
            f" (the copy's git HEAD, its changes under 'dirty'); claimed: "
            f"{prov['git_claimed_commit']} (WARPGAUGE_GIT_COMMIT, not verified by git)"
        )
    dirty = {True: "yes: uncommitted changes", False: "no", None: "unknown"}[prov.get("git_dirty")]
    if prov.get("git_dirty_files"):
        dirty += " (" + ", ".join(prov["git_dirty_files"][:5]) + ")"
    if prov.get("git_source") == "env":
        dirty += "; commit and flag from WARPGAUGE_GIT_* (a copy of the tree without .git)"
    copy = ceil.get("copy_tbps")
    copy_text = "not measured"
    if copy:
        copy_text = (
            f"{copy:.2f} TB/s (device-to-device copy of a {gib(ceil.get('copy_bytes'))} buffer, "
            "bytes read + written)"
        )
    mm = ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in ceil.get("mm_tflops", {}).items() if v)
    cfg = r.get("config", {})
    facts = [
        ["run", r.get("run_id", "?")],
        ["status", status],
        ["created / finished", f"{r.get('created_at', '?')} / {r.get('finished_at') or '—'}"],
        ["GPU", gpu_text],
        ["driver / CUDA", f"{prov.get('driver') or '—'} / {prov.get('cuda') or '—'}"],
        ["commit", commit],
        ["dirty", dirty],
        ["packages", packages],
        [
            "suite",
            f"{cfg.get('name', '?')} (quick: {cfg.get('quick')}, seed: {cfg.get('seed')}, "
            f"lanes: {', '.join(cfg.get('lanes', []))})",
        ],
        ["command", " ".join(r.get("command", [])) or "—"],
        ["copy ceiling (measured)", copy_text],
        ["matmul ceiling (measured)", mm or "not measured"],
    ]
    if missing_files:
        shown = ", ".join(missing_files[:12])
        more = f", ... and {len(missing_files) - 12} more" if len(missing_files) > 12 else ""
        facts.append(["missing cases", shown + more])
    if r.get("ranks"):
        facts.append(["GPUs (multi-GPU run)", _ranks_text(run)])
    state = _telemetry_summary(run)
    if state:
        facts.append(["GPU state during cases", state])
    facts.append(["other work on the host's GPUs", _host_work(prov)])
    return facts


def _ranks_text(run: Run) -> str:
    """Which GPU ran how many cases (each case file names its rank in ``extra.rank``); every
    ratio is formed inside one case, so on one GPU."""
    parts = []
    for e in run.run.get("ranks", []):
        gpu = e.get("gpu") or {}
        copy = (e.get("ceilings") or {}).get("copy_tbps")
        parts.append(
            f"rank {e.get('rank')} (session {e.get('session')}, local {e.get('local_rank')}): "
            f"{gpu.get('name', 'unknown GPU')} {gpu.get('uuid') or ''}".rstrip()
            + f", {len(e.get('cases', []))} case(s)"
            + (f", copy ceiling {copy:.2f} TB/s" if copy else "")
        )
    return f"world size {run.run.get('world_size')}; " + "; ".join(parts)


def _host_work(prov: dict) -> str:
    pair = prov.get("host_gpus")
    if not pair:
        return "not recorded (runs before 0.2 did not record it)"
    own = (prov.get("gpu") or {}).get("uuid")
    parts = []
    for when in ("before", "after"):
        snap = pair.get(when)
        if snap is None:
            parts.append(f"{when}: not recorded")
        elif snap.get("error") and not snap.get("devices"):
            parts.append(f"{when}: unknown ({snap['error']})")
        else:
            lines = other_gpu_work(snap, own)
            n = len(snap.get("devices") or [])
            parts.append(f"{when}: " + ("; ".join(lines) if lines else f"none seen on {n} GPU(s)"))
    return " | ".join(parts)


def _telemetry_summary(run: Run) -> str | None:
    snaps = [
        s for c in run.cases for s in (c["telemetry"]["before"], c["telemetry"].get("after")) if s
    ]
    clocks = [s["sm_clock_mhz"] for s in snaps if s.get("sm_clock_mhz") is not None]
    if not clocks:
        return "not recorded (NVML unavailable)" if snaps else None
    temps = [s["temp_c"] for s in snaps if s.get("temp_c") is not None]
    power = [s["power_w"] for s in snaps if s.get("power_w") is not None]
    reasons = sorted(
        {r for s in snaps for r in (s.get("throttle_reasons") or []) if r != "gpu_idle"}
    )
    parts = [f"SM clock {min(clocks)}–{max(clocks)} MHz (read, never set)"]
    if temps:
        parts.append(f"temperature up to {max(temps):.0f} °C")
    if power:
        parts.append(f"power up to {max(power):.0f} W")
    parts.append("clock limits seen: " + (", ".join(reasons) if reasons else "none besides idle"))
    return "; ".join(parts)


READING_NOTES = [
    "Speeds are medians of device time: CUDA-graph replay of the call, so launch overhead is "
    "amortised away. Host time (per-call CUDA events around each launch, host + device) is "
    "listed separately; it is what a single eager call costs when the launch dominates.",
    "Cold lane: L2 is flushed outside the timed interval before each sample; this is the "
    "headline. Warm lane: inputs stay in L2 between calls; it is a cache diagnostic, not a "
    "claim about model workloads.",
    "TB/s counts requested bytes from each operator's analytical model (each input read once, "
    "each output written once), not measured DRAM traffic. TFLOP/s counts 2·M·N·K.",
    f"Ratios are other / warpgauge (> 1: warpgauge is faster). {OVERLAP_MARK} marks a ratio "
    "whose p10–p90 intervals overlap (a tie: within this run's spread); in the HTML page wins "
    "are green, ties grey and losses red. A geometric mean is taken over the cold-lane cases.",
    "Figures: speedup of warpgauge against the best PyTorch provider and each peer, one "
    "category per shape in suite order, log2 axis, bars from the p10–p90 intervals. "
    "Launch-bound shapes (the requested work would take under 5 µs at the run's measured "
    "ceiling) also get a latency panel: device time filled, host + device per eager call hollow.",
    "Ratios inside this run are the claim; absolute times move between runs and machines. "
    "See docs/limitations-and-claims.md.",
]


def roofline_blocks(summary: dict | None, image: Path | None) -> list[tuple]:
    """The roofline section: the figure, the run's measured roofs and each operator's best
    warpgauge point (``warpgauge roofline RUN`` writes the same data as JSON)."""
    b: list[tuple] = [("h2", "Roofline (cold lane)")]
    if summary is None:
        b.append(("p", "No roofline: the run has no measured ceilings or no cold-lane points."))
        return b
    if image is not None:
        b.append(("img", image, "achieved throughput against arithmetic intensity, per operator"))
    roofs = summary["roofs"]
    mem = roofs.get("memory")
    parts = [f"memory {mem['median']:.3g} TB/s"] if mem else []
    parts += [
        f"{dt} tensor cores {x['median']:.4g} TFLOP/s" for dt, x in roofs.get("tensor", {}).items()
    ]
    b.append(("p", "Roofs measured in this run: " + (", ".join(parts) or "none") + ". Intensity "
                   "counts requested bytes (analytical), so a point shows how close warpgauge "
                   "comes to the bound, not DRAM traffic; docs/roofline.md."))  # fmt: skip
    rows = []
    for op, e in summary["operators"].items():
        best = e.get("best_warpgauge")
        if best is None:
            rows.append([op, ", ".join(e["roofs_applied"]), "-", "-", "-", "-"])
            continue
        unit = "Tops/s" if e["work_unit"] == "scalar op" else "TFLOP/s"
        rows.append([
            op, ", ".join(e["roofs_applied"]), f"{best['shape_label']} {best['dtype']}",
            Cell(f"{best['intensity']:.3g}", "num"),
            Cell(f"{best['achieved_tflops']:.3g} {unit}", "num"),
            Cell(f"{100 * best['fraction_of_binding']:.1f}% of {best['binding_roof']}", "num"),
        ])  # fmt: skip
    b.append(("table", ["operator", "roofs that apply", "best warpgauge point", "intensity",
                        "achieved", "fraction of the binding roof"], rows))  # fmt: skip
    return b


def _roofline(run_dir: Path, out: Path) -> tuple[dict | None, Path | None]:
    """The roofline summary and figure (``out/roofline.png``); (None, None) when the run has no
    roofs or points to draw (a calibration-less or fully failed run)."""
    from . import roofline

    try:
        summary = roofline.summary(run_dir)
    except (OSError, ValueError, KeyError, TypeError, LookupError):
        return None, None
    if not any(e.get("points") for e in summary.get("operators", {}).values()):
        return None, None
    png = out / "roofline.png"
    try:
        roofline.plot(run_dir, png)
    except (OSError, ValueError, KeyError, TypeError, LookupError):
        return summary, None
    return summary, (png if png.exists() else None)


def build_blocks(
    run: Run,
    problems: list[str],
    images: dict[str, Path],
    roofline: tuple[dict | None, Path | None] | None = None,
) -> list[tuple]:
    """The report as a list of blocks (see ``htmldoc``)."""
    b: list[tuple] = [("h1", f"warpgauge run {run.run_id}")]
    if run.run.get("notes"):
        b.append(("p", f"Note: {run.run['notes']}"))
    if problems:
        b.append(("p", f"WARNING: validation found {len(problems)} problem(s); the numbers "
                       "below may not be what was measured or may be incomplete:"))  # fmt: skip
        shown = problems[:25] + (
            [f"... and {len(problems) - 25} more"] if len(problems) > 25 else []
        )
        b.append(("ul", shown))
    else:
        b.append(("p", "Validation: every file matches its schema and the manifest's SHA-256; "
                       "every case the run's config asks for is present."))  # fmt: skip
    ops = ops_of(run)
    headers, rows = verdict_table(run, ops)
    b.append(("h2", "Verdict per operator (cold L2, device time)"))
    b.append(("p", "Speedup = other provider's median / warpgauge's (> 1: warpgauge is faster); "
                   f"a tie ({OVERLAP_MARK}) is a ratio whose p10–p90 intervals overlap."))  # fmt: skip
    b.append(("table", headers, rows))
    b += goal_blocks(run)
    b.append(("h2", "Run"))
    facts = [[k, Cell(str(v), "text")] for k, v in _run_facts(run)]
    b.append(("table", ["what", "value"], facts))
    b.append(("h2", "How to read this report"))
    b.append(("ul", READING_NOTES))
    for op in ops:
        b.append(("h2", op))
        if op in images:
            b.append(("img", images[op], f"{op}: speedup of warpgauge per shape, per provider"))
        headers, rows, lane = speedup_table(run, op)
        if rows:
            b.append(("p", f"Speedup of warpgauge, {lane} lane (device time):"))
            b.append(("table", headers, rows))
        left_out = _excluded(run, op)
        if left_out:
            b.append(("p", "Not counted as the best PyTorch provider (ratios still shown):"))
            b.append(("ul", left_out))
        headers, rows = warm_table(run, op)
        if rows:
            b.append(("p", "Warm lane (inputs stay in L2: a cache diagnostic, not the headline):"))
            b.append(("table", headers, rows))
        headers, rows, lane = host_table(run, op)
        if rows:
            b.append(
                ("p", f"Host + device time per call, median µs, {lane} lane (per-call events):")
            )
            b.append(("table", headers, rows))
    if roofline is not None:
        b += roofline_blocks(*roofline)
    b += above_ceiling_blocks(run)
    headers, rows = issues_table(run)
    b.append(("h2", "Providers not timed"))
    if rows:
        b.append(("p", "Absent means not installed or not applicable here: absent, not slow. "
                       "Failed gate means its output disagreed with the FP64 reference, so it "
                       "was not timed. Open a reason for its full text."))  # fmt: skip
        b.append(("table", headers, rows))
    else:
        b.append(("p", "Every provider passed its gate and was timed in every case."))
    return b


GOALS_SHOWN = 30


def goal_blocks(run: Run) -> list[tuple]:
    """The open issues' goals checked against this run (``goals.check_run``): how many checks
    failed, and the first ``GOALS_SHOWN`` of them."""
    from .goals import check_run, describe_value

    res = check_run(run)
    ms = res["misses"]
    b: list[tuple] = [("h2", "Goal checks")]
    if not ms:
        b.append(("p", f"Every goal check passed ({sum(res['checked'].values())} comparisons)."))
        return b
    cases = len({m["case_id"] for m in ms})
    b.append(("p", f"{len(ms)} failed checks in {cases} of {res['cases']} cases: ratio floors "
                   "(the 3% band against every timed provider, 1.00x in training steps, gemm "
                   "0.95x cuBLAS, INT4 1.2x tinygemm / dense) and copy-ceiling goals; "
                   f"`warpgauge goals {run.run_dir}` lists every one (checks: `goals.py`)."))  # fmt: skip
    rows = [[m["case_id"], m["check"], m["provider"], Cell(describe_value(m), "loss")]
            for m in ms[:GOALS_SHOWN]]  # fmt: skip
    b.append(("table", ["case", "check", "against", "value"], rows))
    if len(ms) > GOALS_SHOWN:
        b.append(("p", f"... and {len(ms) - GOALS_SHOWN} more."))
    return b


def above_ceiling_blocks(run: Run) -> list[tuple]:
    """A section listing every provider whose rate the runner flagged above the run's own
    measured ceiling (``extra.above_ceiling``, ``bench/integrity.above_ceilings``); none if none."""
    rows = []
    for c in run.cases:
        for pr in c["providers"]:
            flag = (pr.get("extra") or {}).get("above_ceiling")
            for f in (flag or {}).get("flags", []):
                unit = "TB/s" if f["metric"] == "tbps" else "TFLOP/s"
                top = f.get("ceiling_max")
                rows.append([c["case_id"], pr["label"], f"{f['rate']:.3g} {unit}",
                             f"{f['ceiling']:.3g}", "-" if top is None else f"{top:.3g}",
                             "yes" if f.get("within_range") else "no"])  # fmt: skip
    if not rows:
        return []
    return [
        ("h2", "Rates above the run's measured ceilings"),
        (
            "p",
            f"{len(rows)} provider rate(s) are above the ceiling this run measured (the median "
            "of its confirmation runs, `ceilings.json`). Within the confirmation range means "
            "the rate is below the fastest confirmation run: the ceiling's runs disagreed "
            "(clocks or a power cap changed between them), not the provider's timing. Above "
            "the whole range, check the work model and the timing; in the warm lane inputs "
            "may come from L2, which the DRAM copy ceiling does not cover.",
        ),  # fmt: skip
        (
            "table",
            [
                "case",
                "provider",
                "rate",
                "ceiling (median)",
                "fastest confirmation",
                "within range",
            ],
            rows,
        ),  # fmt: skip
    ]


def _excluded(run: Run, op: str) -> list[str]:
    """'label: reason' for each provider of ``op`` the runner kept out of best PyTorch."""
    seen: dict[str, str] = {}
    for c in run.cases:
        if c["op"] == op:
            for pr in c["providers"]:
                why = excluded_from_best(pr)
                if why:
                    seen.setdefault(pr["label"], why)
    return [f"{label}: {why}" for label, why in seen.items()]


# ------------------------------------------------------------------------------------ entry points


class ReportError(ValueError):
    """The report cannot be written where it was asked to go."""


def _check_out(run_dir: Path, out: Path) -> None:
    run_root, out_abs = run_dir.resolve(), out.resolve()
    inside = run_root == out_abs or run_root in out_abs.parents
    if inside and out_abs != run_root / REPORT_DIR:
        raise ReportError(
            f"--out {out} is inside the run directory, where files outside the manifest make "
            f"the run invalid; pick a directory outside {run_dir} (or omit --out for "
            f"{run_dir / REPORT_DIR})"
        )


def render_report(
    run_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None
) -> list[Path]:
    """Render ``run_dir`` into ``out_dir`` (default ``<run_dir>/report``): report.md, report.html
    and one PNG per operator. Returns the paths written (md, html, then PNGs).

    Works from the JSON artifacts alone; renders even an invalid or interrupted run, with the
    validation problems listed at the top. Into the default location it refreshes the
    manifest entries of the report files (and drops those of figures it no longer makes);
    anywhere else (outside the run: ``ReportError`` otherwise) the run is left untouched.
    """
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    problems = validate_run(run_dir, include_report=False)
    out = Path(out_dir) if out_dir is not None else run_dir / REPORT_DIR
    _check_out(run_dir, out)
    out.mkdir(parents=True, exist_ok=True)
    colors = provider_colors(run)
    images = {}
    for op in ops_of(run):
        png = speedup_figure(run, op, colors)
        if png is not None:
            images[op] = atomic_write_bytes(out / f"{op}.png", png)
    roof = _roofline(run_dir, out)
    blocks = build_blocks(run, problems, images, roof)
    md = atomic_write_bytes(out / "report.md", to_markdown(blocks, out).encode("utf-8"))
    page = atomic_write_bytes(out / "report.html", to_html(blocks).encode("utf-8"))
    written = [md, page, *images.values()] + ([roof[1]] if roof[1] is not None else [])
    if out.resolve() == (run_dir / REPORT_DIR).resolve():
        _refresh_manifest(run_dir, out, written)
    return written


def _refresh_manifest(run_dir: Path, out: Path, written: list[Path]) -> None:
    if not (run_dir / MANIFEST_FILE).exists():
        return
    keep = {p.resolve() for p in written}
    for old in out.glob("*.png"):  # figures of operators no longer in the run
        if old.resolve() not in keep:
            old.unlink()
    run_root = run_dir.resolve()
    rel = [p.resolve().relative_to(run_root).as_posix() for p in written]
    prefix = REPORT_DIR + "/"
    try:
        listed = read_json(run_dir / MANIFEST_FILE).get("files", {})
        stale = [r for r in listed if r.startswith(prefix) and not (run_root / r).exists()]
        update_manifest(run_dir, rel, remove=stale)
    except (ArtifactError, ValueError, AttributeError):
        pass  # an unreadable or invalid manifest stays as it is; validate reports it


def report_cli(run_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None) -> int:
    """``warpgauge report RUN [--out DIR]``: render and print the paths written.

    Exit code 0; 1 when the run fails validation (the report is still written, with the
    problems at its top, and stderr says so) or cannot be read or rendered (stderr says why)."""
    try:
        paths = render_report(run_dir, out_dir)
    except ReportError as e:
        print(f"warpgauge report: {e}", file=sys.stderr)
        return 1
    except ImportError as e:
        print(
            f"warpgauge report: the figures need matplotlib ({e}): pip install matplotlib "
            "(or pip install 'warpgauge[bench]')",
            file=sys.stderr,
        )
        return 1
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        print(
            f"warpgauge report: cannot render {run_dir}: {type(e).__name__}: {e}", file=sys.stderr
        )
        return 1
    for p in paths:
        print(p)
    problems = [p for p in validate_run(run_dir, include_report=False) if p != SCHEMA_SKIPPED]
    if problems:  # a machine without jsonschema: the banner says so, the exit code does not
        print(
            f"warpgauge report: {run_dir} fails validation ({len(problems)} problem(s), listed "
            f"at the top of the report; run `warpgauge validate {run_dir}`)",
            file=sys.stderr,
        )
        return 1
    return 0
