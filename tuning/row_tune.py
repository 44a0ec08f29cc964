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

import warpgauge as wg
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
        "rms_bwd": 4 * rows * n * e + n * e,
        "train_rms": 8 * rows * n * e + 2 * n * e,
        "train_softmax": 5 * rows * n * e,
        "rms_bwd_nodw": 3 * rows * n * e + n * e,
        "row_sum": rows * n * e + rows * e,
    }[op]


def make_inputs(op, rows, n, copies):
    g = torch.Generator(device=DEV).manual_seed(0)
    out = []
    for _ in range(copies):
        x = torch.randn((rows, n), device=DEV, generator=g).to(torch.bfloat16)
        if op in ("rms", "rms_bwd_nodw"):
            out.append((x, torch.randn_like(x), torch.randn(n, device=DEV).to(torch.bfloat16)))
        elif op == "rms_bwd":
            out.append((x, torch.randn_like(x), torch.randn(n, device=DEV).to(x.dtype),
                        torch.randn_like(x)))  # fmt: skip
        elif op == "train_rms":
            w = torch.randn(n, device=DEV).to(x.dtype)
            leaves = [t.requires_grad_() for t in (x, torch.randn_like(x), w)]
            out.append((*leaves, torch.randn_like(x), torch.randn_like(x)))
        elif op == "train_softmax":
            out.append((x.requires_grad_(), torch.randn_like(x)))
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
    if op == "rms_bwd":  # with dh, as in a training step whose loss reads h
        return rms_k.add_rms_norm_backward(args[0], args[3], args[1], args[2], 1e-6, plan=plan)
    if op == "train_rms":
        x, r, w, gy, gh = args
        y, h = wg.add_rms_norm(x, r, w)
        return torch.autograd.grad((y, h), (x, r, w), (gy, gh))
    if op == "train_softmax":
        x, gy = args
        return torch.autograd.grad(wg.softmax(x), x, gy)
    if op == "rms_bwd_nodw":
        return rms_k.add_rms_norm_backward(
            args[0], None, args[1], args[2], 1e-6, need_dw=False, plan=plan
        )
    if op == "row_sum":
        return row_sum_k.row_sum(args[0], plan=plan)
    raise ValueError(op)


WIDE_WIDTHS = [2048, 2880, 3584, 4096, 4097, 5120, 7168, 8192, 11008, 14336, 16384, 18432,
               24576, 32000, 32769, 50257, 65537, 100000, 128256, 131072, 151936, 200003,
               262144]  # fmt: skip
FEW_ROWS = [(1, 32000), (4, 32769), (16, 65536), (32, 128256), (64, 131072), (100, 65537),
            (128, 32769), (16, 262144), (2, 1048576), (8, 16384), (64, 50257), (40, 24576),
            (96, 151936), (1, 1048576)]  # fmt: skip
SMALL = [(32, 127), (1024, 1024), (512, 4097), (8, 4096), (1, 4096), (3000, 1000), (64, 2880)]
BWD = [(4096, 4096), (8192, 8192), (16384, 2048), (8192, 2880), (4096, 14336), (2048, 16384),
       (1024, 32000), (8192, 5120), (4096, 7168), (512, 4097), (4096, 3584)]  # fmt: skip
TRAIN = [(4096, 4096), (8192, 8192), (16384, 2048), (4096, 14336), (8192, 5120)]


