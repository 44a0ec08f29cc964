"""Wide-row sweep: cooperative split plans against the rule and PyTorch, any width (a tuning aid).

For softmax, add_rms_norm and row_sum over real model widths (vocabulary sizes, hidden sizes and
their +-1 neighbours, widths 65537-262144) at DRAM-bound row counts (256 MB of compulsory
traffic) and at a few small row counts, it times the rule's plan, cooperative split plans
(``RowPlan.coop``: chunks held in registers, row statistics exchanged through global memory),
a few looped / split variants and the in-process PyTorch baseline (``torch.softmax``,
``x + r`` then ``F.rms_norm``, ``x.sum(-1)``). Each case is checked against the FP64 reference
*before* it is timed (a failing plan is recorded, never timed), then timed by CUDA-graph replay
with inputs rotated over copies totalling more than 3x L2 (cold-L2 lane). SM count and L2 size
are read from the device. Kernels are compiled first by worker processes (one shard each, filling
Triton's on-disk cache). Results are written to JSON after every case; a summary table comes last.

    PYTHONPATH=src python3 tuning/wide_tune.py --out $OUT/wide.json --budget 120
    PYTHONPATH=src TRITON_INTERPRET=1 python3 tuning/wide_tune.py --out /tmp/w.json --dry
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

import torch

SM = None
DEV = "cuda"
TRAFFIC = 256 << 20  # compulsory bytes of a DRAM-bound cell

# Widths: hidden sizes and their neighbours, vocabulary sizes, widths past 65536.
NARROW = [2047, 2048, 2049, 2880, 3584, 4095, 4096, 4097, 5120, 7168, 8191, 8192, 8193, 11008,
          14336, 16383, 16385]  # fmt: skip
WIDE = [24576, 32000, 32769, 50257, 65537, 98304, 128256, 131072, 151936, 200003, 262144]
FEW = [(64, 131072), (16, 262144), (128, 50257), (100, 65537), (4, 32769), (2, 1048576),
       (32, 151936), (256, 32000), (8, 16384)]  # fmt: skip
OPS = ("softmax", "rms", "row_sum")
PER_ELEM = {"softmax": 4, "rms": 8, "row_sum": 2}


def dram_rows(op, n):
    return max(1, TRAFFIC // (PER_ELEM[op] * n))


def plans_for(op, rows, n):
    """The rule's plan first, then the variants worth timing (by width only, never by row count,
    except the rule itself)."""
    from warpgauge.kernels.plans import RowPlan

    out = [RowPlan.for_shape(rows, n, SM, op)]
    if op in ("softmax", "rms"):
        coop = []
        if 4097 < n <= 16385:
            coop = [(2048, 4), (4096, 4), (8192, 8)]
        elif n > 16385:
            coop = [(2048, 4), (4096, 4), (4096, 8), (8192, 8), (8192, 16)]
            coop += [(16384, 16)] if n > 32769 else []
        out += [RowPlan.coop(b, w) for b, w in coop if b < n]
    elif n <= 8193:  # resident row_sum: more warps, or two rows per program
        w = out[0].num_warps
        out += [RowPlan.resident(n, num_warps=min(32, 2 * w)), RowPlan.resident(n, 2, 2 * w)]
    else:
        out += [RowPlan.looped(8192, 16), RowPlan.split_for(rows, n, SM, 4096, 16)]
        out += [RowPlan.coop(b, w) for b, w in ((4096, 4), (8192, 8), (16384, 8)) if b < n]
    seen, uniq = set(), []
    for p in out:
        if p not in seen:
            seen.add(p)
            uniq.append(p)
    return uniq


def cases_all():
    """Priority order (the budget guard cuts from the end): wide DRAM-bound, few rows, narrow."""
    out = [("softmax", 4096, 131072), ("rms", 4096, 131072)]  # 2-4 GB: the largest checks
    for n in WIDE:
        for op in OPS:
            out.append((op, dram_rows(op, n), n))
    for rows, n in FEW:
        for op in OPS:
            out.append((op, rows, n))
    for n in NARROW:
        for op in OPS:
            out.append((op, dram_rows(op, n), n))
    for n in WIDE:  # a second pass over the wide cells, if time is left: the sweep's noise
        for op in OPS:
            out.append((op, dram_rows(op, n), n))
    return out


def make_inputs(op, rows, n, copies):
    g = torch.Generator(device=DEV).manual_seed(0)
    out = []
    for _ in range(copies):
        x = torch.randn((rows, n), device=DEV, generator=g).to(torch.bfloat16)
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
    """Worst err/allowed against the FP64 reference on a slice of rows (same kernel, same
    plan); > 1 fails. Checked before timing."""
    from warpgauge import reference as ref

    keep = max(1, min(args[0].shape[0], (1 << 23) // args[0].shape[-1]))
    args = tuple(a[:keep] if a.dim() == 2 else a for a in args)
    out = call(op, plan, args)
    if op == "softmax":
        cs = [ref.compare(out, ref.softmax_ref(args[0]), relative=True)]
    elif op == "rms":
        y_ref, h_ref = ref.add_rms_norm_ref(*args, 1e-6)
        cs = [ref.compare(out[0], y_ref), ref.compare(out[1], h_ref)]
    else:
        cs = [ref.compare(out, ref.row_sum_ref(args[0]))]
    return max(c.worst_ratio if c.ok else max(c.worst_ratio, 1e9) for c in cs)


def bytes_of(op, rows, n):
    return {
        "softmax": 4 * rows * n,
        "rms": 8 * rows * n + 2 * n,
        "row_sum": 2 * rows * n + 2 * rows,
    }[op]


def time_plan(op, ins, plan, limit_s=1.0):
    if DEV == "cpu":  # --smoke: exercise the code path only
        t0 = time.perf_counter()
        call(op, plan, ins[0])
        return (time.perf_counter() - t0) * 1e6, 0.0
    for a in ins:
        call(op, plan, a)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    call(op, plan, ins[0])
    torch.cuda.synchronize()
    per = max(time.perf_counter() - t0, 5e-6)
    if per > limit_s:  # far slower than the traffic allows: not worth a graph (budget guard)
        return per * 1e6, per * 1e6
    copies = len(ins)
    reps = int(max(copies, min(200, 2e-3 / per)))
    reps = -(-reps // copies) * copies
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for i in range(reps):
                call(op, plan, ins[i % copies])
    torch.cuda.synchronize()
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3 / reps)
    del g
    ts.sort()
    return ts[len(ts) // 2], ts[0]


def warm_worker(chunk):
    if DEV == "cuda":
        torch.cuda.init()
    done = 0
    for op, rows, n, plan in chunk:
        try:
            call(op, plan, make_inputs(op, min(rows, 4), n, 1)[0])
            if DEV == "cuda":
                torch.cuda.synchronize()
            done += 1
        except Exception as e:  # noqa: BLE001 - reported; the main process records it
            print(f"warm fail {op} {rows}x{n} {plan}: {type(e).__name__}: {e}"[:300], flush=True)
    return done


def _init_worker(sm, dev):
    global SM, DEV
    SM, DEV = sm, dev


def summary(results):
    by = {}
    for r in results:
        by.setdefault((r["op"], r["rows"], r["width"], r.get("rep", 1)), []).append(r)
    lines = [f"{'op':8s} {'shape':>14s} {'rule':>6s} {'best':>6s} {'torch':>6s} TB/s  best plan"]
    for (op, rows, n, rep), rs in by.items():
        ok = [r for r in rs if r.get("us")]
        mine = [r for r in ok if r["plan"] != "torch"]
        if not mine:
            continue
        rule = [r for r in mine if r["rule"]]
        best = min(mine, key=lambda r: r["us"])
        t = [r for r in ok if r["plan"] == "torch"]
        f = lambda rr: f"{rr[0]['tbps']:6.2f}" if rr else "     -"  # noqa: E731
        lines.append(
            f"{op:8s}{rep} {rows:>6d}x{n:<7d} {f(rule)} {best['tbps']:6.2f} {f(t)}       "
            f"{best['plan'][8:90]}"
        )
    return "\n".join(lines)


def main():
    global SM, DEV
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--budget", type=float, default=120.0)
    ap.add_argument("--dry", action="store_true", help="list the cases and plans, no GPU")
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny cells")
    a = ap.parse_args()
    t0 = time.time()
    if a.dry:
        SM, l2 = 132, 60 << 20
    elif a.smoke:
        DEV, SM, l2 = "cpu", 4, 1 << 20
    else:
        props = torch.cuda.get_device_properties(0)
        SM, l2 = props.multi_processor_count, props.L2_cache_size
    cells = cases_all()
    if a.smoke:
        cells = [(op, 3, n) for op, _, n in cells if n in (4097, 8193, 32769)]
    jobs = [
        (op, rows, n, p) for op, rows, n in dict.fromkeys(cells) for p in plans_for(op, rows, n)
    ]
    print(f"{len(cells)} cells, {len(jobs)} plans, SM={SM}, L2={l2 >> 20} MB", flush=True)
    if a.dry:
        for j in jobs:
            print(j)
        return 0
    chunks = [jobs[i :: a.workers] for i in range(a.workers)]
    with mp.get_context("spawn").Pool(
        a.workers, initializer=_init_worker, initargs=(SM, DEV)
    ) as pool:
        res = pool.map_async(warm_worker, chunks)
        try:
            print("warmed", sum(res.get(timeout=a.budget * 0.45)), flush=True)
        except mp.TimeoutError:
            print("warm-up timed out; timing what compiled", flush=True)
            pool.terminate()
    print(f"compile phase {time.time() - t0:.1f}s", flush=True)
    results = []
    name = torch.cuda.get_device_name(0) if DEV == "cuda" else "cpu"
    meta = dict(sm=SM, l2=l2, device=name, torch=torch.__version__)
    done_cells = set()
    for op, rows, n in cells:
        rep = 2 if (op, rows, n) in done_cells else 1
        done_cells.add((op, rows, n))
        if time.time() - t0 > a.budget:
            print("budget reached", flush=True)
            break
        size = rows * n * 2 * (2 if op == "rms" else 1)
        copies = max(1, min(8, -(-3 * l2 // max(size, 1))))
        try:
            ins = make_inputs(op, rows, n, copies)
        except torch.OutOfMemoryError:
            continue
        plans = ["torch"] + plans_for(op, rows, n)
        for i, plan in enumerate(plans):
            rec = dict(
                op=op,
                rows=rows,
                width=n,
                plan=plan if plan == "torch" else repr(plan),
                rule=i == 1,
                us=None,
                rep=rep,
            )
            try:
                err = gate(op, plan, ins[0])
                rec["gate"] = err
                if err > 1 and plan != "torch":
                    rec["err"] = f"gate failed: err/allowed {err:.3g}"
                    print(f"FAIL {op} {rows}x{n} {plan}: {rec['err']}", flush=True)
                else:
                    us, us_min = time_plan(op, ins, plan, 0.02 + 20 * bytes_of(op, rows, n) / 3e12)
                    rec.update(us=us, us_min=us_min, tbps=bytes_of(op, rows, n) / us / 1e6)
            except Exception as e:  # noqa: BLE001 - recorded
                rec["err"] = f"{type(e).__name__}: {e}"[:200]
                print(f"ERR {op} {rows}x{n} {plan}: {rec['err']}", flush=True)
            results.append(rec)
        del ins
        with open(a.out + ".tmp", "w") as f:
            json.dump(dict(meta, results=results), f, indent=0)
        os.replace(a.out + ".tmp", a.out)
        print(f"{time.time() - t0:6.1f}s {op} {rows}x{n} done", flush=True)
    print(summary(results))
    print(f"total {time.time() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
