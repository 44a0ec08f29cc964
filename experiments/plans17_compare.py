"""The rule a partial plans-mode run recorded (measured in that run) against the same rule
repriced on a full earlier grid, cell for cell, per hash half: does repricing a checkout's rule
on an old grid (``warpgauge plans-report``'s "this checkout's rule") predict what the rule
measures when it runs? Session 17 (results/plans17-h200/README.md).

    PYTHONPATH=src python3 experiments/plans17_compare.py FULL_RUN PARTIAL_RUN [PARTIAL_RUN ...]
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from warpgauge.bench.modes import regret
from warpgauge.bench.modes.plans import checkout_choice


def _fmt(s: dict) -> str:
    if not s["n"]:
        return f"no cells (missing {s['missing']})"
    return (f"mean {s['mean'] * 100:.1f}% / p90 {s['p90'] * 100:.1f}% / over 10%: "
            f"{s['over_10pct']} (n {s['n']}, missing {s['missing']})")  # fmt: skip


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    full = {(c.op, c.label): c for c in regret.load_cells(argv[0])}
    for path in argv[1:]:
        part = [c for c in regret.load_cells(path) if (c.op, c.label) in full]
        print(f"{Path(path).name} ({len(part)} cells, against {Path(argv[0]).name})")
        for h in (0, 1, None):
            cs = [c for c in part if h is None or c.half() == h]
            old = [full[(c.op, c.label)] for c in cs]
            print(f"  half {'both' if h is None else h}:")
            print("    rule measured in this run:", _fmt(regret.score(cs, regret.current)))
            print(
                "    checkout's rule repriced on the full run:",
                _fmt(regret.score(old, checkout_choice)),
            )
            print("    the full run's own rule:", _fmt(regret.score(old, regret.current)))
        r = [c.rule_us / full[(c.op, c.label)].rule_us for c in part
             if c.rule_us and full[(c.op, c.label)].rule_us]  # fmt: skip
        if r:
            print(f"  rule time, this run / the full run: geometric mean {statistics.geometric_mean(r):.3f}"
                  f" (min {min(r):.3f}, max {max(r):.3f}, {len(r)} cells)")  # fmt: skip
        worst = sorted(part, key=lambda c: -(c.times.get(c.rule_key, c.best) / c.best))[:8]
        for c in worst:
            reg = c.times.get(c.rule_key, c.best) / c.best - 1
            print(f"    {c.op} {c.label}: {c.rule_key} {reg * 100:.1f}% (best {c.best_key})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
