"""Softmax backward plans at widths past the resident range (GPU; session 14).

The training run 20261202-045720-training measured softmax forward + backward at 1024x128256
in 483 us against 367 for QuACK (0.76x). The backward's rule takes the looped plan there (one
program per row, two passes over the row's y and dy), whose second pass misses L2 when hundreds
of 500 KB rows are in flight, and the split plan for few rows (two launches, y and dy read
twice). This sweep times the backward alone (``softmax_backward``, BF16) for the rule's plan, the
persistent looped plan, the split plan and cooperative plans (``_softmax_bwd_coop``: chunks held
in registers, or walked in slices twice), cold: before each sample a write of 4x L2 and a read of
a separate 2x-L2 buffer, then one CUDA-graph replay of one backward between events; variants
interleaved sample by sample (rotated); median of ``--samples``. Every variant is checked
against an FP64 reference before timing, and its graph's output again after timing (poisoned
with NaN, replayed, checked).

    PYTHONPATH=src python3 experiments/smbwd14_sweep.py --out $OUT/smbwd14.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from warpgauge.kernels.plans import RowPlan
from warpgauge.kernels.softmax import softmax
from warpgauge.kernels.softmax_backward import softmax_backward
from warpgauge.reference import assert_close

BF = torch.bfloat16
ROWS = (1, 8, 64, 256, 1024, 4096)
WIDTHS = (32769, 50257, 65537, 100003, 128256, 131072, 151936, 262144)
EXTRA = ((8, 20000), (64, 20000), (8, 32000), (64, 32000), (1024, 32000))  # resident range


ROUND2_CELLS = [(r, w) for w in (32769, 65537, 128256, 131072, 151936, 262144)
                for r in (64, 256, 1024, 4096)] + [(1, 131072), (8, 131072), (16, 65537),
                                                   (32, 128256)]  # fmt: skip


def variants_r2() -> dict[str, RowPlan]:
    """Round 2: the looped cooperative family that won round 1 (chunk, slice, warps, hints)."""
    c = RowPlan.coop
    return {
        "rule": None,
        "c4096w4": c(4096, 4),
        "c16384w8s4096e": c(16384, 8, sub=4096, evict=True),
        "c16384w8s4096": c(16384, 8, sub=4096),
        "c16384w8s2048e": c(16384, 8, sub=2048, evict=True),
        "c16384w8s8192e": c(16384, 8, sub=8192, evict=True),
        "c16384w4s4096e": c(16384, 4, sub=4096, evict=True),
        "c16384w16s4096e": c(16384, 16, sub=4096, evict=True),
        "c8192w4s2048e": c(8192, 4, sub=2048, evict=True),
        "c8192w8s4096e": c(8192, 8, sub=4096, evict=True),
        "c32768w8s4096e": c(32768, 8, sub=4096, evict=True),
    }


FWD_CELLS = [(4096, 131072), (1024, 128256), (1024, 151936), (512, 262144), (4096, 65537),
             (1024, 65537), (2048, 100003), (1335, 50257), (256, 131072), (523, 128256),
             (64, 131072), (64, 128256), (16, 262144), (8192, 32000)]  # fmt: skip
CONFIRM_CELLS = [(1, 1048576), (2, 1048576), (200, 1048576), (16, 262144), (2, 262144)]


def variants_fwd() -> dict[str, RowPlan]:
    """--set fwd: the forward softmax's looped cooperative plan against the backward's B14
    winner (8192-wide chunks in 2048 slices, 4 warps) and neighbours, all with ex2 exps."""
    c = RowPlan.coop
    return {
        "rule": None,
        "c4096w4f": c(4096, 4, fast_exp=True),
        "c16384w8s4096ef": c(16384, 8, sub=4096, evict=True, fast_exp=True),
        "c8192w4s2048ef": c(8192, 4, sub=2048, evict=True, fast_exp=True),
        "c8192w8s2048ef": c(8192, 8, sub=2048, evict=True, fast_exp=True),
        "c8192w4s4096ef": c(8192, 4, sub=4096, evict=True, fast_exp=True),
        "c16384w4s4096ef": c(16384, 4, sub=4096, evict=True, fast_exp=True),
        "c4096w4s1024ef": c(4096, 4, sub=1024, evict=True, fast_exp=True),
    }


def variants_fwd15() -> dict[str, RowPlan]:
    """--set fwd15 (session 15): the forward's register cooperative plan in 2-warp programs
    (32 elements a thread in more, smaller programs per SM: the change that moved add_rms_norm's
    coop from 91.6% to 95.4% of the copy ceiling, ``COOP_RMS_SMALL``), against the rule and the
    looped plan that led the fwd set (16384/4, sub 4096)."""
    c = RowPlan.coop
    return {
        "rule": None,
        "c4096w4f": c(4096, 4, fast_exp=True),
        "c2048w2f": c(2048, 2, fast_exp=True),
        "c2048w4f": c(2048, 4, fast_exp=True),
        "c1024w1f": c(1024, 1, fast_exp=True),
        "c4096w2f": c(4096, 2, fast_exp=True),
        "c16384w4s4096ef": c(16384, 4, sub=4096, evict=True, fast_exp=True),
        "c8192w2s2048ef": c(8192, 2, sub=2048, evict=True, fast_exp=True),
    }


FWD15_CELLS = FWD_CELLS[:4] + [(64, 131072), (1335, 50257), (4096, 65537), (2048, 100003),
                               (256, 131072), (16, 262144), (64, 128256), (523, 128256),
                               (4096, 151936), (128, 50257)]  # fmt: skip


RES_CELLS = [(r, w) for w in (2048, 2880, 4096, 5120, 7168, 8192, 14336, 16384, 32000)
             for r in (512, 2048, 8192)]  # fmt: skip


def variants_res(width: int) -> dict[str, RowPlan]:
    """--set res: the resident backward's warps (the rule: plans._warps of the body) and the
    cooperative plans, at hidden and vocabulary widths within the resident range."""
    out: dict[str, RowPlan | None] = {"rule": None}
    body = RowPlan.resident(width).block
    for w in (4, 8, 16, 32):
        if 32 * w <= body and body // (32 * w) <= 64:
            out[f"r{w}"] = RowPlan.resident(width, num_warps=w)
    if width > 4096:
        out["c4096w4"] = RowPlan.coop(4096, 4)
        out["c8192w4s2048e"] = RowPlan.coop(8192, 4, sub=2048, evict=True)
    return out


def variants(rows: int, width: int, sm: int, rnd: str = "r1") -> dict[str, RowPlan]:
    if rnd == "res":
        return variants_res(width)
    if rnd == "r2":
        return variants_r2()
    if rnd == "fwd":
        return variants_fwd()
    if rnd == "fwd15":
        return variants_fwd15()
    if rnd == "confirm":
        return {"rule": None, "split": RowPlan.split_for(rows, width, sm),
                "c4096w4": RowPlan.coop(4096, 4),
                "c8192w4s2048e": RowPlan.coop(8192, 4, sub=2048, evict=True)}  # fmt: skip
    out = {
        "rule": None,
        "looped1": RowPlan.looped(8192, 16, programs_per_sm=1, evict=True),
        "split": RowPlan.split_for(rows, width, sm),
        "c1024w2": RowPlan.coop(1024, 2),
        "c2048w4": RowPlan.coop(2048, 4),
        "c4096w4": RowPlan.coop(4096, 4),
        "c4096w8": RowPlan.coop(4096, 8),
        "c8192w8": RowPlan.coop(8192, 8),
        "c16384w8s4096": RowPlan.coop(16384, 8, sub=4096, evict=True),
        "c32768w16s8192": RowPlan.coop(32768, 16, sub=8192, evict=True),
    }
    return out


def reference(y, dy):
    y64, dy64 = y.double(), dy.double()
    return (y64 * (dy64 - (y64 * dy64).sum(-1, keepdim=True))).to(y.dtype)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--budget-s", type=float, default=240.0)
    ap.add_argument(
        "--set",
        default="r1",
        choices=("r1", "r2", "fwd", "fwd15", "confirm", "res"),
        help="r2: ROUND2_CELLS x variants_r2; fwd: the forward softmax at FWD_CELLS; "
        "fwd15: FWD15_CELLS x variants_fwd15; confirm: the backward at CONFIRM_CELLS; "
        "res: RES_CELLS x variants_res",
    )
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    props = torch.cuda.get_device_properties(0)
    l2, sm = props.L2_cache_size, props.multi_processor_count
    flush = torch.empty(4 * l2, dtype=torch.uint8, device="cuda")
    clean = torch.ones(2 * l2 // 4, dtype=torch.float32, device="cuda").view(-1, 1024)
    sink = torch.empty(1024, dtype=torch.float32, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(14)
    first = [(1024, 128256), (64, 131072), (4096, 131072), (1024, 151936)]  # suite shapes first
    cells = first + [(r, w) for w in WIDTHS for r in ROWS if (r, w) not in first] + list(EXTRA)
    if args.set == "r2":
        cells = first + [c for c in ROUND2_CELLS if c not in first]
    fwd = args.set in ("fwd", "fwd15")
    if fwd:
        cells = FWD_CELLS if args.set == "fwd" else FWD15_CELLS
    if args.set == "confirm":
        cells = CONFIRM_CELLS
    if args.set == "res":
        cells = RES_CELLS
    with args.out.open("w") as f:
        for rows, n in cells:
            if time.time() - t_start > args.budget_s:
                print("budget reached", flush=True)
                return
            x = torch.randn(rows, n, device="cuda", generator=g) * 3
            y = torch.softmax(x, -1).to(BF)
            dy = torch.randn(rows, n, device="cuda", generator=g).to(BF)
            if fwd:  # the forward reads x (BF16) and writes y
                y = x.to(BF)
                ref = torch.softmax(y.double(), -1).to(BF)
            del x
            if not fwd:
                ref = reference(y, dy)
            graphs, plans = {}, {}
            for name, plan in variants(rows, n, sm, args.set).items():
                if fwd:
                    fn = lambda plan=plan, y=y: softmax(y, plan=plan)  # noqa: E731
                else:
                    fn = lambda plan=plan, y=y, dy=dy: softmax_backward(y, dy, plan=plan)  # noqa: E731
                try:
                    assert_close(fn(), ref, msg=f"{name} {rows}x{n}", relative=fwd)
                except Exception as e:  # record, keep going
                    print(f"{rows}x{n} {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                    continue
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    fn()
                    gr = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(gr, stream=s):
                        out = fn()
                torch.cuda.current_stream().wait_stream(s)
                torch.cuda.synchronize()
                graphs[name], plans[name] = (gr, out), plan
            times = {k: [] for k in graphs}
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
            for i in range(args.samples):
                names = list(graphs)
                names = names[i % len(names) :] + names[: i % len(names)]
                for name in names:
                    flush.fill_(0x5A)
                    torch.sum(clean, dim=0, out=sink)
                    ev[0].record()
                    graphs[name][0].replay()
                    ev[1].record()
                    torch.cuda.synchronize()
                    times[name].append(ev[0].elapsed_time(ev[1]) * 1e3)
            for name, (gr, out) in graphs.items():  # the replayed output, checked again
                out.fill_(float("nan"))
                gr.replay()
                torch.cuda.synchronize()
                assert_close(out, ref, msg=f"{name} {rows}x{n} after timing", relative=fwd)
            from warpgauge.kernels._rows import plan_for

            rule = plan_for(rows, n, y.device, None, "softmax" if fwd else "softmax_bwd")
            row = {"rows": rows, "width": n, "rule": str(rule),
                   "us": {k: statistics.median(v) for k, v in times.items()},
                   "gbytes": (2 if fwd else 3) * rows * n * 2 / 1e9, "op": "fwd" if fwd else "bwd"}  # fmt: skip
            f.write(json.dumps(row) + "\n")
            f.flush()
            best = min(row["us"], key=row["us"].get)
            print(f"{rows}x{n} [{rule.kind}]: " + " ".join(f"{k} {v:.1f}" for k, v in row["us"].items())
                  + f" | best {best}", flush=True)  # fmt: skip
            del graphs, y, dy, ref
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
