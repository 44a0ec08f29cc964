"""Tables of the rmsfold13 sweep (any machine): per shape the separate dw pass ("old"), the
committed rule (``rmsnorm_backward.folds_dw``: the 2048 x 2-row fold at widths that are multiples
of 8, the old path otherwise) and the best variant, us, with rule / old and rule / best.

    python3 experiments/rmsfold13_analyze.py results/rmsfold13-h200/rmsfold13.jsonl
"""

from __future__ import annotations

import json
import math
import sys

RULE = "f2048r2w8k8"


def main(path: str) -> None:
    with open(path) as f:
        rows = [json.loads(line) for line in f]
    print("| shape | old (separate dw pass) | rule | best variant | rule / old | rule / best |")
    print("|---|---|---|---|---|---|")
    ratios = []
    for r in rows:
        us = r["us"]
        rule = us[RULE] if r["width"] % 8 == 0 else us["old"]
        best = min(us, key=us.get)
        ratios.append(rule / us["old"])
        print(f"| {r['rows']}x{r['width']} | {us['old']:.1f} | {rule:.1f} | {best} {us[best]:.1f} "
              f"| {rule / us['old']:.2f} | {rule / us[best]:.2f} |")  # fmt: skip
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    print(f"\n{len(rows)} shapes; rule / old geometric mean {geo:.3f}, max {max(ratios):.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
