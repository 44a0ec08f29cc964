"""rows5 sweep: forward row plans (softmax, add_rms_norm, row_sum; BF16) on a broad shape grid.

Families (SM count and L2 size are read from the device; row counts that depend on the SM count
are written as multiples of it):

- wide rows, many: widths 32769-262144 (vocabulary sizes, odd and power-of-two widths) at a
  DRAM-bound row count (256 MB of compulsory traffic) and at 2 x SM rows; 4096x131072 and
  1024x151936 (the README's losing cells);
- wide rows, few: widths 16385-262144 at 1, 4, 16, 64 rows and 3/4 x SM rows; 1048576 at 1, 2, 8;
- narrow rows (hidden sizes 2048-16384) at 1, 64 rows and DRAM-bound counts: the rule only
  (a regression check of the resident plans).

Each cell times the rule's plan, the candidate plans of its op and width (the same set for every
row count, so a plan's compile serves all of a width's cells), and the in-process PyTorch
baseline (``torch.softmax``; ``x + r`` then ``F.rms_norm``; ``x.sum(-1)``). Every plan is gated
against the FP64 reference before it is timed (outputs land on freed NaN-filled memory where the
caching allocator allows, recorded as ``poisoned``); a failing plan is recorded, never timed.
Timing: ``experiments/graph_timer.bench_graph`` (CUDA-graph replay), calls rotating over input
copies totalling more than 3x L2. Kernels are compiled first by worker processes (one key per
op, width and plan), and only compiled plans are timed. JSON is rewritten after every cell; a
summary comes last.

    PYTHONPATH=src python3 experiments/rows5_sweep.py --out $OUT/rows5.json --budget 95
    PYTHONPATH=src TRITON_INTERPRET=1 python3 experiments/rows5_sweep.py --out /tmp/r.json --smoke
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

SM = None
DEV = "cuda"
TRAFFIC = 256 << 20
OPS = ("softmax", "rms", "row_sum")
PER_ELEM = {"softmax": 4, "rms": 8, "row_sum": 2}
WIDE = [32769, 50257, 65537, 128256, 131072, 151936, 200003, 262144]
FEW_W = [16385, 32769, 50257, 65537, 131072, 151936, 262144]
NARROW = [2048, 2880, 4096, 4097, 5120, 7168, 8192, 14336, 16384]


def dram_rows(op, n):
    return max(1, TRAFFIC // (PER_ELEM[op] * n))


def few_rows():
    return [1, 4, 16, 64, max(1, 3 * SM // 4)]


def cells_all(smoke=False):
    """(op, rows, width, family) in priority order: the budget guard cuts from the end."""
    if smoke:
        return [(op, r, n, "smoke") for op in OPS for r, n in ((3, 1001), (5, 300), (2, 4100))]
    out = [("softmax", 4096, 131072, "many"), ("rms", 4096, 131072, "many"),
           ("softmax", 1024, 151936, "many")]  # fmt: skip
    for n in WIDE:
        for op in OPS:
            out.append((op, dram_rows(op, n), n, "many"))
    for n in FEW_W:
        for r in few_rows():
            for op in OPS:
                out.append((op, r, n, "few"))
    for r in (1, 2, 8):
        for op in OPS:
            out.append((op, r, 1048576, "few"))
    for n in WIDE:
        for op in OPS:
            out.append((op, 2 * SM, n, "many2"))
    for n in NARROW:
        for op in OPS:
            out += [(op, dram_rows(op, n), n, "narrow"), (op, 64, n, "narrow"),
                    (op, 1, n, "narrow")]  # fmt: skip
    for n in WIDE:  # a second pass over the DRAM-bound wide cells: the sweep's noise
        for op in OPS:
            out.append((op, dram_rows(op, n), n, "rep2"))
    return list(dict.fromkeys(out))


def candidates(op, n, smoke=False):
    """Plans timed for every cell of (op, width), besides the rule's own."""
    from warpgauge.kernels.plans import RowPlan as P

    if smoke:  # small blocks so the tiny CPU cells reach every kernel
        c = [P.coop(256, 2), P.coop(512, 2, sub=128, stages=2, evict=True),
             P.looped(256, 2, programs_per_sm=1, evict=True, stages=2)]  # fmt: skip
        if op == "softmax":
            c.append(P.looped(256, 2, 1, evict=True, lane_stats=True, stages=3))
        return c
    if n <= 16384 or n > 1048576:
        return []
    if n == 1048576:
        c = [P.coop(4096, 4), P.coop(16384, 8, sub=4096, stages=2, evict=True),
             P.coop(32768, 8, sub=4096, stages=2, evict=True)]  # fmt: skip
        return c if op != "row_sum" else [P.coop(16384, 8), P.coop(8192, 4)]
    if op == "softmax":
        c = [P.coop(4096, 4), P.coop(8192, 4, sub=2048, stages=2, evict=True),
             P.coop(16384, 8, sub=4096, stages=2, evict=True),
             P.coop(16384, 8, sub=4096, evict=True),  # control: no pipelining
             P.coop(16384, 8, sub=4096, stages=3, evict=True),
             P.coop(16384, 4, sub=2048, stages=3, evict=True),
             P.looped(16384, 32, 1, evict=True, lane_stats=True, stages=3),
             P.looped(8192, 16, 1, evict=True, stages=3),
             P.looped(8192, 16, 2, evict=True, stages=2)]  # fmt: skip
        if n > 32769:
            c.append(P.coop(32768, 8, sub=4096, stages=2, evict=True))
        if n <= 65537:  # small chunks for few rows of these widths (W1: 4x32769)
            c.append(P.coop(2048, 4))
    elif op == "rms":
        c = [P.coop(4096, 4), P.coop(8192, 4, sub=2048, stages=2, evict=True),
             P.coop(16384, 8, sub=4096, stages=2, evict=True),
             P.coop(16384, 8, sub=4096, evict=True),
             P.coop(16384, 8, sub=4096, stages=3, evict=True),
             P.coop(16384, 4, sub=2048, stages=3, evict=True)]  # fmt: skip
        if n > 32769:
            c.append(P.coop(32768, 8, sub=4096, stages=2, evict=True))
        if n <= 65537:
            c.append(P.coop(2048, 4))
    else:
        c = [P.looped(4096, 8), P.looped(8192, 16), P.looped(8192, 16, stages=3),
             P.looped(4096, 8, stages=4), P.looped(16384, 16, stages=3), P.coop(4096, 4),
             P.coop(16384, 8),
             P.coop(8192, 4)]  # fmt: skip
        if n <= 32775:
            c.append(P.resident(n, num_warps=16))
    return c


