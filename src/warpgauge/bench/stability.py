"""The stability log: the same suite run several times, and how much each ratio moved.

A ratio is, within one case of one run, another provider's median device time over warpgauge's
(the first provider of family ``warpgauge``; in plans mode the rule): warpgauge's speedup over
that provider. Across runs each ratio has a spread, ``max / min - 1``; a ratio *agrees within
10%* when its spread is at most 0.10. ``warpgauge bench --repeat N`` writes
``<out>/<first run id>-stability.{json,md}`` after its N runs; ``warpgauge stability RUN RUN ...``
computes the same from finished runs. Reads artifacts only (no torch).
"""

from __future__ import annotations

from pathlib import Path

THRESHOLD = 0.10


def run_ratios(run_dir) -> dict[str, float]:
    """{"case_id/provider": other provider's median / warpgauge's median} of one run."""
    from warpgauge import artifacts

    out = {}
    for case in artifacts.load_run(run_dir).cases:
        if not isinstance(case, dict):
            continue
        provs = [p for p in case.get("providers", []) if p.get("status") == "ok"]
        ref = next((p for p in provs if p["family"] == "warpgauge"), None)
        if ref is None:
            continue
        t_ref = ref["device_time"]["median_us"]
        for p in provs:
            if p is ref or t_ref <= 0:
                continue
            out[f"{case['case_id']}/{p['name']}"] = p["device_time"]["median_us"] / t_ref
    return out


def summarize(run_dirs, threshold: float = THRESHOLD) -> dict:
    per_run = [run_ratios(d) for d in run_dirs]
    keys = sorted(set.intersection(*(set(r) for r in per_run))) if per_run else []
    rows = []
    for k in keys:
        vals = [r[k] for r in per_run]
        spread = max(vals) / min(vals) - 1.0 if min(vals) > 0 else float("inf")
        rows.append({"ratio": k, "values": vals, "spread": spread})
    rows.sort(key=lambda r: -r["spread"])
    n_agree = sum(r["spread"] <= threshold for r in rows)
    return {
        "runs": [str(d) for d in run_dirs],
        "threshold": threshold,
        "n_ratios": len(rows),
        "n_agree": n_agree,
        "fraction_agree": (n_agree / len(rows)) if rows else None,
        "ratios": rows,
    }


def markdown(summary: dict, top: int = 25) -> str:
    n, k = summary["n_ratios"], summary["n_agree"]
    frac = summary["fraction_agree"]
    lines = [
        "# Stability log",
        "",
        f"{len(summary['runs'])} runs of the same suite: "
        + ", ".join(f"`{Path(r).name}`" for r in summary["runs"])
        + ".",
        "",
        f"**{k} of {n} ratios agree within {summary['threshold']:.0%}** across the runs"
        + (f" ({frac:.0%})." if frac is not None else "."),
        "A ratio is another provider's median device time over warpgauge's in the same case; its "
        "spread is max / min - 1 over the runs.",
        "",
        f"## The {min(top, n)} widest spreads",
        "",
        "| case / provider | ratios per run | spread |",
        "|---|---|---|",
    ]
    for r in summary["ratios"][:top]:
        vals = ", ".join(f"{v:.3f}" for v in r["values"])
        lines.append(f"| {r['ratio']} | {vals} | {r['spread']:.1%} |")
    return "\n".join(lines) + "\n"


def write(out_dir, run_dirs, name: str | None = None) -> tuple[Path, dict]:
    """Write ``<name>.json`` and ``<name>.md`` into ``out_dir``; returns (json path, summary)."""
    from warpgauge.artifacts import atomic_write_bytes, atomic_write_json

    summary = summarize(run_dirs)
    name = name or f"{Path(run_dirs[0]).name}-stability"
    out_dir = Path(out_dir)
    path = out_dir / f"{name}.json"
    atomic_write_json(path, summary)
    atomic_write_bytes(out_dir / f"{name}.md", markdown(summary).encode())
    return path, summary
