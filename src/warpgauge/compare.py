"""Compare two runs case by case: did a provider get faster, slower, or can this data not tell?

``compare_runs(run_a, run_b)`` pairs every (case id, provider) timed (status ok) in both runs and
judges B against A from both runs' own measured noise, the way nvbench's compare script does:
each run's device-time median gets a distribution-free 95% confidence interval from its raw
samples (``median_interval``), and ``verdict`` calls a pair

- **faster** / **slower** when the two intervals are apart (and the change is at least
  ``min_effect``, 0 by default);
- **same** when the intervals overlap and the medians differ by no more than the runs' noise
  (the larger relative half-width of the two intervals);
- **ambiguous** when the intervals touch but the medians differ by more than that noise: this
  data cannot tell.

Cases present in only one run, and providers timed in only one, are listed, never dropped.
``summaries`` gives per operator the geometric mean of B/A for warpgauge's providers and the
verdict counts. ``compare_cli`` prints it all (a rich table) or JSON, and with ``fail_above``
exits 1 when a warpgauge provider got slower by more than that many percent (for CI).

Absolute times move between runs (clocks, temperature, other tenants of the GPU): compare runs
from the same GPU and suite, and read a small "slower" with that in mind; the header warns when
GPUs, torch or triton differ.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .artifacts import Run, load_run, validate_run

VERDICTS = ("faster", "slower", "same", "ambiguous")
Z_95 = 1.959964  # two-sided 95% normal quantile
EXIT_REGRESSION = 1
EXIT_UNREADABLE = 2


def median_interval(stats: dict, z: float = Z_95) -> tuple[float, float]:
    """A distribution-free ~95% confidence interval of the median from the raw samples: the
    order statistics at ranks floor((n - z*sqrt(n)) / 2) and ceil(1 + (n + z*sqrt(n)) / 2)
    (1-based, clipped to the sample). With fewer than 3 samples, or none recorded, the
    interval is [p10, p90]."""
    xs = sorted(stats.get("samples_us") or [])
    n = len(xs)
    if n < 3:
        return float(stats["p10_us"]), float(stats["p90_us"])
    lo_rank = max(1, math.floor((n - z * math.sqrt(n)) / 2))
    hi_rank = min(n, math.ceil(1 + (n + z * math.sqrt(n)) / 2))
    return float(xs[lo_rank - 1]), float(xs[hi_rank - 1])


def relative_noise(stats: dict) -> float:
    """Half the width of ``median_interval`` relative to the median."""
    lo, hi = median_interval(stats)
    return (hi - lo) / 2.0 / stats["median_us"]


def verdict(a: dict, b: dict, min_effect: float = 0.0) -> str:
    """Verdict on B against A from two device-time stats objects (median_us, p10_us, p90_us and,
    for a real interval, samples_us). See the module docstring; ``min_effect`` (a fraction,
    e.g. 0.02) additionally calls changes smaller than that "same" even when significant."""
    lo_a, hi_a = median_interval(a)
    lo_b, hi_b = median_interval(b)
    r = b["median_us"] / a["median_us"]
    if abs(math.log(r)) <= math.log1p(min_effect):
        return "same"
    if hi_b < lo_a:
        return "faster"
    if lo_b > hi_a:
        return "slower"
    noise = max(relative_noise(a), relative_noise(b))
    return "same" if abs(r - 1.0) <= noise else "ambiguous"


@dataclass(frozen=True)
class CompareRow:
    """One (case, provider) timed in both runs. ``ratio`` = median_b_us / median_a_us
    (< 1: B is faster); ``interval_*_us``: each median's 95% interval; ``noise_*``: its
    relative half-width. ``verdict`` is B against A."""

    case_id: str
    op: str
    lane: str
    provider: str
    family: str
    median_a_us: float
    median_b_us: float
    ratio: float
    verdict: str
    interval_a_us: tuple[float, float]
    interval_b_us: tuple[float, float]
    noise_a: float
    noise_b: float


@dataclass(frozen=True)
class OpSummary:
    """Per operator: geometric mean of B/A over warpgauge's rows, and verdict counts."""

    op: str
    n: int
    geomean_ratio: float | None
    counts: dict[str, int]
    worst: str | None  # the warpgauge row with the largest B/A
    worst_ratio: float | None


