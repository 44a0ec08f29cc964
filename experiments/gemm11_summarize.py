"""Markdown summary of a gemm11 sweep file (``gemm_shapes_sweep.py --set g11``): per product the
cuBLAS time, the dispatch's (``auto``), the best candidate, ratios (cuBLAS / ours, cold lane),
geometric means per product group, and the compile (first call in a fresh worker) and autotuning
times per case. Any machine, no GPU:

    python experiments/gemm11_summarize.py results/gemm11-h200/g11.json [--rule FILE]

``--rule FILE`` (JSON: {"group shape": "variant"}) prices a rule that picks another variant for
some products: the "rule" column is then that variant's time (the dispatch's where unlisted).
"""

from __future__ import annotations

import argparse
import json
import math


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def table(recs, rule=None):
    rule = rule or {}
    by: dict = {}
    for r in recs:
        by.setdefault((r["group"], r["shape"]), []).append(r)
    rows, ratios = [], {}
    for (grp, shape), rs in by.items():
        t = {r["variant"]: r for r in rs if r.get("ok") and "cold_us" in r}
        if "cublas" not in t:
            continue
        base = t["cublas"]["cold_us"]
        auto = t.get("auto")
        cands = [r for v, r in t.items() if v != "cublas"]
        best = min(cands, key=lambda r: r["cold_us"]) if cands else None
        pick = t.get(rule.get(f"{grp} {shape}", "auto"), auto)
        fails = [r["variant"] for r in rs if not r.get("ok")]
        if pick is not None:
            ratios.setdefault(grp, []).append(base / pick["cold_us"])
        rows.append(
            f"| {grp} | {shape} | {base:.1f} | "
            + (f"{auto['cold_us']:.1f} ({base / auto['cold_us']:.2f})" if auto else "-")
            + " | "
            + (f"{pick['cold_us']:.1f} ({base / pick['cold_us']:.2f})" if pick else "-")
            + " | "
            + (
                f"{best['cold_us']:.1f} ({base / best['cold_us']:.2f}) `{best['variant']}`"
                if best
                else "-"
            )  # fmt: skip
            + f" | {t['cublas'].get('warm_us', 0):.1f} / "
            + (f"{auto.get('warm_us', 0):.1f}" if auto else "-")
            + f" | {', '.join(fails) or ''} |"
        )
    head = (
        "| product | shape (M x N x K, layout) | cuBLAS us | auto us (ratio) | rule us (ratio) | "
        "best us (ratio) variant | warm cuBLAS / auto | failed or skipped |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    geo = [
        f"- {g}: geomean {geomean(v):.3f}, min {min(v):.3f}, n {len(v)}" for g, v in ratios.items()
    ]
    allv = [x for v in ratios.values() for x in v]
    geo.append(f"- all: geomean {geomean(allv):.3f}, min {min(allv or [0]):.3f}, n {len(allv)}")
    return head + "\n" + "\n".join(rows), "\n".join(geo)


def compile_table(info):
    recs = info.get("compile", [])
    auto = [r for r in recs if r["variant"] == "auto"]
    lines = ["| product | shape | first call s (compile + tuning) | tuned / rule configs |",
             "|---|---|---|---|"]  # fmt: skip
    for r in sorted(auto, key=lambda r: -r["first_call_s"]):
        tun = "; ".join(
            f"{t['kernel']} {t.get('tuning_s') or 0:.2f} s" for t in r.get("tuning", [])
        )
        lines.append(f"| {r['group']} | {r['shape']} | {r['first_call_s']:.2f} | {tun} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--rule", default=None)
    args = ap.parse_args()
    with open(args.path) as f:
        d = json.load(f)
    rule = None
    if args.rule:
        with open(args.rule) as f:
            rule = json.load(f)
    tab, geo = table(d["records"], rule)
    print(tab, "\n\nauto (or rule) vs cuBLAS, cold:\n" + geo)
    print("\nCompile phase:", d["info"].get("compile_phase_s"), "s\n")
    print(compile_table(d["info"]))


if __name__ == "__main__":
    main()
