"""Summaries of an int4big sweep file (``experiments/int4big_sweep.py``): per shape the baselines,
the rule of the run (``wg``) and the best exact candidate; per candidate family (the variant with
its split replaced by ``*``) the geometric mean of best-time / its time over the shapes of a batch
class, so a rule can be read off families instead of single shapes.

    python experiments/int4big_summarize.py results/int4big-h200/int4big.json [--lane rot]
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict


def family(v):
    if not v.startswith("t:"):
        return v
    p = v[2:].split(",")
    p[2] = "*"
    return "t:" + ",".join(p)


def rounded(v):
    return v == "dense" or (v.startswith("t:") and v.split(",")[5] == "2")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--lane", default="cold", choices=["cold", "rot"])
    a = ap.parse_args()
    with open(a.path) as f:
        d = json.load(f)
    recs = d["records"] if isinstance(d, dict) else d
    key = f"us_{a.lane}"
    by = defaultdict(dict)
    for r in recs:
        if key in r and (r.get("ok") or r["variant"] in ("tinygemm", "dense")):
            by[(r["M"], r["N"], r["K"])][r["variant"]] = r[key]
    print(f"{'shape':18} {'tiny':>6} {'dense':>6} {'wg':>6} {'best':>6} {'wg/ref':>6} "
          f"{'best/ref':>8} {'rnd/ref':>7}  best exact variant")  # fmt: skip
    fam = defaultdict(lambda: defaultdict(list))
    for (M, N, K), u in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        ours = {
            v: t for v, t in u.items() if (v == "wg" or v[:2] in ("t:", "p:")) and not rounded(v)
        }
        if not ours:
            continue
        b = min(ours, key=ours.get)
        ref = u.get("tinygemm" if M <= 16 else "dense", float("nan"))
        rnd = min((t for v, t in u.items() if v.startswith("t:") and rounded(v)), default=math.nan)
        wg = u.get("wg", math.nan)
        print(f"{M}x{N}x{K:<8} {u.get('tinygemm', 0):6.1f} {u.get('dense', 0):6.1f} {wg:6.1f} "
              f"{ours[b]:6.1f} {ref / wg:6.2f} {ref / ours[b]:8.2f} {ref / rnd:7.2f}  {b}")  # fmt: skip
        cls = "2-16" if M <= 16 else ("17-64" if M <= 64 else "65-256")
        for v, t in ours.items():
            fam[cls][family(v)].append((ours[b] / t, (M, N, K)))
    for cls, fs in fam.items():
        n = max(len(x) for x in fs.values())
        print(f"\nbatch {cls}: families by geomean(best / t) over the {n} shapes they all ran")
        rows = []
        for f, xs in fs.items():
            g = math.exp(sum(math.log(r) for r, _ in xs) / len(xs))
            rows.append((g, len(xs), min(r for r, _ in xs), f))
        for g, c, lo, f in sorted(rows, reverse=True)[:12]:
            print(f"  {g:5.3f} (n={c:2d}, worst {lo:4.2f})  {f}")


if __name__ == "__main__":
    main()