@dataclass
class Comparison:
    """The result of ``compare_runs``: ``rows`` (sorted by case id, then provider), the cases
    only one run has, the (case, provider, reason) pairs that could not be compared, warnings
    about what differs between the runs, and ``regressions`` once ``check_regressions`` ran."""

    run_a: str
    run_b: str
    min_effect: float
    rows: list[CompareRow] = field(default_factory=list)
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)
    not_compared: list[tuple[str, str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    regressions: list[CompareRow] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        c = Counter(r.verdict for r in self.rows)
        return {v: c.get(v, 0) for v in VERDICTS}

    def summaries(self, families=("warpgauge",)) -> list[OpSummary]:
        """One ``OpSummary`` per operator (in the order the rows first name them)."""
        by_op: dict[str, list[CompareRow]] = defaultdict(list)
        for r in self.rows:
            by_op[r.op]  # keep every operator, even one without a warpgauge row
            if r.family in families:
                by_op[r.op].append(r)
        out = []
        for op, rows in by_op.items():
            gm = math.exp(sum(math.log(r.ratio) for r in rows) / len(rows)) if rows else None
            worst = max(rows, key=lambda r: r.ratio, default=None)
            c = Counter(r.verdict for r in rows)
            out.append(
                OpSummary(
                    op,
                    len(rows),
                    gm,
                    {v: c.get(v, 0) for v in VERDICTS},
                    None if worst is None else f"{worst.case_id} {worst.provider}",
                    None if worst is None else worst.ratio,
                )
            )
        return out

    def check_regressions(self, fail_above_pct: float, families=("warpgauge",)) -> bool:
        """Record in ``regressions`` every row of ``families`` judged "slower" with B/A above
        1 + fail_above_pct / 100; True when there is one."""
        limit = 1.0 + fail_above_pct / 100.0
        self.regressions = [
            r
            for r in self.rows
            if r.family in families and r.verdict == "slower" and r.ratio > limit
        ]
        return bool(self.regressions)

    def to_json(self) -> dict:
        return {
            "run_a": self.run_a,
            "run_b": self.run_b,
            "rule": RULE,
            "min_effect": self.min_effect,
            "counts": self.counts(),
            "summaries": [asdict(s) for s in self.summaries()],
            "rows": [asdict(r) for r in self.rows],
            "only_in_a": self.only_in_a,
            "only_in_b": self.only_in_b,
            "not_compared": [
                {"case_id": c, "provider": p, "why": w} for c, p, w in self.not_compared
            ],
            "warnings": self.warnings,
            "regressions": [asdict(r) for r in self.regressions],
        }


RULE = (
    "each run's device-time median gets a 95% interval from its samples; faster/slower when "
    "the intervals are apart; same when they overlap and B/A is within the runs' noise; "
    "ambiguous when they overlap and B/A is further off than the noise"
)


def _as_run(run: Run | str | os.PathLike) -> Run:
    return run if isinstance(run, Run) else load_run(run)


def _status(pr: dict | None) -> str:
    return "missing" if pr is None else pr["status"]


def _differences(a: Run, b: Run) -> list[str]:
    out = []
    pa, pb = a.run.get("provenance", {}), b.run.get("provenance", {})
    ga, gb = (pa.get("gpu") or {}).get("name"), (pb.get("gpu") or {}).get("name")
    if ga != gb:
        out.append(f"different GPUs: A {ga!r}, B {gb!r}; ratios mix hardware and code")
    for key in ("torch", "triton"):
        va, vb = pa.get("packages", {}).get(key), pb.get("packages", {}).get(key)
        if va != vb:
            out.append(f"different {key}: A {va}, B {vb}")
    for run, tag in ((a, "A"), (b, "B")):
        if run.run.get("status") != "complete":
            out.append(f"run {tag} ({run.run_id}) is {run.run.get('status')!r}, not complete")
        if (run.run.get("provenance") or {}).get("git_dirty"):
            out.append(f"run {tag} ({run.run_id}) was made from a dirty checkout")
    return out


def compare_runs(
    run_a: Run | str | os.PathLike, run_b: Run | str | os.PathLike, min_effect: float = 0.0
) -> Comparison:
    """Pair the cases and providers of two runs (directories or loaded ``Run``s) and judge each
    pair timed in both with ``verdict``. Does not validate; ``compare_cli`` does and warns."""
    a, b = _as_run(run_a), _as_run(run_b)
    cmp = Comparison(a.run_id, b.run_id, min_effect, warnings=_differences(a, b))
    cases_a = {c["case_id"]: c for c in a.cases}
    cases_b = {c["case_id"]: c for c in b.cases}
    cmp.only_in_a = sorted(set(cases_a) - set(cases_b))
    cmp.only_in_b = sorted(set(cases_b) - set(cases_a))
    for cid in sorted(set(cases_a) & set(cases_b)):
        prs_a = {p["name"]: p for p in cases_a[cid]["providers"]}
        prs_b = {p["name"]: p for p in cases_b[cid]["providers"]}
        for name in sorted(set(prs_a) | set(prs_b)):
            pa, pb = prs_a.get(name), prs_b.get(name)
            da = pa.get("device_time") if pa and pa["status"] == "ok" else None
            db = pb.get("device_time") if pb and pb["status"] == "ok" else None
            if da is None or db is None:
                cmp.not_compared.append((cid, name, f"A: {_status(pa)}, B: {_status(pb)}"))
                continue
            cmp.rows.append(
                CompareRow(
                    case_id=cid,
                    op=cases_b[cid]["op"],
                    lane=cases_b[cid]["lane"],
                    provider=name,
                    family=(pb or pa)["family"],
                    median_a_us=da["median_us"],
                    median_b_us=db["median_us"],
                    ratio=db["median_us"] / da["median_us"],
                    verdict=verdict(da, db, min_effect),
                    interval_a_us=median_interval(da),
                    interval_b_us=median_interval(db),
                    noise_a=relative_noise(da),
                    noise_b=relative_noise(db),
                )
            )
    return cmp


# ------------------------------------------------------------------------------------ printing

HEADERS = ("case", "provider", "A median µs", "B median µs", "B/A", "noise A/B", "verdict (B vs A)")


def _cells(r: CompareRow) -> tuple[str, ...]:
    return (
        r.case_id,
        r.provider,
        f"{r.median_a_us:.2f}",
        f"{r.median_b_us:.2f}",
        f"{r.ratio:.3f}",
        f"±{100 * r.noise_a:.1f}% / ±{100 * r.noise_b:.1f}%",
        r.verdict,
    )


def summary_lines(cmp: Comparison) -> list[str]:
    """One line per operator: geometric mean of B/A over warpgauge's providers and counts."""
    out = []
    for s in cmp.summaries():
        if s.geomean_ratio is None:
            out.append(f"{s.op}: no warpgauge provider timed in both runs")
            continue
        counts = ", ".join(f"{n} {v}" for v, n in s.counts.items() if n)
        out.append(
            f"{s.op}: warpgauge B/A geomean {s.geomean_ratio:.3f} over {s.n} case(s) "
            f"({counts}); worst {s.worst_ratio:.3f} ({s.worst})"
        )
    return out


def _footer(cmp: Comparison) -> list[str]:
    counts = ", ".join(f"{n} {v}" for v, n in cmp.counts().items())
    lines = [f"{len(cmp.rows)} pair(s) compared: {counts}.", f"Rule: {RULE}."]
    if cmp.min_effect:
        lines.append(f"Changes under {100 * cmp.min_effect:g}% are called same (--min-effect).")
    lines += summary_lines(cmp)
    if cmp.only_in_a:
        lines.append(f"Only in A ({len(cmp.only_in_a)}): " + ", ".join(cmp.only_in_a))
    if cmp.only_in_b:
        lines.append(f"Only in B ({len(cmp.only_in_b)}): " + ", ".join(cmp.only_in_b))
    if cmp.not_compared:
        lines.append(f"Not timed in both ({len(cmp.not_compared)}):")
        lines += [f"  {cid} {name}: {why}" for cid, name, why in cmp.not_compared]
    for r in cmp.regressions:
        lines.append(f"REGRESSION: {r.case_id} {r.provider}: B/A {r.ratio:.3f} ({r.verdict})")
    return lines


def format_comparison(cmp: Comparison) -> str:
    """The comparison as plain text: header, aligned table, summary and unmatched lists."""
    lines = [f"A: {cmp.run_a}", f"B: {cmp.run_b}"]
    lines += [f"warning: {w}" for w in cmp.warnings]
    table = [HEADERS, *(_cells(r) for r in cmp.rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADERS))]
    for k, row in enumerate(table):
        lines.append(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))
            ).rstrip()
        )
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines += _footer(cmp)
    return "\n".join(lines)


