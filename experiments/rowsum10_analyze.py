"""Summarize a rowsum10 sweep (experiments/rowsum10_sweep.py --set r2): per cell and lane, the
new rule's plan (``new``, and ``public``: warpgauge.row_sum captured as the harness does), main's
rule on main's kernels (``old``), torch and torch.compile, as medians (us), ratios other / new
(> 1: the new rule is faster) and % of a copy ceiling (read + write bytes of a copy; a pure
read can pass it).

    python3 experiments/rowsum10_analyze.py results/rowsum10-h200/round2/rowsum10.json --copy 4.39
"""

from __future__ import annotations

import argparse
import json

TORCH = ("torch", "native", "compile", "compile_ma")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--copy", type=float, default=0.0, help="TB/s (default: the run's own)")
    a = ap.parse_args()
    with open(a.path) as fh:
        d = json.load(fh)
    copy = a.copy or d.get("copy_tbps") or 0.0
    by: dict = {}
    for r in d["results"]:
        by.setdefault((r["rows"], r["width"]), {})[r["provider"]] = r
    print(f"copy ceiling used: {copy:.2f} TB/s; run's own: {d.get('copy_tbps', 0):.2f}")
    bad = [(k, n, r.get("err")) for k, g in by.items() for n, r in g.items()
           if r.get("err") or (r.get("gate_after") or 0) > 1 or r.get("repeat_identical") is False]  # fmt: skip
    print(f"gate failures / errors / non-identical repeats: {bad if bad else 'none'}")
    for lane in ("clean", "dirty"):
        print(f"\n== {lane} lane (median us; ratios other/new)")
        print(f"{'cell':>13s} {'MB':>6s} {'new':>7s} {'old':>7s} {'old/new':>7s} {'public':>7s} "
              f"{'torch':>7s} {'native':>7s} {'comp':>7s} {'comp_ma':>7s} {'best_pt/new':>11s} "
              f"{'%copy':>6s}  other plans")  # fmt: skip
        for (rows, n), g in by.items():
            if lane not in g.get("new", {}):
                continue
            mb = 2 * rows * n / 1e6
            new = g["new"][lane]["med"]

            def us(name, g=g, lane=lane):
                return (
                    f"{g[name][lane]['med']:7.2f}" if name in g and lane in g[name] else "      -"
                )

            old = g["old"][lane]["med"] if "old" in g and lane in g["old"] else None
            pts = [(g[p][lane]["med"], p) for p in TORCH if p in g and lane in g[p]]
            best = min(pts) if pts else None
            pc = 100 * g["new"][lane]["tbps"] / copy if copy else 0
            others = sorted((r[lane]["med"], k) for k, r in g.items()
                            if lane in r and k not in TORCH + ("new", "old", "public"))  # fmt: skip
            print(f"{rows:>6d}x{n:<6d} {mb:6.1f} {new:7.2f} {us('old')} "
                  f"{(old / new if old else 0):7.3f} {us('public')} {us('torch')} {us('native')} "
                  f"{us('compile')} {us('compile_ma')} "
                  f"{(f'{best[0] / new:.3f} {best[1]}' if best else '-'):>11s} {pc:5.1f}%  "
                  + " ".join(f"{k}={t:.2f}" for t, k in others))  # fmt: skip


if __name__ == "__main__":
    main()
