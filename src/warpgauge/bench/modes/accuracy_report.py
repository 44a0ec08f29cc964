"""``warpgauge accuracy-report RUN``: errors against FP64 of an accuracy-mode run.

Part 1, every case: each output's max abs error for warpgauge beside the best PyTorch provider's
(err/allowed under the tolerance table in brackets; <= 1 passes). Part 2, the tolerance probe
(cases whose shapes came from the registry's ``probe`` sets, or all cases): the distribution of
warpgauge's err/allowed per operator and output: median, p90, p99, max, failures.
"""

from __future__ import annotations

import statistics
from pathlib import Path


def _g(v) -> str:
    return "NaN/inf" if v is None else f"{v:.3g}"


def _errors(p) -> list[dict]:
    return ((p or {}).get("extra") or {}).get("errors") or []


def rows(run_dir) -> list[dict]:
    from warpgauge import artifacts

    out = []
    for case in artifacts.load_run(run_dir).cases:
        if not isinstance(case, dict):
            continue
        provs = {p["name"]: p for p in case["providers"]}
        wg = provs.get("warpgauge")
        for e in _errors(wg):
            others = {n: next((x for x in _errors(p) if x["output"] == e["output"]), None)
                      for n, p in provs.items() if p["family"] in ("pytorch", "compile")}  # fmt: skip
            others = {n: x for n, x in others.items() if x is not None}
            out.append({"case": case["case_id"], "op": case["op"], "output": e["output"],
                        "warpgauge": e, "others": others})  # fmt: skip
    return out


def _q(v: list[float], q: float):
    if not v:
        return None
    s = sorted(v)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def markdown(run_dir) -> str:
    rs = rows(run_dir)
    lines = ["# Errors against FP64", "", f"Run `{Path(run_dir).name}`.", "",
             "| case | output | warpgauge max abs (err/allowed) | best PyTorch max abs | "
             "warpgauge <= PyTorch |", "|---|---|---|---|---|"]  # fmt: skip
    wins = total = 0
    for r in rs:
        w = r["warpgauge"]
        errs = [x["max_abs_err"] for x in r["others"].values() if x.get("max_abs_err") is not None]
        best = min(errs) if errs else None
        verdict = ""
        if best is not None:
            ok = w.get("max_abs_err") is not None and w["max_abs_err"] <= best
            wins += ok
            total += 1
            verdict = "yes" if ok else "no"
        ratio = w.get("worst_ratio")
        lines.append(f"| {r['case']} | {r['output']} | {_g(w.get('max_abs_err'))} "
                     f"({'-' if ratio is None else f'{ratio:.2f}'}) | {_g(best)} | {verdict} |")  # fmt: skip
    lines += ["", f"warpgauge's error was at or below the best PyTorch provider's in {wins} of "
              f"{total} comparisons.", "", "## Tolerance probe (warpgauge err/allowed)", "",
              "| op | output | n | median | p90 | p99 | max | failures |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    by: dict[tuple, list] = {}
    for r in rs:
        by.setdefault((r["op"], r["output"]), []).append(r["warpgauge"].get("worst_ratio"))
    for (op, out), vals in sorted(by.items()):
        finite = [v for v in vals if v is not None]
        fails = sum(v is None or v > 1.0 for v in vals)
        med = statistics.median(finite) if finite else None

        def f(v):
            return "-" if v is None else f"{v:.3f}"

        lines.append(f"| {op} | {out} | {len(vals)} | {f(med)} | {f(_q(finite, 0.9))} | "
                     f"{f(_q(finite, 0.99))} | {f(max(finite) if finite else None)} | {fails} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def report_cli(run, write=None) -> int:
    import sys

    try:
        text = markdown(run)
    except (OSError, ValueError, KeyError) as e:
        print(f"warpgauge accuracy-report: cannot read {run}: {e}", file=sys.stderr)
        return 1
    if write:
        from warpgauge.artifacts import atomic_write_bytes

        atomic_write_bytes(Path(write), text.encode())
    print(text)
    return 0
