"""narrow12 probe: the resident plans at narrow, unaligned widths (127, 255, 1000), warm and cold.

Run 20261202-023113-default has its narrowest cells below ``torch.compile``: add_rms_norm 32x127
warm 1.61 us against 1.39 (0.86x), cold 0.92x; softmax 32x127 warm 0.93x. A contiguous row of 127
elements starts unaligned, so the rule takes the aligned-body path (``_rows.align_for``: a 120-
element body in 16-byte vectors plus an 8-lane scalar edge, two dependent index computations and
two loads) where one masked load of 128 would do. Per cell: the rule's plan, the same plan with
``align=False``, and resident plans holding 2 and 4 rows per program, each FP64-gated
(``rows5_sweep.gate``) and timed by CUDA-graph replay warm (one input) and cold (inputs rotated
over more than 3x L2).

    PYTHONPATH=src python3 experiments/narrow12_probe.py --out $OUT/narrow12.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rows5_sweep as r5  # noqa: E402

CELLS = [(32, 127), (1, 127), (256, 127), (4096, 127), (32, 255), (1024, 255), (32, 1000),
         (512, 1000), (8, 63), (64, 4097)]  # fmt: skip


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from warpgauge.kernels.plans import RowPlan

    props = torch.cuda.get_device_properties(0)
    r5.SM, l2 = props.multi_processor_count, props.L2_cache_size
    res = []
    for op in ("rms", "softmax", "row_sum"):
        for rows, n in CELLS:
            rule = RowPlan.for_shape(rows, n, r5.SM, op, l2, 2)
            plans = {"rule": rule, "no-align": dataclasses.replace(rule, align=False)}
            if rule.kind == "resident" and rule.rows == 1 and not rule.programs_per_sm:
                for k in (2, 4):
                    plans[f"rows{k}"] = dataclasses.replace(rule, rows=k)
                    plans[f"rows{k}-no-align"] = dataclasses.replace(rule, rows=k, align=False)
            size = r5.bytes_of(op, rows, n)
            cold = r5.make_inputs(op, rows, n, max(2, min(64, -(-3 * l2 // max(size // 2, 1)))))
            for name, p in plans.items():
                rec = dict(op=op, rows=rows, width=n, plan=name, repr=repr(p))
                try:
                    err, poisoned = r5.gate(op, p, cold[0])
                    rec.update(gate=err, poisoned=poisoned)
                    if err > 1 or not poisoned:
                        rec["err"] = f"gate {err:.3g}, poisoned {poisoned}"
                    else:
                        rec["warm_us"] = r5.time_plan(op, cold[:1], p, 2e-3)[0]
                        rec["cold_us"] = r5.time_plan(op, cold, p, 2e-3)[0]
                except Exception as e:  # noqa: BLE001 - recorded
                    rec["err"] = f"{type(e).__name__}: {e}"[:200]
                res.append(rec)
                print(f"{op:8s} {rows:>5d}x{n:<5d} {name:16s} warm {rec.get('warm_us', 0):6.2f} "
                      f"cold {rec.get('cold_us', 0):6.2f} {rec.get('err', '')}", flush=True)  # fmt: skip
            torch_rec = dict(op=op, rows=rows, width=n, plan="torch")
            torch_rec["warm_us"] = r5.time_plan(op, cold[:1], "torch", 2e-3)[0]
            torch_rec["cold_us"] = r5.time_plan(op, cold, "torch", 2e-3)[0]
            res.append(torch_rec)
            del cold
    with open(a.out, "w") as f:
        json.dump(dict(device=props.name, sm=r5.SM, l2=l2, torch=torch.__version__,
                       results=res), f, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