def dram_rows(op, n):
    per = {"softmax": 4, "rms": 8, "row_sum": 2}[op]  # compulsory bytes per element
    return max(1, TRAFFIC // (per * n))


def _uniq(plans):
    seen, out = set(), []
    for p in plans:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def variants(op, rows, n):
    """The rule's plan first, then the alternatives worth timing for this op and cell."""
    rule = RowPlan.for_shape(rows, n, SM, op)
    keep = [rule]
    for p in RowPlan.candidates(rows, n, SM, op):
        if p.kind == "resident":
            if op in ("softmax", "rms") and p.programs_per_sm:
                keep.insert(1, p)
            elif op == "rms_bwd":
                same = (p.num_warps, p.prefetch) == (rule.num_warps, rule.prefetch)
                if (same and p.programs_per_sm in (1, 2, 4)) or p.programs_per_sm == 1:
                    keep.append(p)
            elif (p.rows == 1 and p.num_warps in (rule.num_warps // 2, rule.num_warps * 2)) or (
                1 < p.rows <= 4 and p.block <= 1024
            ):
                keep.append(p)
        elif p.kind == "looped" and rows >= SM and n > 16384:
            key = (p.block, p.num_warps, p.programs_per_sm, p.lane_stats)
            if key in LOOPED_KEEP.get(op, ()):
                keep.append(p)
        elif p.kind == "split" and op == "row_sum" and rows >= 2 * SM:
            keep.append(p)
        elif p.kind == "split" and rows < 2 * SM:
            per_sm = -(-p.split * rows // SM)
            if p.block in (2048, 4096) and (op != "row_sum" or per_sm >= 8) and per_sm >= 6:
                keep.append(p)
    if op == "softmax" and rows >= SM and n > 16384:
        keep.append(RowPlan.looped(8192, 16, programs_per_sm=3, evict=True))
        keep.append(RowPlan.looped(8192, 16, programs_per_sm=3, evict=True, lane_stats=True))
    if rule.kind == "resident" and n % 8 and op in ("softmax", "rms", "row_sum"):
        keep.insert(1, RowPlan(rule.kind, triton_np2(n), rule.num_warps, align=False))
    return _uniq(keep)[: CAP.get(op, 99)]


CAP = {"softmax": 12, "rms": 7, "row_sum": 7}  # variants per cell (compile budget)


LOOPED_KEEP = {
    "softmax": {(8192, 16, 0, False), (8192, 16, 2, False), (16384, 32, 1, False),
                (16384, 32, 2, False), (8192, 16, 2, True), (16384, 32, 2, True)},
    "rms": {(8192, 16, 0, False), (8192, 16, 1, False), (8192, 16, 2, False),
            (16384, 32, 1, False), (16384, 32, 2, False)},
    "row_sum": {(8192, 16, 0, False), (16384, 32, 0, False), (4096, 8, 0, False),
                (8192, 16, 1, False)},
}  # fmt: skip


def triton_np2(n):
    return 1 << (n - 1).bit_length()


def _cell_cases(op, rows, n):
    out = [(op, rows, n, p) for p in variants(op, rows, n)]
    if op == "softmax":
        out.insert(0, ("torch_softmax", rows, n, None))
    return out


def build_cases(which):
    """DRAM-bound forward cells first, then backward and training steps, then few-row and small
    cells (the budget guard cuts from the end)."""
    cases = []
    if which in ("fwd", "all"):
        for n in WIDE_WIDTHS:
            for op in ("softmax", "rms", "row_sum"):
                cases += _cell_cases(op, dram_rows(op, n), n)
    if which in ("bwd", "all"):
        for rows, n in BWD:
            cases += [("rms_bwd", rows, n, p) for p in variants("rms_bwd", rows, n)]
            cases.append(("rms_bwd_nodw", rows, n, RowPlan.for_shape(rows, n, SM, "rms_bwd")))
            cases.append(("softmax_bwd", rows, n, RowPlan.for_shape(rows, n, SM, "softmax_bwd")))
        for rows, n in TRAIN:
            cases += [("train_rms", rows, n, None), ("train_softmax", rows, n, None)]
    if which in ("fwd", "all"):
        for rows, n in FEW_ROWS + SMALL:
            for op in ("softmax", "rms", "row_sum"):
                cases += _cell_cases(op, rows, n)
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


def check(op, plan, args):
    """Gate: the plan's output against the FP64 reference (worst err/allowed; <= 1 passes)."""
    from warpgauge import reference as ref

    if op.startswith("train") or op.startswith("torch"):
        return None
    keep = max(1, (1 << 22) // args[0].shape[-1])  # check a slice of rows: same kernel
    args = tuple(a[:keep].contiguous() if a.dim() == 2 else a for a in args)
    out = call(op, plan, args)
    if op == "softmax":
        checks = [ref.compare(out, ref.softmax_ref(args[0]), relative=True)]
    elif op == "rms":
        y_ref, h_ref = ref.add_rms_norm_ref(*args, 1e-6)
        checks = [ref.compare(out[0], y_ref), ref.compare(out[1], h_ref)]
    elif op == "row_sum":
        checks = [ref.compare(out, ref.row_sum_ref(args[0]))]
    elif op == "softmax_bwd":
        checks = [ref.compare(out, ref.softmax_bwd_ref(*args))]
    elif op in ("rms_bwd", "rms_bwd_nodw"):
        dy, h, w = args[0], args[1], args[2]
        dh = args[3] if op == "rms_bwd" else None
        h64 = h.double()
        rstd = torch.rsqrt(h64.square().mean(-1, keepdim=True) + 1e-6)
        wdy = w.double() * dy.double()
        dx = rstd * wdy - rstd**3 * h64 * (h64 * wdy).mean(-1, keepdim=True)
        if dh is not None:
            dx = dx + dh.double()
        checks = [ref.compare(out[0], dx.to(h.dtype))]
        if op == "rms_bwd":
            dw = (dy.double() * h64 * rstd).sum(0).to(w.dtype)
            checks.append(ref.compare(out[1], dw))
    else:
        return None
    return max(c.worst_ratio if c.ok else max(c.worst_ratio, 1e9 * (not c.ok)) for c in checks)


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
        return per * 1e6, check(op, plan, ins[0])
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
    del g
    return us, check(op, plan, ins[0])


def main():
    global SM
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--set", default="fwd")
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--budget", type=float, default=100.0)
    ap.add_argument("--wait-file", default="", help="wait for this file before timing")
    ap.add_argument(
        "--dry", action="store_true", help="CPU interpreter, tiny cells: test the script"
    )
    a = ap.parse_args()
    t0 = time.time()
    if a.dry:
        global DEV
        DEV, SM, l2 = "cpu", 4, 4 << 20
        cases = [c for c in build_cases(a.set) if c[2] <= 4100 and c[1] <= 64][:16]
        cases += [("train_rms", 3, 40, None), ("train_softmax", 3, 40, None)]
        cases += [("rms_bwd", 3, 40, None), ("softmax_bwd", 3, 40, None)]
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
            print("warmed", sum(res.get(timeout=a.budget * 0.55)), flush=True)
        except mp.TimeoutError:
            print("warm-up timed out; timing what compiled", flush=True)
            pool.terminate()
    print(f"compile phase {time.time() - t0:.1f}s", flush=True)
    while a.wait_file and not os.path.exists(a.wait_file) and time.time() - t0 < a.budget * 0.6:
        time.sleep(0.25)  # other GPU work (the tests) must finish before timing starts
    print(f"timing starts at {time.time() - t0:.1f}s", flush=True)
    results = []
    for op, rows, n, plan in cases:
        if time.time() - t0 > a.budget:
            print("budget reached", flush=True)
            break
        try:
            us, gate = time_case(op, rows, n, plan, l2)
            tbps = bytes_of(op.replace("torch_", ""), rows, n) / us / 1e6
            err = None if gate is None or gate <= 1 else f"gate failed: err/allowed {gate:.3g}"
        except Exception as e:  # noqa: BLE001
            us, tbps, gate, err = None, None, None, f"{type(e).__name__}: {e}"[:200]
        if err:
            print(f"FAIL {op} {rows}x{n} {plan}: {err}", flush=True)
        results.append(
            dict(op=op, rows=rows, width=n, plan=repr(plan), us=us, tbps=tbps, gate=gate, err=err)
        )
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
