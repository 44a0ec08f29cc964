"""Read rmsbwd_sweep.py's sweep.jsonl: per-shape best candidate, and each candidate's regret
(its time / the shape's best time - 1) over the shapes it ran on, in a lane.

    python3 experiments/rmsbwd_pick.py /work/exchange/rmsbwd/out-1/sweep.jsonl [--lane rot_us]
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict


def load(path: str) -> list[dict]:
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def table(recs: list[dict], lane: str) -> dict:
    by: dict = defaultdict(dict)
    for r in recs:
        if r["kind"] == "bwd" and lane in r:
            by[(r["rows"], r["width"])][r["cand"]] = r[lane]
    return by


def regret(by: dict, names=None) -> dict:
    out: dict = defaultdict(list)
    for shape, c in by.items():
        best = min(c.values())
        for k, v in c.items():
            if names is None or k in names:
                out[k].append((v / best - 1.0, shape))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--lane", default="rot_us")
    args = ap.parse_args()
    recs = load(args.path)
    by = table(recs, args.lane)
    print(f"lane {args.lane}: {len(by)} shapes")
    for (rows, n), c in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        best = min(c, key=c.get)
        o, nw = c.get("old"), c.get("new")
        top = sorted(c.items(), key=lambda kv: kv[1])[:3]
        print(f"{rows:>6}x{n:<6} old {o or 0:8.2f} new {nw or 0:8.2f} best {best:>12} "
              f"{c[best]:8.2f}  top3 " + " ".join(f"{k}:{v:.2f}" for k, v in top))  # fmt: skip
    print("\ncandidate: shapes, mean regret, p90, worst (shape)")
    for k, v in sorted(regret(by).items(), key=lambda kv: sum(x for x, _ in kv[1]) / len(kv[1])):
        xs = sorted(x for x, _ in v)
        worst = max(v)
        p90 = xs[min(len(xs) - 1, math.ceil(0.9 * len(xs)) - 1)]
        print(f"{k:>14} {len(v):4d} {sum(xs) / len(xs):7.3f} {p90:7.3f} {worst[0]:7.3f} "
              f"{worst[1][0]}x{worst[1][1]}")  # fmt: skip


if __name__ == "__main__":
    main()
