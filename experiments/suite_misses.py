"""Every warpgauge-vs-provider ratio below 0.97 in a suite run (the 3% band of issue 9).

PYTHONPATH=src python3 -m warpgauge export RUN --format csv --out run.csv
python3 experiments/suite_misses.py run.csv
"""

from __future__ import annotations

import collections
import csv
import sys


def misses(path: str) -> list[tuple[str, str, float, float, float, float]]:
    cases = collections.defaultdict(list)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["status"] == "ok":
                cases[row["case_id"]].append(row)
    out = []
    for case, rows in sorted(cases.items()):
        wg = [r for r in rows if r["family"] == "warpgauge"]
        if not wg:
            continue
        t = float(wg[0]["device_median_us"])
        pct = float(wg[0]["pct_copy_ceiling"] or 0)
        for r in rows:
            if r["family"] == "warpgauge":
                continue
            ratio = float(r["device_median_us"]) / t
            if ratio < 0.97:
                out.append((case, r["provider"], ratio, t, float(r["device_median_us"]), pct))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    found = misses(argv[0])
    for case, prov, ratio, t, other, pct in found:
        print(f"{case:45s} {prov:38s} {ratio:.3f}  wg {t:8.2f} other {other:8.2f}  {pct:5.1f}%")
    print(len(found), "checks below 0.97;", len({m[0] for m in found}), "cases")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
