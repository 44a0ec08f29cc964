"""The CUDA softmax runner's statistics and report: middle runs, spreads, ratios, the markdown.

Pure functions over the binary's JSON documents (no torch, no subprocesses); re-exported by
``warpgauge.cuda_softmax``, which runs the program.
"""

from __future__ import annotations

import math
from typing import Any

SUMMARY_SCHEMA = "warpgauge.cuda_softmax.summary/1"
PYTHON_SCHEMA = "warpgauge.cuda_softmax.python_run/1"
KERNELS = ("softmax_serial", "softmax_parallel", "softmax_online_scalar", "softmax_online")
PYTHON_PROVIDERS = ("torch.softmax", "warpgauge.softmax")
TOLERANCE = 2e-5  # max abs error and row-sum error, as in the CUDA program

# ------------------------------------------------------------------------------ statistics


def percentile(sorted_values: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (the CUDA program's rule, numpy's default)."""
    if not sorted_values:
        return math.nan
    pos = p * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def sample_stats(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {
        "median_us": percentile(s, 0.5),
        "p10_us": percentile(s, 0.1),
        "p90_us": percentile(s, 0.9),
        "min_us": s[0] if s else math.nan,
        "max_us": s[-1] if s else math.nan,
        "mean_us": sum(s) / len(s) if s else math.nan,
        "n": len(s),
    }


def middle_run(medians: list[float]) -> int:
    """Index of the run whose median is the middle one (sorted position (n-1)//2: 4th of 7)."""
    order = sorted(range(len(medians)), key=lambda i: (medians[i], i))
    return order[(len(medians) - 1) // 2]


def worst_errors(docs: list[dict | None]) -> dict[str, dict[str, Any]]:
    """Per checked kernel (diagnostic included), the largest errors over all cases of all runs."""
    worst: dict[str, dict[str, Any]] = {}
    for doc in docs:
        for r in (doc or {}).get("correctness", {}).get("results", []):
            w = worst.setdefault(
                r["kernel"],
                {"max_abs_err": 0.0, "max_row_sum_err": 0.0, "all_pass": True,
                 "diagnostic": r.get("diagnostic", False)},
            )  # fmt: skip
            for key in ("max_abs_err", "max_row_sum_err"):
                v = r[key]
                w[key] = math.inf if v is None else max(w[key], v)  # null: NaN or inf
            w["all_pass"] = w["all_pass"] and r["pass"]
    return worst


def _cuda_entries(doc: dict) -> dict[str, dict]:
    return {k["name"]: k for k in doc.get("kernels") or []}


def _python_entries(doc: dict) -> dict[str, dict]:
    return {p["name"]: p for p in doc.get("providers") or [] if p.get("median_us") is not None}


def summarize(cuda_docs: list[dict | None], python_docs: list[dict | None]) -> dict[str, Any]:
    """Middle run and spread per kernel/provider, and within-run ratios of medians."""
    entries: dict[str, list[tuple[int, dict]]] = {}
    for source, docs, extract in (
        ("cuda", cuda_docs, _cuda_entries),
        ("python", python_docs, _python_entries),
    ):
        for run, doc in enumerate(docs, start=1):
            for name, e in (extract(doc) if doc else {}).items():
                entries.setdefault(name, []).append((run, {**e, "source": source}))

    kernels: dict[str, Any] = {}
    for name, runs in entries.items():
        medians = [e["median_us"] for _, e in runs]
        mid_run, mid = runs[middle_run(medians)]
        lo, hi = min(medians), max(medians)
        kernels[name] = {
            "source": mid["source"],
            "runs": [r for r, _ in runs],
            "run_medians_us": medians,
            "middle_run": mid_run,
            "median_us": mid["median_us"],
            "p10_us": mid["p10_us"],
            "p90_us": mid["p90_us"],
            "n": mid.get("n"),
            "spread": {"min_us": lo, "max_us": hi, "max_over_min": hi / lo if lo > 0 else None},
        }

    def per_run(name: str) -> dict[int, float]:
        return {r: e["median_us"] for r, e in entries.get(name, [])}

    pairs = [(a, b) for i, a in enumerate(KERNELS) for b in KERNELS[i + 1 :]]
    pairs.append(("torch.softmax", "warpgauge.softmax"))
    pairs += [(k, "torch.softmax") for k in KERNELS]
    ratios = []
    for a, b in pairs:
        ma, mb = per_run(a), per_run(b)
        common = sorted(set(ma) & set(mb))
        if not common:
            continue
        values = [ma[r] / mb[r] for r in common]
        ratios.append(
            {
                "a": a,
                "b": b,
                "meaning": f"median({a}) / median({b}) within each run; > 1: {a} slower",
                "same_process": (a in KERNELS) == (b in KERNELS),
                "per_run": values,
                "min": min(values),
                "max": max(values),
            }
        )
    return {"kernels": kernels, "ratios": ratios}


# --------------------------------------------------------------------------------- reporting


def _fmt(v: float | None, digits: int = 3) -> str:
    return "-" if v is None or not math.isfinite(v) else f"{v:.{digits}f}"


def render_markdown(summary: dict[str, Any]) -> str:
    shape, dev = summary["shape"], summary.get("device") or {}
    lines = [
        f"# CUDA softmax: {dev.get('name', 'unknown GPU')}, {shape['rows']}x{shape['width']} FP32, "
        f"{summary['runs_ok']}/{summary['runs_requested']} runs",
        "",
        "Per kernel, the run whose median is the middle one of the runs; spread is over the run "
        "medians. Times are microseconds per launch (CUDA events, warm L2).",
        "",
        "| kernel | median (us) | p10 | p90 | middle run | run medians min-max (us) | max/min |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in (*KERNELS, *PYTHON_PROVIDERS):
        k = summary["kernels"].get(name)
        if k is None:
            reason = summary.get("unavailable", {}).get(name, "not measured")
            lines.append(f"| {name} | {reason} | | | | | |")
            continue
        sp = k["spread"]
        lines.append(
            f"| {name} | {_fmt(k['median_us'])} | {_fmt(k['p10_us'])} | {_fmt(k['p90_us'])} | "
            f"{k['middle_run']} | {_fmt(sp['min_us'])}-{_fmt(sp['max_us'])} | "
            f"{_fmt(sp['max_over_min'], 2)}x |"
        )
    if summary["ratios"]:
        lines += [
            "",
            "| ratio of medians (within each run) | min | max | same process |",
            "|---|---|---|---|",
        ]
        for r in summary["ratios"]:
            lines.append(
                f"| {r['a']} / {r['b']} | {_fmt(r['min'], 2)}x | {_fmt(r['max'], 2)}x | "
                f"{'yes' if r['same_process'] else 'no'} |"
            )
    c = summary["correctness"]
    worst = c.get("worst_errors") or {}
    if worst:
        lines += ["", "| checked kernel | worst max abs err | worst row-sum err | all cases pass |",
                  "|---|---|---|---|"]  # fmt: skip
        for name, w in worst.items():
            tag = " (diagnostic, not a gate)" if w["diagnostic"] else ""
            lines.append(
                f"| {name}{tag} | {w['max_abs_err']:.3g} | {w['max_row_sum_err']:.3g} | "
                f"{'yes' if w['all_pass'] else 'no'} |"
            )
    lines += [
        "",
        f"Correctness (FP64 reference, tolerance {TOLERANCE:g}): "
        + ("all runs passed." if c["all_pass"] else "FAILED, see summary.json."),
    ]
    sc = summary.get("self_check")
    if sc is not None:
        lines.append(
            f"Self-check (broken kernel must be caught): {'OK' if sc['ok'] else 'FAILED'}."
        )
    san = summary.get("sanitize")
    if san is not None:
        parts = [
            f"{t}: {'clean' if san[t]['clean'] else san[t]['reason']} ({'; '.join(san[t]['summary'])})"
            for t in ("memcheck", "racecheck")
            if t in san
        ]
        lines.append("Sanitizers: " + ("; ".join(parts) if parts else san.get("reason", "")) + ".")
    return "\n".join(lines) + "\n"
