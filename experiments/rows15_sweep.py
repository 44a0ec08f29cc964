"""Round 2 of session 15 (GPU): cooperative row plans in programs of few warps, broadly.

Round 1 (``smbwd14_sweep.py --set fwd15``, results/rows15-h200/smfwd15.jsonl) found the forward
softmax's register cooperative plan faster in 4096-wide chunks of 2 warps (64 elements a thread)
than the rule's plans at most DRAM-bound vocabulary cells (4096x131072 578.7 us vs 628.3,
4096x65537 299.2 vs 363.9), and the looped plan in 2 warps (8192-wide chunks, 2048 slices) ahead
at 151936-wide rows. This sweep times those families and their neighbours for the forward
softmax over a grid of vocabulary widths x row counts (and few-row cells of the resident range),
the same families for softmax's backward and add_rms_norm's forward at their training cells. BF16.

Timing: ``_cold.ColdLane`` (one CUDA-graph replay per sample after a 4x-L2 write and a 2x-L2
read, variants rotated, median of ``--samples``). Every variant is checked against FP64 before
timing, and its graph's output again after timing (poisoned with NaN, replayed, checked).
Cells run in the order listed; ``--budget-s`` cuts from the end, and every finished cell is
already in the JSONL.

    PYTHONPATH=src python3 experiments/rows15_sweep.py --out $OUT/rows15.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _cold import ColdLane  # noqa: E402

from warpgauge.kernels._rows import plan_for  # noqa: E402
from warpgauge.kernels.plans import RowPlan  # noqa: E402
from warpgauge.kernels.rmsnorm import add_rms_norm  # noqa: E402
from warpgauge.kernels.softmax import softmax  # noqa: E402
from warpgauge.kernels.softmax_backward import softmax_backward  # noqa: E402
from warpgauge.reference import assert_close  # noqa: E402

BF = torch.bfloat16
C = RowPlan.coop

SOFTMAX_VARIANTS = {
    "c4096w2f": C(4096, 2, fast_exp=True),
    "c2048w1f": C(2048, 1, fast_exp=True),
    "c8192w4f": C(8192, 4, fast_exp=True),
    "c2048w2f": C(2048, 2, fast_exp=True),
    "c8192w2s2048ef": C(8192, 2, sub=2048, evict=True, fast_exp=True),
    "c8192w2s4096ef": C(8192, 2, sub=4096, evict=True, fast_exp=True),
    "c16384w2s4096ef": C(16384, 2, sub=4096, evict=True, fast_exp=True),
    "c4096w1s1024ef": C(4096, 1, sub=1024, evict=True, fast_exp=True),
}
BWD_VARIANTS = {
    "c4096w4": C(4096, 4),
    "c4096w2": C(4096, 2),
    "c2048w1": C(2048, 1),
    "c8192w4s2048e": C(8192, 4, sub=2048, evict=True),
    "c8192w2s2048e": C(8192, 2, sub=2048, evict=True),
    "c16384w2s4096e": C(16384, 2, sub=4096, evict=True),
}
RMS_VARIANTS = {
    "c2048w2": C(2048, 2),
    "c4096w2": C(4096, 2),
    "c2048w1": C(2048, 1),
    "c8192w4": C(8192, 4),
    "c4096w4": C(4096, 4),
}

SUITE_SM = [(4096, 131072), (1024, 128256), (1024, 151936), (64, 131072), (64, 128256),
            (16, 262144), (8192, 32000)]  # fmt: skip
RMS_CELLS = [(4096, 131072), (64, 131072), (16, 262144), (1024, 151936), (256, 131072),
             (667, 50257), (2048, 65536), (128, 262144)]  # fmt: skip
BWD_CELLS = [(1024, 128256), (4096, 131072), (64, 131072), (1024, 151936), (256, 131072),
             (2048, 65536), (16, 262144), (512, 200064)]  # fmt: skip
GRID_W = (50257, 65536, 100352, 128256, 131072, 151936, 200064, 256000, 262144)
GRID_R = (16, 64, 256, 1024, 4096)
FEW = [(8, 32000), (32, 32000), (64, 32768), (100, 20000), (32, 24576), (128, 32064)]


def cells() -> list[tuple[str, int, int]]:
    out = [("softmax", r, n) for r, n in SUITE_SM] + [("rms", r, n) for r, n in RMS_CELLS]
    out += [("softmax_bwd", r, n) for r, n in BWD_CELLS]
    grid = [(r, n) for n in GRID_W for r in GRID_R if (r, n) not in SUITE_SM]
    return out + [("softmax", r, n) for r, n in grid + FEW]


def case(op: str, rows: int, n: int, g: torch.Generator):
    """(variants, fn(plan) -> outputs, reference outputs, compulsory GB)."""
    if op == "softmax":
        x = (torch.randn(rows, n, device="cuda", generator=g) * 3).to(BF)
        ref = (torch.softmax(x.double(), -1).to(BF),)
        return SOFTMAX_VARIANTS, lambda p: (softmax(x, plan=p),), ref, 2 * rows * n * 2 / 1e9
    if op == "softmax_bwd":
        y = torch.softmax(torch.randn(rows, n, device="cuda", generator=g) * 3, -1).to(BF)
        dy = torch.randn(rows, n, device="cuda", generator=g).to(BF)
        y64, dy64 = y.double(), dy.double()
        ref = ((y64 * (dy64 - (y64 * dy64).sum(-1, keepdim=True))).to(BF),)
        fn = lambda p: (softmax_backward(y, dy, plan=p),)  # noqa: E731
        return BWD_VARIANTS, fn, ref, 3 * rows * n * 2 / 1e9
    x, r = (torch.randn(rows, n, device="cuda", generator=g).to(BF) for _ in range(2))
    w = (1 + 0.1 * torch.randn(n, device="cuda", generator=g)).to(BF)
    h = (x.float() + r.float()).to(BF)
    h64 = h.double()
    y = (h64 * torch.rsqrt(h64.square().mean(-1, keepdim=True) + 1e-6) * w.double()).to(BF)
    fn = lambda p: add_rms_norm(x, r, w, 1e-6, plan=p)  # noqa: E731
    return RMS_VARIANTS, fn, (y, h), 4 * rows * n * 2 / 1e9


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--budget-s", type=float, default=240.0)
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    lane = ColdLane()
    g = torch.Generator(device="cuda").manual_seed(1515)
    with args.out.open("w") as f:
        for op, rows, n in cells():
            if time.time() - t0 > args.budget_s:
                print("budget reached", flush=True)
                return
            variants, fn, ref, gb = case(op, rows, n, g)
            graphs, outs = {}, {}
            for name, plan in {"rule": None, **variants}.items():
                try:
                    for o, rf in zip(fn(plan), ref, strict=True):
                        assert_close(o, rf, msg=f"{op} {name} {rows}x{n}", relative=op == "softmax")
                    graphs[name], outs[name] = lane.graph(lambda plan=plan, fn=fn: fn(plan))
                except Exception as e:  # record, keep going
                    print(f"{op} {rows}x{n} {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            us = lane.medians(graphs, args.samples)
            bad = []
            for name, gr in graphs.items():  # the replayed outputs, checked again
                for o in outs[name]:
                    o.fill_(float("nan"))
                gr.replay()
                torch.cuda.synchronize()
                try:
                    for o, rf in zip(outs[name], ref, strict=True):
                        assert_close(o, rf, msg=f"{op} {name} {rows}x{n} after timing",
                                     relative=op == "softmax")  # fmt: skip
                except AssertionError as e:
                    print(str(e)[:200], flush=True)
                    bad.append(name)
            dev_op = {"softmax": "softmax", "softmax_bwd": "softmax_bwd", "rms": "rms"}[op]
            rule = plan_for(rows, n, torch.device("cuda"), None, dev_op)
            row = {"op": op, "rows": rows, "width": n, "rule": str(rule), "gbytes": gb, "us": us,
                   "failed_after_timing": bad}  # fmt: skip
            f.write(json.dumps(row) + "\n")
            f.flush()
            best = min(us, key=us.get) if us else "-"
            print(f"{op} {rows}x{n} [{rule.kind}]: " + " ".join(f"{k} {v:.1f}" for k, v in us.items())
                  + f" | best {best}", flush=True)  # fmt: skip
            del graphs, outs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
