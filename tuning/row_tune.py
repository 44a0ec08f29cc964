"""Row-plan tuning sweep for the H200 (a tuning aid, not a harness run).

Forces row plans (RowPlan candidates and hand-picked variants) through the launchers over real
model widths and prints TB/s on compulsory bytes. Kernels are compiled first by worker processes
(each runs its share of the cases once, filling Triton's on-disk cache), then the main process
times every case: a CUDA graph of several calls, inputs rotated over copies totalling more than
twice the L2 (so DRAM-bound cases read DRAM), median of a few replays.

    PYTHONPATH=src python3 tuning/row_tune.py --out $OUT/tune.json [--set fwd|bwd|all]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

import torch

from warpgauge.kernels import rmsnorm as rms_k
from warpgauge.kernels import row_sum as row_sum_k
from warpgauge.kernels import softmax as softmax_k
from warpgauge.kernels.plans import RowPlan

SM = None
DEV = "cuda"
TRAFFIC = 256 << 20  # bytes a DRAM-bound case moves (compulsory)


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def bytes_of(op, rows, n):
    e = 2
    return {
        "softmax": 2 * rows * n * e,
        "softmax_bwd": 3 * rows * n * e,
        "rms": 4 * rows * n * e + n * e,
        "rms_bwd": 3 * rows * n * e + n * e,
        "rms_bwd_nodw": 3 * rows * n * e + n * e,
        "row_sum": rows * n * e + rows * e,
    }[op]


def make_inputs(op, rows, n, copies):
    g = torch.Generator(device=DEV).manual_seed(0)
    out = []
    for _ in range(copies):
        x = torch.randn((rows, n), device=DEV, generator=g).to(torch.bfloat16)
        if op in ("rms",) or op in ("rms_bwd", "rms_bwd_nodw"):
            out.append((x, torch.randn_like(x), torch.randn(n, device=DEV).to(torch.bfloat16)))
        elif op == "softmax_bwd":
            out.append((x.softmax(-1), torch.randn_like(x)))
        else:
            out.append((x,))
    return out


def call(op, plan, args):
    if op == "softmax":
        return softmax_k.softmax(args[0], plan=plan)
    if op == "torch_softmax":
        return torch.softmax(args[0], -1)
    if op == "softmax_bwd":
        return softmax_k.softmax_backward(args[0], args[1], plan=plan)
    if op == "rms":
        return rms_k.add_rms_norm(args[0], args[1], args[2], 1e-6, plan=plan)
    if op == "rms_bwd":
        return rms_k.add_rms_norm_backward(args[0], None, args[1], args[2], 1e-6, plan=plan)
    if op == "rms_bwd_nodw":
        return rms_k.add_rms_norm_backward(
            args[0], None, args[1], args[2], 1e-6, need_dw=False, plan=plan
        )
    if op == "row_sum":
        return row_sum_k.row_sum(args[0], plan=plan)
    raise ValueError(op)


def shapes_fwd():
    widths = [2048, 2880, 4096, 4097, 5120, 7168, 8192, 14336, 16384, 32000, 32769, 50257,
              65537, 100000, 128256, 131072, 151936, 262144]  # fmt: skip
    cells = []
    for n in widths:
        rows = max(1, TRAFFIC // (4 * n))  # softmax traffic 4 bytes/element
        cells.append((rows, n))
    cells += [(32, 127), (1024, 1024), (512, 4097), (8, 16384), (4, 32769), (64, 131072),
              (2, 1048576), (128, 32769)]  # fmt: skip
    return cells


def _uniq(plans):
    seen, out = set(), []
    for p in plans:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def variants(op, rows, n):
    """The rule's plan first, then the alternatives worth timing for this op and cell."""
    cands = RowPlan.candidates(rows, n, SM)
    rule = RowPlan.for_shape(rows, n, SM)
    keep = [rule]
    for p in cands:
        res1 = p.kind == "resident" and p.rows == 1
        if (
            res1
            and p.num_warps in (rule.num_warps // 2, rule.num_warps * 2)
            and op == "softmax"
            or p.kind == "resident"
            and 1 < p.rows <= 4
            and op != "rms_bwd"
        ):
            keep.append(p)
        elif p.kind == "looped" and rows >= SM and n > 8192 and op != "rms_bwd":
            key = (p.block, p.num_warps, p.programs_per_sm)
            lane_ok = op == "softmax" and p.block in (8192, 16384)
            if lane_ok if p.lane_stats else key in LOOPED_KEEP[op == "softmax"]:
                keep.append(p)
        elif p.kind == "split" and rows < 2 * SM and op in ("softmax", "rms"):
            keep.append(p)
    if rule.kind == "resident" and n % 8 and op in ("softmax", "rms"):
        keep.append(RowPlan(rule.kind, triton_np2(n), rule.num_warps, align=False))
    if op == "rms_bwd" and rule.kind == "resident":
        for k in (1, 4, 8):
            keep.append(RowPlan("resident", rule.block, rule.num_warps, programs_per_sm=k))
        if rule.block <= 2048:
            keep.append(RowPlan("resident", rule.block, rule.num_warps, rows=2))
    return _uniq(keep)


LOOPED_KEEP = {
    True: {(8192, 16, 0), (8192, 16, 1), (8192, 16, 2), (4096, 8, 0), (4096, 8, 2),
           (16384, 32, 1), (16384, 32, 2)},
    False: {(8192, 16, 0), (8192, 16, 2), (16384, 32, 1)},
}  # fmt: skip


def triton_np2(n):
    return 1 << (n - 1).bit_length()


def _fwd_cases(cells, big):
    cases = []
    for rows, n in cells:
        cases.append(("torch_softmax", rows, n, None))
        cases += [("softmax", rows, n, p) for p in variants("softmax", rows, n)]
        rrows = max(1, rows // 2) if big else rows  # rms moves 8 bytes per element
        cases += [("rms", rrows, n, p) for p in variants("rms", rrows, n)]
        srows = rows * 2 if big else rows  # row_sum moves 2
        cases.append(("row_sum", srows, n, RowPlan.for_shape(srows, n, SM)))
    return cases


def build_cases(which):
    """DRAM-bound forward cells first, then backward, then small forward cells (the budget
    guard cuts from the end)."""
    big = [c for c in shapes_fwd() if c[0] * c[1] * 4 >= TRAFFIC // 2]
    small = [c for c in shapes_fwd() if c not in big]
    cases = []
    if which in ("fwd", "all"):
        cases += _fwd_cases(big, True)
    if which in ("bwd", "all"):
        for rows, n in [(4096, 4096), (8192, 8192), (16384, 2048), (8192, 2880), (4096, 14336),
                        (2048, 16384), (1024, 32000), (256, 4097), (8192, 5120)]:  # fmt: skip
            cases += [("rms_bwd", rows, n, p) for p in variants("rms_bwd", rows, n)]
            cases.append(("rms_bwd_nodw", rows, n, RowPlan.for_shape(rows, n, SM)))
            cases.append(("softmax_bwd", rows, n, RowPlan.for_shape(rows, n, SM)))
    if which in ("fwd", "all"):
        cases += _fwd_cases(small, False)
    return cases


def warm_worker(chunk):
    if DEV == "cuda":
        torch.cuda.init()
    done = 0
    for op, rows, n, plan in chunk:
        try:
            args = make_inputs(op, rows, n, 1)[0]
            call(op, plan, args)
            sync()
            done += 1
        except Exception as e:  # noqa: BLE001 - reported, timed later anyway
            print(f"warm fail {op} {rows}x{n} {plan}: {type(e).__name__}: {e}"[:300], flush=True)
    return done


def time_case(op, rows, n, plan, l2):
    size = rows * n * 2
    copies = max(1, min(8, -(-3 * l2 // max(size, 1))))
    ins = make_inputs(op, rows, n, copies)
    for a in ins:
        call(op, plan, a)
    sync()
    est_t0 = time.perf_counter()
    call(op, plan, ins[0])
    sync()
    per = max(time.perf_counter() - est_t0, 5e-6)
    reps = int(max(copies, min(200, 3e-3 / per)))
    reps = -(-reps // copies) * copies
    if DEV == "cpu":  # --dry: exercise the code paths only
        return per * 1e6
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for i in range(reps):
                call(op, plan, ins[i % copies])
    sync()
    g.replay()
    sync()
    ts = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / reps)
    ts.sort()
    us = ts[len(ts) // 2]
    return us


def main():
    global SM
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--set", default="fwd")
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--budget", type=float, default=100.0)
    ap.add_argument(
        "--dry", action="store_true", help="CPU interpreter, tiny cells: test the script"
    )
    a = ap.parse_args()
    t0 = time.time()
    if a.dry:
        global DEV
        DEV, SM, l2 = "cpu", 4, 4 << 20
        cases = [c for c in build_cases(a.set) if c[2] <= 1100 and c[1] <= 64][:12]
        cases = [(op, min(rows, 3), n, p) for op, rows, n, p in cases]
    else:
        props = torch.cuda.get_device_properties(0)
        SM = props.multi_processor_count
        l2 = props.L2_cache_size
        cases = build_cases(a.set)
    print(f"{len(cases)} cases, SM={SM}, L2={l2 >> 20} MB", flush=True)
    kernels = [c for c in cases if not c[0].startswith("torch")]
    chunks = [kernels[i :: a.workers] for i in range(a.workers)]
    ctx = mp.get_context("spawn")
    with ctx.Pool(a.workers, initializer=_init_worker, initargs=(SM, DEV)) as pool:
        res = pool.map_async(warm_worker, chunks)
        try:
            print("warmed", sum(res.get(timeout=a.budget * 0.45)), flush=True)
        except mp.TimeoutError:
            print("warm-up timed out; timing what compiled", flush=True)
            pool.terminate()
    print(f"compile phase {time.time() - t0:.1f}s", flush=True)
    results = []
    for op, rows, n, plan in cases:
        if time.time() - t0 > a.budget:
            print("budget reached", flush=True)
            break
        try:
            us = time_case(op, rows, n, plan, l2)
            tbps = bytes_of(op.replace("torch_", ""), rows, n) / us / 1e6
            err = None
        except Exception as e:  # noqa: BLE001
            us, tbps, err = None, None, f"{type(e).__name__}: {e}"[:200]
        results.append(dict(op=op, rows=rows, width=n, plan=repr(plan), us=us, tbps=tbps, err=err))
        with open(a.out, "w") as f:
            json.dump(dict(sm=SM, l2=l2, results=results), f, indent=0)
    # summary: best plan per (op, shape)
    print(f"\n{'op':10s} {'shape':>14s} {'rule TB/s':>9s} {'best TB/s':>9s}  best plan")
    by = {}
    for r in results:
        by.setdefault((r["op"], r["rows"], r["width"]), []).append(r)
    for (op, rows, n), rs in by.items():
        ok = [r for r in rs if r["tbps"]]
        if not ok:
            continue
        best = max(ok, key=lambda r: r["tbps"])
        print(
            f"{op:10s} {rows:>6d}x{n:<7d} {ok[0]['tbps']:9.3f} {best['tbps']:9.3f}  {best['plan']}"
        )
    print(f"total {time.time() - t0:.1f}s")


def _init_worker(sm, dev):
    global SM, DEV
    SM, DEV = sm, dev
    os.environ.setdefault("PYTHONUNBUFFERED", "1")


if __name__ == "__main__":
    sys.exit(main())
