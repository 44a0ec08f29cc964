"""rows9 sweep: softmax forward on wide rows (BF16), the cooperative plans' exp cost.

The looped cooperative kernel compiled to ~24 SASS instructions per element on sm_90 (``tl.exp``
range fix-ups, one block reduction per slice for the max and one for the sum), more than an SM
issues at DRAM speed (~17 per element at 4 TB/s). The candidates here (``RowPlan`` fields
``fast_exp``, ``fma_exp``) cut that: one ``ex2.approx.ftz`` per exp with the scaling folded into a
multiply-add, per-lane sums, the division folded into the write pass's exponent (~12 per
element), and optionally a polynomial exp on the FMA pipe for part of the statistics pass.

Cells (SM count and L2 size read from the device): the issue's losing cells (4096x131072,
64x128256, 64x131072, 16x262144, 8192x32000, 1024x151936) first, then a broad sweep of
vocabulary and odd widths (32000 ... 262144) at 1, 16, 64, 3/4 x SM, 2 x SM rows and at a
DRAM-bound row count (256 MB of compulsory traffic). Each cell times the current rule's plan
(``RowPlan.for_shape`` with the device's L2 size, as the launcher calls it), the candidates and
``torch.softmax``; every plan is gated against the FP64 reference first (rows5_sweep.gate: NaN
poisoned outputs) and every candidate also on special rows (all -inf, a -inf prefix, a NaN, a
+1000 offset, tiny outputs). Timing and compilation are rows5_sweep's (CUDA-graph replay with
inputs rotated over copies totalling more than 3x L2, so reads come from DRAM; kernels compiled
first by worker processes). JSON is rewritten after every cell; a summary table comes last.

    PYTHONPATH=src python3 experiments/rows9_sweep.py --out $OUT/rows9.json --budget 100
    PYTHONPATH=src TRITON_INTERPRET=1 python3 experiments/rows9_sweep.py --out /tmp/r.json --smoke
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
import rows5_sweep as r5  # noqa: E402

OP = "softmax"
TARGET = [(4096, 131072), (64, 128256), (64, 131072), (16, 262144), (8192, 32000), (1024, 151936)]
WIDTHS = [131072, 151936, 128256, 262144, 50257, 65537, 152064, 256000, 100003, 32000]


def cells_all(sm, smoke=False):
    """(rows, width, family) in priority order: the budget guard cuts from the end."""
    if smoke:
        return [(3, 1001, "smoke"), (2, 1000, "smoke"), (5, 300, "smoke")]
    out = [(r, n, "target") for r, n in TARGET]
    for n in WIDTHS:
        rows = [max(1, r5.TRAFFIC // (4 * n)), 64, 2 * sm, 16, 3 * sm // 4, 1]
        out += [(r, n, "sweep") for r in rows]
    seen, res = set(), []
    for r, n, f in out:
        if (r, n) not in seen:
            seen.add((r, n))
            res.append((r, n, f))
    return res


def candidates(n, smoke=False):
    """The plans timed at every row count of a width, besides the rule's."""
    from warpgauge.kernels.plans import RowPlan as P

    if smoke:  # small blocks so the tiny CPU cells reach every new path
        return [P.coop(256, 2, sub=64, evict=True, fast_exp=True),
                P.coop(256, 2, sub=64, evict=True, fast_exp=True, fma_exp=1),
                P.coop(128, 1, fast_exp=True)]  # fmt: skip
    c = [P.coop(16384, 8, sub=4096, evict=True, fast_exp=True),
         P.coop(16384, 8, sub=8192, evict=True, fast_exp=True),
         P.coop(16384, 8, sub=4096, evict=True, fast_exp=True, fma_exp=1),
         P.coop(8192, 4, sub=2048, evict=True, fast_exp=True),
         P.coop(4096, 4, fast_exp=True),
         P.coop(8192, 8, fast_exp=True)]  # fmt: skip
    if n > 65537:
        c += [P.coop(32768, 16, sub=8192, evict=True, fast_exp=True),
              P.coop(16384, 8, sub=4096, evict=True, fast_exp=True, fma_exp=2)]  # fmt: skip
    if n <= 65537:
        c.append(P.coop(2048, 4, fast_exp=True))
    if 28672 < n <= 32768:  # the persistent resident plan's width (SOFTMAX_PREFETCH_MIN_WIDTH)
        c += [P("resident", 32768, 32, programs_per_sm=1, fast_exp=True),
              P("resident", 32768, 16, programs_per_sm=2, fast_exp=True),
              P("resident", 32768, 16, programs_per_sm=2)]  # fmt: skip
    return c


