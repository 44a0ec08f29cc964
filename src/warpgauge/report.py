"""Render a run directory into a report a person can read in a minute, from the artifacts alone.

``render_report(run_dir)`` writes ``report/report.md``, ``report/report.html`` (self-contained:
the figures are embedded as base64 PNG data URIs) and one ``report/<op>.png`` per operator. It
needs the JSON files and matplotlib (Agg, no display), not a GPU, torch or the kernels, so a run
can be re-rendered anywhere. When the report lands inside the run directory the manifest entries
of ``report/`` are refreshed; the entries of the data files are never touched, so corrupted data
still fails ``warpgauge validate``.

What the report shows, per operator: one figure (TB/s of requested bytes against shape for row
operators and INT4, TFLOP/s for gemm; cold and warm lanes side by side; the run's measured
ceiling as a dashed line), a speedup table (cold lane), host times (cold lane). Then every
provider that was absent, failed the gate or raised, with its reason. All speeds come from the
median of device time (CUDA-graph replay); host time (per-call events) is shown on its own.
"""

from __future__ import annotations

import base64
import html
import os
from collections import defaultdict
from pathlib import Path

from .artifacts import (
    MANIFEST_FILE,
    REPORT_DIR,
    ArtifactError,
    Run,
    atomic_write_bytes,
    best_pytorch,
    load_run,
    read_json,
    update_manifest,
    validate_run,
)

FAMILY_RANK = {"warpgauge": 0, "pytorch": 1, "compile": 2, "peer": 3}
FAMILY_STYLE = {  # marker, line style
    "warpgauge": ("o", "-"),
    "pytorch": ("s", "-"),
    "compile": ("^", "--"),
    "peer": ("D", ":"),
}
WARPGAUGE_COLOR = "#d62728"
PALETTE = [
    "#1f77b4",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
    "#393b79",
    "#637939",
    "#8c6d31",
    "#843c39",
    "#7b4173",
]
STATUS_TEXT = {"absent": "absent", "failed_gate": "failed gate", "error": "error"}
OVERLAP_MARK = "†"
LANE_ORDER = ("cold", "warm")


def is_flop_bound(op: str) -> bool:
    """Operators reported in TFLOP/s (gemm); every other operator in TB/s of requested bytes."""
    return op == "gemm" or op.startswith("gemm_")


# ------------------------------------------------------------------------------------ helpers


