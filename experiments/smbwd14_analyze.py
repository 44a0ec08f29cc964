"""Tables of the smbwd14 sweeps (results/smbwd14-h200/*.jsonl): per cell, each variant's time over
the cell's best, the committed rule's plan (as the variant it equals), and geometric means. The
``rule`` column is the rule of the commit the sweep ran at (r1, r2: the looped / split rule
before B14; confirm, fwd: c503a3b).

    python3 experiments/smbwd14_analyze.py results/smbwd14-h200/smbwd14r2.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def committed(rows: int, width: int, names: list[str], rule_kind: str) -> str | None:
    """The variant that equals the committed rule's plan (132 SMs), or None if not swept."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from warpgauge.kernels.plans import RowPlan

    p = RowPlan.for_shape(rows, width, 132, "softmax_bwd", 60 << 20)
    if p.kind == "coop" and p.sub:
        tag = f"c{p.block}w{p.num_warps}s{p.sub}" + ("e" if p.evict else "")
    elif p.kind == "coop":
        tag = f"c{p.block}w{p.num_warps}"
    else:  # resident / split: unchanged by B14, so the sweep's own "rule" column
        tag = "rule" if rule_kind == p.kind else p.kind
    return tag if tag in names else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+", type=Path)
    args = ap.parse_args()
    for path in args.files:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        names = list(rows[0]["us"])
        bwd = rows[0].get("op", "bwd") == "bwd"
        print(f"## {path.name} ({'backward' if bwd else 'forward'}, us over the cell's best)\n")
        head = ["cell", "best us", "TB/s", *names] + (["rule now", "rule / best"] if bwd else [])
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        logs = {n: [] for n in names}
        reg = []
        for r in rows:
            us = r["us"]
            best = min(us.values())
            tbs = r["gbytes"] * 1e3 / best if "gbytes" in r else float("nan")
            cells = [f"{r['rows']}x{r['width']}", f"{best:.1f}", f"{tbs:.2f}"]
            cells += [f"{us[n] / best:.3f}" if n in us else "-" for n in names]
            for n in names:
                if n in us:
                    logs[n].append(math.log(us[n] / best))
            if bwd:
                kind = r["rule"].split("kind='")[1].split("'")[0]
                c = committed(r["rows"], r["width"], names, kind)
                cells += [c or "not swept", f"{us[c] / best:.3f}" if c else "-"]
                if c:
                    reg.append(math.log(us[c] / best))
            print("| " + " | ".join(cells) + " |")
        gm = ["geomean", "", ""] + [
            f"{math.exp(sum(v) / len(v)):.3f}" if v else "-" for v in logs.values()
        ]
        if bwd:
            gm += ["", f"{math.exp(sum(reg) / len(reg)):.3f}" if reg else "-"]
        print("| " + " | ".join(gm) + " |\n")


if __name__ == "__main__":
    main()