def plans_for(op, rows, n, smoke=False):
    from warpgauge.kernels.plans import RowPlan

    out = [RowPlan.for_shape(rows, n, SM, op)] + candidates(op, n, smoke)
    return list(dict.fromkeys(out))


def compile_key(op, n, plan):
    """Plans that compile the same kernels (a split plan's split count is a runtime value)."""
    if plan.kind == "split":
        plan = plan.__class__("split", plan.block, plan.num_warps, split=1)
    return (op, n, repr(plan))


def make_inputs(op, rows, n, copies, seed=0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    out = []
    for _ in range(copies):
        x = torch.randn((rows, n), device=DEV, generator=g).mul_(3.0).to(torch.bfloat16)
        if op == "rms":
            r = torch.randn((rows, n), device=DEV, generator=g).to(torch.bfloat16)
            w = torch.randn(n, device=DEV, generator=g).to(torch.bfloat16)
            out.append((x, r, w))
        else:
            out.append((x,))
    return out


def call(op, plan, args):
    from warpgauge.kernels import rmsnorm as rms_k
    from warpgauge.kernels import row_sum as row_sum_k
    from warpgauge.kernels import softmax as softmax_k

    if plan == "torch":
        if op == "softmax":
            return torch.softmax(args[0], -1)
        if op == "rms":
            h = args[0] + args[1]
            return torch.nn.functional.rms_norm(h, (h.shape[-1],), args[2], 1e-6), h
        return args[0].sum(-1)
    if op == "softmax":
        return softmax_k.softmax(args[0], plan=plan)
    if op == "rms":
        return rms_k.add_rms_norm(args[0], args[1], args[2], 1e-6, plan=plan)
    return row_sum_k.row_sum(args[0], plan=plan)


def gate(op, plan, args):
    """(worst err/allowed against the FP64 reference on up to 2^23 elements of rows, whether
    every output landed on NaN-filled memory). > 1 fails. Checked before timing."""
    from warpgauge import reference as ref

    keep = max(1, min(args[0].shape[0], (1 << 23) // args[0].shape[-1]))
    args = tuple(a[:keep] if a.dim() == 2 else a for a in args)
    rows, n = args[0].shape
    shapes = [(rows, n), (rows, n)] if op == "rms" else [(rows,) if op == "row_sum" else (rows, n)]
    poison = [torch.full(s, float("nan"), device=DEV, dtype=torch.bfloat16) for s in shapes]
    ptrs = {p.data_ptr() for p in poison}
    del poison
    out = call(op, plan, args)
    outs = list(out) if isinstance(out, tuple) else [out]
    poisoned = all(o.data_ptr() in ptrs for o in outs)
    if op == "softmax":
        cs = [ref.compare(out, ref.softmax_ref(args[0]), relative=True)]
    elif op == "rms":
        y_ref, h_ref = ref.add_rms_norm_ref(*args, 1e-6)
        cs = [ref.compare(out[0], y_ref), ref.compare(out[1], h_ref)]
    else:
        cs = [ref.compare(out, ref.row_sum_ref(args[0]))]
    return max(c.worst_ratio if c.ok else max(c.worst_ratio, 1e9) for c in cs), poisoned


def bytes_of(op, rows, n):
    return {
        "softmax": 4 * rows * n,
        "rms": 8 * rows * n + 2 * n,
        "row_sum": 2 * rows * n + 2 * rows,
    }[op]


def time_plan(op, ins, plan, target_s):
    if DEV == "cpu":  # --smoke: exercise the code path only
        t0 = time.perf_counter()
        call(op, plan, ins[0])
        return (time.perf_counter() - t0) * 1e6, 0.0, 1
    from graph_timer import bench_graph

    it = [0]

    def fn():
        it[0] += 1
        return call(op, plan, ins[it[0] % len(ins)])

    med, mn, n = bench_graph(fn, target_s=target_s, replays=3, max_calls=400)
    return med * 1e6, mn * 1e6, n


def warm_one(job):
    op, n, plan = job
    try:
        call(op, plan, make_inputs(op, 2, n, 1)[0])
        if DEV == "cuda":
            torch.cuda.synchronize()
        return compile_key(op, n, plan), None
    except Exception as e:  # noqa: BLE001 - reported; the main process records it
        return compile_key(op, n, plan), f"{type(e).__name__}: {e}"[:300]


def _init_worker(sm, dev):
    global SM, DEV
    SM, DEV = sm, dev
    if dev == "cuda":
        torch.cuda.init()


def summary(results):
    by = {}
    for r in results:
        by.setdefault((r["op"], r["rows"], r["width"], r["family"]), []).append(r)
    lines = [f"{'op':8s} {'fam':6s} {'shape':>14s} {'rule':>6s} {'best':>6s} {'torch':>6s}  TB/s "
             f"rule_us best_us  best plan"]  # fmt: skip
    for (op, rows, n, fam), rs in by.items():
        ok = [r for r in rs if r.get("us")]
        mine = [r for r in ok if r["plan"] != "torch"]
        if not mine:
            continue
        rule = [r for r in mine if r["rule"]]
        best = min(mine, key=lambda r: r["us"])
        t = [r for r in ok if r["plan"] == "torch"]

        def f(rr):
            return f"{rr[0]['tbps']:6.2f}" if rr else "     -"

        ru = f"{rule[0]['us']:8.1f}" if rule else "       -"
        lines.append(
            f"{op:8s} {fam:6s} {rows:>6d}x{n:<7d} {f(rule)} {best['tbps']:6.2f} {f(t)}       "
            f"{ru} {best['us']:7.1f}  {best['plan'][8:96]}"
        )
    return "\n".join(lines)


def main():
    global SM, DEV
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=15)
    ap.add_argument("--budget", type=float, default=92.0, help="seconds for the whole sweep")
    ap.add_argument("--compile-share", type=float, default=0.48)
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny cells")
    ap.add_argument("--dry", action="store_true", help="list cells and compile jobs only")
    a = ap.parse_args()
    t0 = time.time()
    if a.smoke:
        DEV, SM, l2 = "cpu", 4, 1 << 20
    elif a.dry:
        SM, l2 = 132, 60 << 20
    else:
        props = torch.cuda.get_device_properties(0)
        SM, l2 = props.multi_processor_count, props.L2_cache_size
    cells = cells_all(a.smoke)
    jobs = {}
    for op, rows, n, _fam in cells:
        for p in plans_for(op, rows, n, a.smoke):
            jobs.setdefault(compile_key(op, n, p), (op, n, p))
    print(f"{len(cells)} cells, {len(jobs)} compile jobs, SM={SM}, L2={l2 >> 20} MB", flush=True)
    if a.dry:
        for c in cells:
            print(c, len(plans_for(*c[:3])))
        return 0
    compiled, errors = set(), {}
    if a.smoke and a.workers == 0:  # serial (``--smoke --workers 2`` exercises the pool)
        for j in jobs.values():
            k, err = warm_one(j)
            (errors.__setitem__(k, err) if err else compiled.add(k))
    else:
        # In the cells' priority order: a deadline leaves the least important cells untimed.
        order = list(jobs.values())
        pool = mp.get_context("spawn").Pool(a.workers, initializer=_init_worker, initargs=(SM, DEV))
        deadline = t0 + a.budget * a.compile_share
        it = pool.imap_unordered(warm_one, order)
        try:
            while True:  # a timeout on every result: a crashed worker never delivers one
                try:
                    k, err = it.next(timeout=max(0.1, deadline - time.time()))
                except StopIteration:
                    break
                except mp.TimeoutError:
                    print("compile deadline: timing what compiled", flush=True)
                    break
                (errors.__setitem__(k, err) if err else compiled.add(k))
                if err:
                    print(f"compile fail {k}: {err}", flush=True)
        finally:
            pool.terminate()
    print(f"compile phase {time.time() - t0:.1f}s: {len(compiled)} ok, {len(errors)} failed",
          flush=True)  # fmt: skip
    name = torch.cuda.get_device_name(0) if DEV == "cuda" else "cpu"
    import triton

    meta = dict(sm=SM, l2=l2, device=name, torch=torch.__version__, triton=triton.__version__,
                compile_errors={repr(k): v for k, v in errors.items()})  # fmt: skip
    if DEV == "cuda":  # the copy ceiling of this run (256 MB moved: read + write)
        src = torch.empty(TRAFFIC // 4, dtype=torch.bfloat16, device=DEV).normal_()
        dst = torch.empty_like(src)
        from graph_timer import bench_graph

        med, _mn, _n = bench_graph(lambda: dst.copy_(src), target_s=2e-3)
        meta["copy_tbps"] = 2 * src.numel() * 2 / med / 1e12
        print(f"copy ceiling {meta['copy_tbps']:.2f} TB/s", flush=True)
        del src, dst
    results = []
    for op, rows, n, fam in cells:
        if time.time() - t0 > a.budget:
            print("budget reached", flush=True)
            break
        size = bytes_of(op, rows, n) // 2
        copies = max(1, min(16, -(-3 * l2 // max(size, 1))))
        try:
            ins = make_inputs(op, rows, n, copies)
        except torch.OutOfMemoryError:
            continue
        rule = plans_for(op, rows, n, a.smoke)[0]
        plans = ["torch"] + plans_for(op, rows, n, a.smoke)
        target = min(2e-3, max(3e-4, 30 * bytes_of(op, rows, n) / 4e12))
        for plan in plans:
            rec = dict(op=op, rows=rows, width=n, family=fam, us=None,
                       plan=plan if plan == "torch" else repr(plan), rule=plan == rule)  # fmt: skip
            if plan != "torch" and compile_key(op, n, plan) not in compiled:
                rec["err"] = errors.get(compile_key(op, n, plan), "not compiled in time")
                results.append(rec)
                continue
            try:
                err, poisoned = gate(op, plan, ins[0])
                rec.update(gate=err, poisoned=poisoned)
                if err > 1 and plan != "torch":
                    rec["err"] = f"gate failed: err/allowed {err:.3g}"
                    print(f"FAIL {op} {rows}x{n} {plan}: {rec['err']}", flush=True)
                else:
                    us, us_min, calls = time_plan(op, ins, plan, target)
                    tb = bytes_of(op, rows, n) / us / 1e6
                    rec.update(us=us, us_min=us_min, calls=calls, tbps=tb)
                    if DEV == "cuda" and tb > 1.05 * meta["copy_tbps"]:
                        rec["flag"] = "above the copy ceiling"
            except Exception as e:  # noqa: BLE001 - recorded
                rec["err"] = f"{type(e).__name__}: {e}"[:200]
                print(f"ERR {op} {rows}x{n} {plan}: {rec['err']}", flush=True)
            results.append(rec)
        del ins
        with open(a.out + ".tmp", "w") as f:
            json.dump(dict(meta, results=results), f, indent=0)
        os.replace(a.out + ".tmp", a.out)
        print(f"{time.time() - t0:6.1f}s {op} {fam} {rows}x{n} done", flush=True)
    print(summary(results))
    fails = sum(1 for r in results if "gate failed" in str(r.get("err")))
    print(f"total {time.time() - t0:.1f}s, {len(results)} records, gate failures: {fails}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