def _fmt_us(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _fmt_rate(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x:.0f}" if x >= 100 else f"{x:.2f}"


def _fmt_ratio(r: float) -> str:
    return f"{r:.2f}×"


def _ok(pr: dict | None) -> bool:
    return pr is not None and pr["status"] == "ok" and pr.get("device_time") is not None


def _overlap(a: dict, b: dict) -> bool:
    return a["p10_us"] <= b["p90_us"] and b["p10_us"] <= a["p90_us"]


def _amount(case: dict) -> int:
    return case["work"]["flops"] if is_flop_bound(case["op"]) else case["work"]["bytes"]


def _rate(case: dict, us: float) -> float | None:
    """TB/s or TFLOP/s for a time in microseconds (amount / us / 1e6)."""
    amount = _amount(case)
    return amount / us / 1e6 if amount > 0 and us > 0 else None


def _by_name(case: dict) -> dict[str, dict]:
    return {pr["name"]: pr for pr in case["providers"]}


def _providers(cases: list[dict]) -> list[tuple[str, str, str]]:
    """(name, label, family) of every provider in ``cases``, warpgauge first, then by family."""
    seen: dict[str, tuple[str, str, str]] = {}
    for c in cases:
        for pr in c["providers"]:
            seen.setdefault(pr["name"], (pr["name"], pr["label"], pr["family"]))
    return sorted(seen.values(), key=lambda p: (FAMILY_RANK.get(p[2], 9), p[0]))


def provider_colors(run: Run) -> dict[str, str]:
    """One color per provider name for the whole report (warpgauge in red)."""
    colors, i = {}, 0
    for name, _, family in _providers(run.cases):
        if family == "warpgauge" and WARPGAUGE_COLOR not in colors.values():
            colors[name] = WARPGAUGE_COLOR
        else:
            colors[name] = PALETTE[i % len(PALETTE)]
            i += 1
    return colors


def _ops(run: Run) -> list[str]:
    ops = []
    for op in run.run.get("config", {}).get("ops", []):
        if isinstance(op, str) and op not in ops:
            ops.append(op)
    ops = [op for op in ops if any(c["op"] == op for c in run.cases)]
    for c in run.cases:
        if c["op"] not in ops:
            ops.append(c["op"])
    return ops


def _ceiling(run: Run, op: str, dtype: str) -> tuple[float | None, str]:
    ceil = run.run.get("ceilings", {})
    if is_flop_bound(op):
        v = ceil.get("mm_tflops", {}).get(dtype)
        return v, f"measured {dtype} matmul ceiling"
    return ceil.get("copy_tbps"), "measured copy ceiling"


# ------------------------------------------------------------------------------------ figure


def plot_op(run: Run, op: str, colors: dict[str, str]) -> bytes:
    """One PNG (returned as bytes) for ``op``: a row per dtype, a column per lane, a line per
    provider (status ok), error bars from the p90 and p10 device times, the measured ceiling
    dashed. x: requested bytes (FLOPs for gemm) per call on a log scale, labelled by shape."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    cases = [c for c in run.cases if c["op"] == op]
    dtypes = sorted({c["dtype"] for c in cases})
    lanes = [lane for lane in LANE_ORDER if any(c["lane"] == lane for c in cases)]
    flops = is_flop_bound(op)
    unit = "TFLOP/s" if flops else "TB/s (requested bytes)"
    fig = Figure(figsize=(5.0 * len(lanes) + 2.6, 3.8 * len(dtypes)), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(dtypes), len(lanes), squeeze=False, sharey="row")
    handles: dict[str, object] = {}
    for i, dtype in enumerate(dtypes):
        top = 0.0  # highest point of the row (shared y axis), ceiling included
        for j, lane in enumerate(lanes):
            ax = axes[i][j]
            cs = sorted(
                (c for c in cases if c["dtype"] == dtype and c["lane"] == lane), key=_amount
            )
            for name, label, family in _providers(cs):
                xs, ys, lo, hi = [], [], [], []
                for c in cs:
                    pr = _by_name(c).get(name)
                    if not _ok(pr) or _amount(c) <= 0:
                        continue
                    dt = pr["device_time"]
                    y = _rate(c, dt["median_us"])
                    xs.append(_amount(c))
                    ys.append(y)
                    lo.append(y - _rate(c, max(dt["p90_us"], dt["median_us"])))
                    hi.append(_rate(c, max(min(dt["p10_us"], dt["median_us"]), 1e-9)) - y)
                if not xs:
                    continue
                marker, style = FAMILY_STYLE.get(family, ("x", "-"))
                h = ax.errorbar(
                    xs,
                    ys,
                    yerr=[lo, hi],
                    color=colors[name],
                    marker=marker,
                    linestyle=style,
                    linewidth=2.2 if family == "warpgauge" else 1.3,
                    markersize=5,
                    capsize=2,
                    label=label,
                )
                handles.setdefault(label, h)
                top = max(top, *(y + e for y, e in zip(ys, hi)))
            ceiling, what = _ceiling(run, op, dtype)
            if ceiling:
                top = max(top, ceiling)
                h = ax.axhline(ceiling, color="black", linestyle="--", linewidth=1)
                handles.setdefault(f"{what} ({_fmt_rate(ceiling)} {unit.split()[0]})", h)
            ticks = [_amount(c) for c in cs if _amount(c) > 0]
            if ticks:
                ax.set_xscale("log")
                ax.xaxis.set_minor_locator(NullLocator())
                ax.set_xticks(ticks)
                ax.set_xticklabels(
                    [c["shape_label"] for c in cs if _amount(c) > 0],
                    rotation=30,
                    ha="right",
                    fontsize=8,
                )
            title = f"{op} {dtype}, {lane} L2"
            ax.set_title(title + (" (cache diagnostic)" if lane == "warm" else ""), fontsize=10)
            ax.set_xlabel(
                ("FLOPs" if flops else "requested bytes") + " per call (log); shape", fontsize=8
            )
            if j == 0:
                ax.set_ylabel(unit, fontsize=9)
            ax.grid(True, alpha=0.3)
        axes[i][0].set_ylim(0, 1.08 * top if top > 0 else 1.0)
    if handles:
        fig.legend(
            list(handles.values()),
            list(handles.keys()),
            loc="outside right center",
            fontsize=8,
            frameon=False,
        )
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


# ------------------------------------------------------------------------------------ tables


def _headline(cases: list[dict]) -> str | None:
    for name, _, family in _providers(cases):
        if family == "warpgauge":
            return name
    return None


def _table_lane(cases: list[dict]) -> str | None:
    lanes = {c["lane"] for c in cases}
    return next((lane for lane in LANE_ORDER if lane in lanes), None)


def speedup_table(run: Run, op: str) -> tuple[list[str], list[list[str]], str | None]:
    """Headers and rows: warpgauge against the best PyTorch provider and each other provider,
    per dtype and shape, on the cold lane (warm when there is no cold lane). A ratio is
    other median / warpgauge median (> 1: warpgauge is faster); † marks overlapping
    p10–p90 intervals. Returns (headers, rows, lane)."""
    cases = [c for c in run.cases if c["op"] == op]
    lane = _table_lane(cases)
    cases = sorted((c for c in cases if c["lane"] == lane), key=lambda c: (c["dtype"], _amount(c)))
    wg = _headline(cases)
    if wg is None:
        return [], [], lane
    others = [p for p in _providers(cases) if p[0] != wg]
    flops = is_flop_bound(op)
    headers = [
        "dtype",
        "shape",
        f"{wg} median µs (p10–p90)",
        "TFLOP/s" if flops else "TB/s",
        "% of mm ceiling" if flops else "% of copy ceiling",
        "vs best PyTorch",
    ]
    headers += [f"vs {label}" for _, label, _ in others]
    rows = []
    for c in cases:
        prs = _by_name(c)
        me = prs.get(wg)
        row = [c["dtype"], c["shape_label"]]
        if not _ok(me):
            status = STATUS_TEXT.get(me["status"], me["status"]) if me else "not run"
            rows.append(row + [status] + ["—"] * (len(headers) - 3))
            continue
        dt = me["device_time"]
        rate = _rate(c, dt["median_us"])
        ceiling, _ = _ceiling(run, op, c["dtype"])
        row += [
            f"{_fmt_us(dt['median_us'])} ({_fmt_us(dt['p10_us'])}–{_fmt_us(dt['p90_us'])})",
            _fmt_rate(rate),
            f"{100 * rate / ceiling:.0f}%" if rate and ceiling else "—",
        ]
        best = best_pytorch(c)
        row.append(_ratio_cell(best, dt) + (f" ({best['label']})" if best else ""))
        row += [_ratio_cell(prs.get(name), dt) for name, _, _ in others]
        rows.append(row)
    return headers, rows, lane


def _ratio_cell(other: dict | None, mine: dict) -> str:
    if other is None:
        return "—"
    if not _ok(other):
        return STATUS_TEXT.get(other["status"], other["status"])
    od = other["device_time"]
    mark = OVERLAP_MARK if _overlap(od, mine) else ""
    return _fmt_ratio(od["median_us"] / mine["median_us"]) + mark


def host_table(run: Run, op: str) -> tuple[list[str], list[list[str]], str | None]:
    """Host + device time per call (median µs of per-call events) for every provider."""
    cases = [c for c in run.cases if c["op"] == op]
    lane = _table_lane(cases)
    cases = sorted((c for c in cases if c["lane"] == lane), key=lambda c: (c["dtype"], _amount(c)))
    provs = _providers(cases)
    headers = ["dtype", "shape"] + [label for _, label, _ in provs]
    rows = []
    for c in cases:
        prs = _by_name(c)
        row = [c["dtype"], c["shape_label"]]
        for name, _, _ in provs:
            pr = prs.get(name)
            if pr is None:
                row.append("—")
            elif pr["status"] != "ok":
                row.append(STATUS_TEXT.get(pr["status"], pr["status"]))
            else:
                ht = pr.get("host_time")
                row.append(_fmt_us(ht["median_us"]) if ht else "not measured")
        rows.append(row)
    return headers, rows, lane


def issues_table(run: Run) -> tuple[list[str], list[list[str]]]:
    """Providers that were absent, failed the gate or raised: one row per (op, provider, status,
    reason) with the cases it covers."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for c in run.cases:
        for pr in c["providers"]:
            if pr["status"] != "ok":
                groups[(c["op"], pr["name"], pr["status"], pr.get("error") or "")].append(
                    {"case": c, "pr": pr}
                )
    rows = []
    for (op, name, status, reason), items in sorted(groups.items()):
        where = [
            f"{i['case']['dtype']} {i['case']['shape_label']} {i['case']['lane']}" for i in items
        ]
        cases = ", ".join(where) if len(where) <= 4 else f"{len(where)} cases"
        detail = reason or "—"
        if status == "failed_gate":
            gates = [i["pr"]["gate"] for i in items if i["pr"].get("gate")]
            if gates:
                g = max(gates, key=lambda g: g["n_bad"])
                detail += (
                    f" (worst: {g['n_bad']} bad, {g['n_nan']} NaN, max abs err {g['max_abs_err']})"
                )
        rows.append([op, name, STATUS_TEXT.get(status, status), cases, detail])
    return ["operator", "provider", "status", "cases", "reason"], rows


# ------------------------------------------------------------------------------------ document


def _gib(n: int | None) -> str:
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
            f"{gpu['name']} ({gpu['sm_count']} SMs, {l2}, {_gib(gpu.get('memory_bytes'))}, "
            f"compute capability {gpu['capability']})"
        )
    pk = prov.get("packages", {})
    packages = ", ".join(f"{k} {v}" for k, v in pk.items() if v) or "—"
    absent = ", ".join(k for k, v in pk.items() if not v)
    if absent:
        packages += f" (not installed: {absent})"
    commit = prov.get("git_commit") or "unknown"
    dirty = {True: "yes: uncommitted changes to tracked files", False: "no", None: "unknown"}[
        prov.get("git_dirty")
    ]
    copy = ceil.get("copy_tbps")
    copy_text = "not measured"
    if copy:
        copy_text = (
            f"{copy:.2f} TB/s (device-to-device copy of a {_gib(ceil.get('copy_bytes'))} buffer, "
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
    state = _telemetry_summary(run)
    if state:
        facts.append(["GPU state during cases", state])
    return facts


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
    "whose p10–p90 intervals overlap: within this run's spread.",
    "Ratios inside this run are the claim; absolute times move between runs and machines. "
    "See docs/limitations-and-claims.md.",
]


