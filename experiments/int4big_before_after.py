"""Before / after table of the int4big round: for each shape of an int4big sweep file, the
reference (tinygemm for batch <= 16, dense BF16 F.linear above), the run's rule (``wg``, the old
rule) and the forced variant equal to the current rule (``Int4Plan.for_shape`` of this checkout,
on the run's SM count), cold lane, as a Markdown table.

    PYTHONPATH=src python experiments/int4big_before_after.py results/int4big-h200/int4big.json
"""

from __future__ import annotations

import json
import math
import sys

from warpgauge.kernels.int4 import Int4Plan


def variant(p: Int4Plan) -> str:
    if p.kernel != "tile":
        return "wg"
    v = f"t:{p.block_m},{p.block_n},{p.split_k},{p.num_warps},{p.num_stages},{p.mode},"
    return v + f"{int(p.fused)}" + (",m" if p.tma else "")


def main():
    with open(sys.argv[1]) as f:
        d = json.load(f)
    sm = d["sm_count"]
    by = {}
    for r in d["records"]:
        by.setdefault((r["M"], r["N"], r["K"]), {})[r["variant"]] = r
    print(
        "| shape | reference | ref us | old us | new us | new = variant | old vs ref | new vs ref |"
    )
    print("|---|---|---|---|---|---|---|---|")
    logs = []
    for (M, N, K), u in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        ref = "tinygemm" if M <= 16 else "dense"
        v = variant(Int4Plan.for_shape(M, N, K, sm))
        t_ref, t_old = u[ref]["us_cold"], u["wg"]["us_cold"]
        t_new = u[v]["us_cold"] if v in u and "us_cold" in u[v] else math.nan
        bad = "" if u[ref].get("ok") else " (fails the FP64 gate)"
        logs.append(math.log(t_old / t_new))
        print(f"| {M}x{N}x{K} | {ref}{bad} | {t_ref:.1f} | {t_old:.1f} | {t_new:.1f} | `{v}` | "
              f"{t_ref / t_old:.2f} | {t_ref / t_new:.2f} |")  # fmt: skip
    print(f"\ngeometric mean old / new: {math.exp(sum(logs) / len(logs)):.3f} over {len(logs)}")


if __name__ == "__main__":
    main()