_VERDICT_STYLE = {"faster": "green", "slower": "red", "same": "dim", "ambiguous": "yellow"}


def compare_cli(
    run_a: str | os.PathLike,
    run_b: str | os.PathLike,
    *,
    as_json: bool = False,
    fail_above: float | None = None,
    min_effect: float = 0.0,
) -> int:
    """``warpgauge compare A B``: print the comparison (``as_json``: one JSON object).
    Exit code: 0; 1 (EXIT_REGRESSION) when ``fail_above`` is given and a warpgauge provider got
    slower by more than that many percent; 2 (EXIT_UNREADABLE) when a run cannot be read.
    Validation problems of either run are printed as warnings, not errors."""
    import sys

    try:
        cmp = compare_runs(run_a, run_b, min_effect=min_effect)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        print(f"warpgauge compare: cannot compare: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_UNREADABLE
    for path, tag in ((run_a, "A"), (run_b, "B")):
        problems = validate_run(Path(path))
        if problems:
            cmp.warnings.append(
                f"run {tag} has {len(problems)} validation problem(s); run `warpgauge validate {path}`"
            )
    regressed = fail_above is not None and cmp.check_regressions(fail_above)
    code = EXIT_REGRESSION if regressed else 0
    if as_json:
        print(json.dumps(cmp.to_json(), indent=2))
        return code
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:  # piped or captured: do not squeeze case ids into 80 columns
        console = Console(width=200)
    console.print(f"A: {cmp.run_a}\nB: {cmp.run_b}", highlight=False)
    for w in cmp.warnings:
        console.print(f"[yellow]warning:[/] {w}", highlight=False)
    table = Table(*HEADERS)
    table.columns[0].no_wrap = True
    for col in table.columns[2:]:
        col.justify = "right"
    for r in cmp.rows:
        cells = _cells(r)
        table.add_row(*cells[:-1], f"[{_VERDICT_STYLE[r.verdict]}]{cells[-1]}[/]")
    console.print(table)
    for line in _footer(cmp):
        console.print(line, highlight=False, markup=False)
    return code