def build_blocks(run: Run, problems: list[str], images: dict[str, Path]) -> list[tuple]:
    """The report as a list of blocks: (kind, ...) with kind in h1, h2, p, ul, table, img."""
    b: list[tuple] = [("h1", f"warpgauge run {run.run_id}")]
    if run.run.get("notes"):
        b.append(("p", f"Note: {run.run['notes']}"))
    if problems:
        b.append(
            (
                "p",
                f"WARNING: validation found {len(problems)} problem(s); the numbers below "
                "may not be what was measured or may be incomplete:",
            )
        )
        b.append(
            (
                "ul",
                problems[:25]
                + ([f"... and {len(problems) - 25} more"] if len(problems) > 25 else []),
            )
        )
    else:
        b.append(
            (
                "p",
                "Validation: every file matches its schema and the manifest's SHA-256; "
                "every expected case is present.",
            )
        )
    b.append(("table", ["what", "value"], _run_facts(run)))
    b.append(("h2", "How to read this report"))
    b.append(("ul", READING_NOTES))
    for op in _ops(run):
        b.append(("h2", op))
        if op in images:
            b.append(("img", images[op], f"{op}: speed against shape per provider"))
        headers, rows, lane = speedup_table(run, op)
        if rows:
            b.append(("p", f"Speedup of warpgauge, {lane} lane (device time):"))
            b.append(("table", headers, rows))
        headers, rows, lane = host_table(run, op)
        if rows:
            b.append(
                ("p", f"Host + device time per call, median µs, {lane} lane (per-call events):")
            )
            b.append(("table", headers, rows))
    headers, rows = issues_table(run)
    b.append(("h2", "Providers not timed"))
    if rows:
        b.append(
            (
                "p",
                "Absent means not installed or not applicable here: absent, not slow. "
                "Failed gate means its output disagreed with the FP64 reference, so it "
                "was not timed.",
            )
        )
        b.append(("table", headers, rows))
    else:
        b.append(("p", "Every provider passed its gate and was timed in every case."))
    return b


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(blocks: list[tuple], base: Path) -> str:
    out = []
    for kind, *rest in blocks:
        if kind == "h1":
            out.append(f"# {rest[0]}\n")
        elif kind == "h2":
            out.append(f"## {rest[0]}\n")
        elif kind == "p":
            out.append(f"{rest[0]}\n")
        elif kind == "ul":
            out.append("\n".join(f"- {item}" for item in rest[0]) + "\n")
        elif kind == "img":
            path, alt = rest
            out.append(f"![{alt}]({Path(os.path.relpath(path, base)).as_posix()})\n")
        elif kind == "table":
            headers, rows = rest
            lines = [
                "| " + " | ".join(_md_cell(h) for h in headers) + " |",
                "|" + "---|" * len(headers),
            ]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            out.append("\n".join(lines) + "\n")
    return "\n".join(out)