def rule_plan(rows, n, sm, l2):
    from warpgauge.kernels.plans import RowPlan

    return RowPlan.for_shape(rows, n, sm, OP, l2, 2)


def special_inputs(n, dev):
    """Rows that break careless exps: all -inf, a -inf prefix, a NaN, +1000 offset, one large
    logit (tiny but normal outputs elsewhere), random."""
    g = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn((6, n), device=dev, generator=g).mul_(3.0)
    x[0] = float("-inf")
    x[1, : n // 2 + 3] = float("-inf")
    x[2, n // 3] = float("nan")
    x[3] += 1000.0
    x[4, 5] = 60.0
    return x.to(torch.bfloat16)


def special_gate(plan, n):
    from warpgauge import reference as ref
    from warpgauge.kernels import softmax as softmax_k

    x = special_inputs(n, r5.DEV)
    c = ref.compare(softmax_k.softmax(x, plan=plan), ref.softmax_ref(x), relative=True)
    return c.worst_ratio if c.ok else max(c.worst_ratio, 1e9)


def summary(results, copy_tbps):
    by = {}
    for r in results:
        by.setdefault((r["rows"], r["width"], r["family"]), []).append(r)
    lines = [f"{'shape':>14s} {'fam':6s} {'rule':>6s} {'best':>6s} {'torch':>6s} TB/s  "
             f"rule%cp best%cp best/rule best/torch  rule_us best_us  best plan"]  # fmt: skip
    for (rows, n, fam), rs in by.items():
        mine = [r for r in rs if r.get("us") and r["plan"] != "torch"]
        if not mine:
            continue
        rule = [r for r in mine if r["rule"]]
        best = min(mine, key=lambda r: r["us"])
        t = [r for r in rs if r.get("us") and r["plan"] == "torch"]
        ru = rule[0] if rule else None
        cp = copy_tbps or 1.0
        lines.append(
            f"{rows:>6d}x{n:<7d} {fam:6s} {ru['tbps'] if ru else 0:6.2f} {best['tbps']:6.2f} "
            f"{t[0]['tbps'] if t else 0:6.2f}       {100 * (ru['tbps'] if ru else 0) / cp:5.1f} "
            f"{100 * best['tbps'] / cp:6.1f} {(ru['us'] / best['us']) if ru else 0:8.3f} "
            f"{(t[0]['us'] / best['us']) if t else 0:9.2f}  {ru['us'] if ru else 0:8.1f} "
            f"{best['us']:7.1f}  {best['plan'][8:]}"
        )
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=15)
    ap.add_argument("--budget", type=float, default=100.0, help="seconds for the whole sweep")
    ap.add_argument("--compile-share", type=float, default=0.35)
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny cells")
    a = ap.parse_args()
    t0 = time.time()
    if a.smoke:
        r5.DEV, r5.SM, l2 = "cpu", 4, 1 << 20
    else:
        props = torch.cuda.get_device_properties(0)
        r5.SM, l2 = props.multi_processor_count, props.L2_cache_size
    sm = r5.SM
    cells = cells_all(sm, a.smoke)
    plans_of = {}
    jobs = {}
    for rows, n, _f in cells:
        ps = list(dict.fromkeys([rule_plan(rows, n, sm, l2)] + candidates(n, a.smoke)))
        plans_of[(rows, n)] = ps
        for p in ps:
            jobs.setdefault(r5.compile_key(OP, n, p), (OP, n, p))
    print(f"{len(cells)} cells, {len(jobs)} compile jobs, SM={sm}, L2={l2 >> 20} MB", flush=True)
    compiled, errors = set(), {}
    if a.smoke:
        for j in jobs.values():
            k, err = r5.warm_one(j)
            (errors.__setitem__(k, err) if err else compiled.add(k))
    else:
        pool = mp.get_context("spawn").Pool(
            a.workers, initializer=r5._init_worker, initargs=(sm, r5.DEV)
        )
        deadline = t0 + a.budget * a.compile_share
        it = pool.imap_unordered(r5.warm_one, list(jobs.values()))
        try:
            while True:
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
    import triton

    meta = dict(sm=sm, l2=l2, torch=torch.__version__, triton=triton.__version__,
                device=torch.cuda.get_device_name(0) if r5.DEV == "cuda" else "cpu",
                compile_errors={repr(k): v for k, v in errors.items()}, copy_tbps=None)  # fmt: skip
    if r5.DEV == "cuda":
        from graph_timer import bench_graph

        src = torch.empty(r5.TRAFFIC // 4, dtype=torch.bfloat16, device="cuda").normal_()
        dst = torch.empty_like(src)
        med, _mn, _n = bench_graph(lambda: dst.copy_(src), target_s=2e-3)
        meta["copy_tbps"] = 2 * src.numel() * 2 / med / 1e12
        print(f"copy ceiling {meta['copy_tbps']:.2f} TB/s", flush=True)
        del src, dst
        # what the cooperative plans' slot zeroing (one torch.zeros per call) costs in a graph
        meta["zeros_us"] = {}
        for k in (2048, 65536):
            med, _mn, _n = bench_graph(lambda k=k: torch.zeros(k, dtype=torch.int64, device="cuda"),
                                       target_s=1e-3)  # fmt: skip
            meta["zeros_us"][k] = med * 1e6
        print(f"slot zeroing per call: {meta['zeros_us']} us", flush=True)
    # special rows for every candidate, at two widths (an odd one: aligned-body path)
    specials = []
    for n in [1001] if a.smoke else [50257, 131072]:
        for p in candidates(n, a.smoke):
            if r5.compile_key(OP, n, p) not in compiled and not a.smoke:
                continue
            try:
                specials.append(dict(width=n, plan=repr(p), gate=special_gate(p, n)))
            except Exception as e:  # noqa: BLE001 - recorded
                specials.append(dict(width=n, plan=repr(p), err=f"{type(e).__name__}: {e}"[:200]))
    bad = [s for s in specials if s.get("err") or s["gate"] > 1]
    print(f"special rows: {len(specials)} checks, {len(bad)} failed", flush=True)
    for s in bad:
        print("  SPECIAL FAIL", s, flush=True)
    meta["specials"] = specials
    results = []
    for rows, n, fam in cells:
        if time.time() - t0 > a.budget:
            print("budget reached", flush=True)
            break
        size = r5.bytes_of(OP, rows, n) // 2
        copies = max(1, min(16, -(-3 * l2 // max(size, 1))))
        try:
            ins = r5.make_inputs(OP, rows, n, copies)
        except torch.OutOfMemoryError:
            continue
        rule = plans_of[(rows, n)][0]
        target = min(2e-3, max(3e-4, 30 * r5.bytes_of(OP, rows, n) / 4e12))
        for plan in ["torch"] + plans_of[(rows, n)]:
            rec = dict(op=OP, rows=rows, width=n, family=fam, us=None,
                       plan=plan if plan == "torch" else repr(plan), rule=plan == rule)  # fmt: skip
            if plan != "torch" and r5.compile_key(OP, n, plan) not in compiled:
                rec["err"] = errors.get(r5.compile_key(OP, n, plan), "not compiled in time")
                results.append(rec)
                continue
            try:
                err, poisoned = r5.gate(OP, plan, ins[0])
                rec.update(gate=err, poisoned=poisoned)
                if err > 1 and plan != "torch":
                    rec["err"] = f"gate failed: err/allowed {err:.3g}"
                    print(f"FAIL {rows}x{n} {plan}: {rec['err']}", flush=True)
                else:
                    us, us_min, calls = r5.time_plan(OP, ins, plan, target)
                    tb = r5.bytes_of(OP, rows, n) / us / 1e6
                    rec.update(us=us, us_min=us_min, calls=calls, tbps=tb)
            except Exception as e:  # noqa: BLE001 - recorded
                rec["err"] = f"{type(e).__name__}: {e}"[:200]
                print(f"ERR {rows}x{n} {plan}: {rec['err']}", flush=True)
            results.append(rec)
        del ins
        with open(a.out + ".tmp", "w") as f:
            json.dump(dict(meta, results=results), f, indent=0)
        os.replace(a.out + ".tmp", a.out)
        print(f"{time.time() - t0:6.1f}s {fam} {rows}x{n} done", flush=True)
    print(summary(results, meta["copy_tbps"]))
    fails = sum(1 for r in results if "gate failed" in str(r.get("err")))
    print(f"total {time.time() - t0:.1f}s, {len(results)} records, gate failures: {fails}, "
          f"special failures: {len(bad)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
