"""Compare two runs case by case: did a provider get faster, slower, or can this data not tell?

``compare_runs(run_a, run_b)`` pairs every (case id, provider) that is timed (status ok) in both
runs and gives the ratio of device-time medians ``b / a`` with a verdict (see ``verdict``).
Cases present in only one run, and providers timed in only one, are listed, never dropped.
``compare_cli(a, b)`` prints it (a rich table when rich is installed) for ``warpgauge compare``.

Remember what the numbers are: absolute times move between runs (clocks, temperature, other
tenants of the GPU), which is why a difference inside the ``band`` is called "same" even when
each run's spread is tight. Compare runs from the same GPU and suite; the header warns otherwise.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .artifacts import Run, load_run, validate_run

VERDICT_BAND = 0.03
VERDICTS = ("faster", "slower", "same", "unresolved")


def verdict(a: dict, b: dict, band: float = VERDICT_BAND) -> str:
    """Verdict on B against A from two device-time stats ({median_us, p10_us, p90_us}).

    With r = b.median_us / a.median_us:

    1. "same" if 1 / (1 + band) <= r <= 1 + band (default band 3%): a difference this small is
       within the drift between runs, whatever each run's own spread;
    2. otherwise "unresolved" if the intervals [a.p10, a.p90] and [b.p10, b.p90] overlap
       (a.p10 <= b.p90 and b.p10 <= a.p90): the runs' spreads cannot separate them;
    3. otherwise "faster" if r < 1 (B takes less time), "slower" if r > 1.
    """
    r = b["median_us"] / a["median_us"]
    if 1.0 / (1.0 + band) <= r <= 1.0 + band:
        return "same"
    if a["p10_us"] <= b["p90_us"] and b["p10_us"] <= a["p90_us"]:
        return "unresolved"
    return "faster" if r < 1.0 else "slower"


@dataclass(frozen=True)
class CompareRow:
    """One (case, provider) timed in both runs. ``ratio`` = median_b_us / median_a_us
    (< 1: B is faster). ``verdict`` is B against A."""

    case_id: str
    provider: str
    family: str
    median_a_us: float
    median_b_us: float
    ratio: float
    verdict: str
    interval_a_us: tuple[float, float]
    interval_b_us: tuple[float, float]


@dataclass
class Comparison:
    """The result of ``compare_runs``: ``rows`` (sorted by case id, then provider), the cases
    only one run has, the (case, provider, reason) pairs that could not be compared, and
    warnings about what differs between the runs."""

    run_a: str
    run_b: str
    band: float
    rows: list[CompareRow] = field(default_factory=list)
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)
    not_compared: list[tuple[str, str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        c = Counter(r.verdict for r in self.rows)
        return {v: c.get(v, 0) for v in VERDICTS}


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
    run_a: Run | str | os.PathLike, run_b: Run | str | os.PathLike, band: float = VERDICT_BAND
) -> Comparison:
    """Pair the cases and providers of two runs (directories or loaded ``Run``s) and judge each
    pair timed in both with ``verdict``. Does not validate; ``compare_cli`` does and warns."""
    a, b = _as_run(run_a), _as_run(run_b)
    cmp = Comparison(a.run_id, b.run_id, band, warnings=_differences(a, b))
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
                    provider=name,
                    family=(pb or pa)["family"],
                    median_a_us=da["median_us"],
                    median_b_us=db["median_us"],
                    ratio=db["median_us"] / da["median_us"],
                    verdict=verdict(da, db, band),
                    interval_a_us=(da["p10_us"], da["p90_us"]),
                    interval_b_us=(db["p10_us"], db["p90_us"]),
                )
            )
    return cmp


# ------------------------------------------------------------------------------------ printing

HEADERS = ("case", "provider", "A median µs", "B median µs", "B/A", "verdict (B vs A)")


def _cells(r: CompareRow) -> tuple[str, ...]:
    return (
        r.case_id,
        r.provider,
        f"{r.median_a_us:.2f}",
        f"{r.median_b_us:.2f}",
        f"{r.ratio:.3f}",
        r.verdict,
    )


def _footer(cmp: Comparison) -> list[str]:
    counts = ", ".join(f"{n} {v}" for v, n in cmp.counts().items())
    lines = [
        f"{len(cmp.rows)} pair(s) compared: {counts}.",
        f"Rule: same if B/A within {cmp.band:.0%} (either way); else unresolved if the "
        "p10-p90 intervals overlap; else faster (B/A < 1) or slower.",
    ]
    if cmp.only_in_a:
        lines.append(f"Only in A ({len(cmp.only_in_a)}): " + ", ".join(cmp.only_in_a))
    if cmp.only_in_b:
        lines.append(f"Only in B ({len(cmp.only_in_b)}): " + ", ".join(cmp.only_in_b))
    if cmp.not_compared:
        lines.append(f"Not timed in both ({len(cmp.not_compared)}):")
        lines += [f"  {cid} {name}: {why}" for cid, name, why in cmp.not_compared]
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


_VERDICT_STYLE = {"faster": "green", "slower": "red", "same": "dim", "unresolved": "yellow"}


def compare_cli(run_a: str | os.PathLike, run_b: str | os.PathLike) -> int:
    """``warpgauge compare A B``: print the comparison; 0 when both runs could be read, else 1.
    Validation problems of either run are printed as warnings, not errors."""
    try:
        cmp = compare_runs(run_a, run_b)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        print(f"cannot compare: {type(e).__name__}: {e}")
        return 1
    for path, tag in ((run_a, "A"), (run_b, "B")):
        problems = validate_run(Path(path))
        if problems:
            cmp.warnings.append(
                f"run {tag} has {len(problems)} validation problem(s); run `warpgauge validate {path}`"
            )
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(format_comparison(cmp))
        return 0
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
        style = _VERDICT_STYLE[r.verdict]
        table.add_row(*cells[:-1], f"[{style}]{cells[-1]}[/]")
    console.print(table)
    for line in _footer(cmp):
        console.print(line, highlight=False, markup=False)
    return 0