_CSS = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.6em 0 1.4em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
img { max-width: 100%; border: 1px solid #eee; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.8em; }
"""


def to_html(blocks: list[tuple]) -> str:
    e = html.escape
    title = next((rest[0] for kind, *rest in blocks if kind == "h1"), "warpgauge report")
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title><style>{_CSS}</style></head><body>",
    ]
    for kind, *rest in blocks:
        if kind in ("h1", "h2", "p"):
            out.append(f"<{kind}>{e(str(rest[0]))}</{kind}>")
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{e(str(i))}</li>" for i in rest[0]) + "</ul>")
        elif kind == "img":
            path, alt = rest
            data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
            out.append(f'<p><img alt="{e(alt)}" src="data:image/png;base64,{data}"></p>')
        elif kind == "table":
            headers, rows = rest
            head = (
                ""
                if not any(headers)
                else "<tr>" + "".join(f"<th>{e(str(h))}</th>" for h in headers) + "</tr>"
            )
            body = "".join(
                "<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in rows
            )
            out.append(f"<table>{head}{body}</table>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------ entry points


def render_report(
    run_dir: str | os.PathLike, out_dir: str | os.PathLike | None = None
) -> list[Path]:
    """Render ``run_dir`` into ``out_dir`` (default ``<run_dir>/report``): report.md, report.html
    and one PNG per operator. Returns the paths written (md, html, then PNGs).

    Works from the JSON artifacts alone; renders even an invalid or interrupted run, with the
    validation problems listed at the top. Inside the run directory it refreshes the manifest
    entries of the report files (and drops those of report PNGs it replaced).
    """
    run_dir = Path(run_dir)
    run = load_run(run_dir)
    problems = validate_run(run_dir, include_report=False)
    out = Path(out_dir) if out_dir is not None else run_dir / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    colors = provider_colors(run)
    images = {}
    for op in _ops(run):
        images[op] = atomic_write_bytes(out / f"{op}.png", plot_op(run, op, colors))
    blocks = build_blocks(run, problems, images)
    md = atomic_write_bytes(out / "report.md", to_markdown(blocks, out).encode("utf-8"))
    page = atomic_write_bytes(out / "report.html", to_html(blocks).encode("utf-8"))
    written = [md, page, *images.values()]
    _refresh_manifest(run_dir, out, written)
    return written


def _refresh_manifest(run_dir: Path, out: Path, written: list[Path]) -> None:
    run_root, out_abs = run_dir.resolve(), out.resolve()
    if run_root not in (out_abs, *out_abs.parents) or not (run_dir / MANIFEST_FILE).exists():
        return
    keep = {p.resolve() for p in written}
    if out_abs == (run_root / REPORT_DIR):
        for old in out.glob("*.png"):  # figures of operators no longer in the run
            if old.resolve() not in keep:
                old.unlink()
    rel = [p.resolve().relative_to(run_root).as_posix() for p in written]
    prefix = out_abs.relative_to(run_root).as_posix() + "/"
    try:
        listed = read_json(run_dir / MANIFEST_FILE).get("files", {})
        stale = [r for r in listed if r.startswith(prefix) and not (run_root / r).exists()]
        update_manifest(run_dir, rel, remove=stale)
    except (ArtifactError, ValueError, AttributeError):
        pass  # an unreadable or invalid manifest stays as it is; validate reports it


def report_cli(run_dir: str | os.PathLike) -> int:
    """``warpgauge report RUN``: render and print the paths; 1 when the run cannot be read."""
    try:
        paths = render_report(run_dir)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        print(f"cannot render {run_dir}: {type(e).__name__}: {e}")
        return 1
    for p in paths:
        print(p)
    return 0
