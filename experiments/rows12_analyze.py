"""Summary of a rows12 sweep JSON: per cell the rule's plan, the one-shot coop 4096/4 (fast) and
the fastest persistent cooperative plan (``programs_per_sm`` > 0) with its fields, in us, and the
rule's time over the best persistent plan's (> 1: the persistent plan is faster); plans recorded
as over occupancy or failing their gate are counted.

    python3 experiments/rows12_analyze.py results/rows12-h200/round3/rows12.json
"""

from __future__ import annotations

import json
import re
import sys


def fields(plan: str) -> dict:
    return dict(re.findall(r"(\w+)=([^,)]+)", plan)) if plan != "torch" else {}


def short(f: dict) -> str:
    s = f"{f['block']}/{f['num_warps']} pp{f['programs_per_sm']}"
    if f.get("stages", "0") != "0":
        s += f" st{f['stages']}"
    if f.get("maxnreg", "0") != "0":
        s += f" cap{f['maxnreg']}"
    return s


def main(path: str) -> int:
    with open(path) as f:
        d = json.load(f)
    cells: dict = {}
    for r in d["results"]:
        cells.setdefault((r["rows"], r["width"]), []).append(r)
    print(f"copy ceiling {d.get('copy_tbps') or 0:.2f} TB/s; us (cold, graph replay)")
    print(f"{'cell':>13s} {'rule':>8s} {'coop4096':>9s} {'best persistent':>26s} {'rule/pf':>8s} "
          f"{'over-occ':>8s}")  # fmt: skip
    for (rows, n), rs in cells.items():
        rule = next((r for r in rs if r["rule"] and r.get("us")), None)
        one = [r for r in rs if r.get("us") and r["plan"] != "torch"
               and fields(r["plan"]).get("programs_per_sm") == "0"
               and fields(r["plan"]).get("block") == "4096"
               and fields(r["plan"]).get("sub") == "0"]  # fmt: skip
        pf = [r for r in rs if r.get("us") and r["plan"] != "torch"
              and fields(r["plan"]).get("programs_per_sm", "0") != "0"
              and fields(r["plan"]).get("kind") == "'coop'"]  # fmt: skip
        over = sum(1 for r in rs if "over occupancy" in str(r.get("err")))
        best = min(pf, key=lambda r: r["us"]) if pf else None
        label = f"{best['us']:.1f} " + short(fields(best["plan"])) if best else "-"
        ratio = rule["us"] / best["us"] if rule and best else 0.0
        print(f"{rows:>6d}x{n:<6d} {rule['us'] if rule else 0:8.1f} "
              f"{one[0]['us'] if one else 0:9.1f} {label:>26s} {ratio:8.3f} {over:8d}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
