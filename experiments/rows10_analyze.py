"""Summarize a rows10 sweep JSON: per cell every plan by median (us, p10-p90), TB/s, % of the
copy ceiling (the run's own cold copy, or --copy), ratio to the rule's plan; the rule's plan
after a write-only flush (``wflush``) against the write+read flush.

    python3 experiments/rows10_analyze.py results/rows10-h200/rows10.json [--copy 4.39]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--copy", type=float, default=0.0)
    a = ap.parse_args()
    with open(a.path) as f:
        d = json.load(f)
    from rows10_sweep import short

    cp = d.get("copy_tbps") or {}
    copy = a.copy or cp.get("copy") or 1.0
    print(f"device {d.get('device')} SM {d['sm']} L2 {d['l2'] >> 20} MB; cold copy {cp}; "
          f"percentages of {copy:.2f} TB/s")  # fmt: skip
    bad = [s for s in d.get("specials", []) if s.get("err") or s.get("gate", 0) > 1]
    print(f"special-row checks {len(d.get('specials', []))}, failed {len(bad)}")
    cells = {}
    for r in d["results"]:
        cells.setdefault((r["op"], r["rows"], r["width"], r.get("rep", "")), []).append(r)
    for (op, rows, n, rep), rs in cells.items():
        rule = next((r for r in rs if r["rule"] and r.get("us")), None)
        print(
            f"\n{op} {rows}x{n} {rep}"
            + (f"  rule {rule['us']:.1f} us" if rule else "  (rule untimed)")
        )
        for r in sorted([r for r in rs if r.get("us")], key=lambda r: r["us"]):
            ratio = rule["us"] / r["us"] if rule else 0
            print(f"  {r['us']:8.1f} [{r['p10']:7.1f}-{r['p90']:7.1f}] {r['tbps']:5.2f} TB/s "
                  f"{100 * r['tbps'] / copy:5.1f}% x{ratio:5.3f} {'*' if r['rule'] else ' '} "
                  f"{short(r['plan'])}")  # fmt: skip
        for r in rs:
            if not r.get("us"):
                print(f"  untimed: {short(r['plan'])}: {str(r.get('err'))[:120]}")


if __name__ == "__main__":
    main()
