"""rowsum9 sweep: row_sum and add_rms_norm forward plans (BF16) against the rule, torch and (for
the cells the session-8 run lost) torch.compile, on a broad grid of real shapes.

Cells (priority order; the budget guard cuts from the end; SM count and L2 size come from the
device, row counts that depend on them are written as multiples of the SM count):

- the losing cells of results/20261201-161518-default (row_sum 16384x4096, 64x131072;
  add_rms_norm 4096x131072, 16x262144, 64x131072, 1x4096, 1024x1024), with torch.compile;
- row_sum, hidden sizes 896-16384 (odd ones too) at 1, SM, 2048, 16384 rows and the row count
  that moves 128 MB: the persistent tile plans (``programs_per_sm`` on a resident plan, with
  1-4 rows per tile) and resident warps/rows variants against the rule;
- row_sum, widths 32000-262144 at 1, 16, 64, SM and 1024 rows: looped one program per row, split
  and cooperative plans;
- add_rms_norm, widths 65537-262144 at 16, 64, 512 rows and 256 MB of traffic: cooperative
  plans with the weight loaded before the statistics exchange (``w_early``), looped, split;
- add_rms_norm, widths 1024-32000 at 1, 64, 1024 rows and 256 MB: the rule's plan with and
  without ``w_early``.

Method: ``experiments/rows5_sweep.py`` (reused: inputs, FP64 gate on up to 2^23 elements with
NaN-filled output memory, CUDA-graph replay timer, calls rotating over input copies totalling
more than 3x L2, kernels compiled first by worker processes). A gate failure is recorded, never
timed. JSON is rewritten after every cell; the summary table comes last.

    PYTHONPATH=src python3 experiments/rowsum9_sweep.py --out $OUT/rowsum9.json --budget 88
    PYTHONPATH=src TRITON_INTERPRET=1 python3 experiments/rowsum9_sweep.py --out /tmp/r.json \
        --smoke --workers 0
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from dataclasses import replace

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rows5_sweep as r5  # noqa: E402

SM = 132
L2 = 60 << 20
NARROW = [896, 2048, 2880, 4096, 4097, 5120, 7168, 8192, 14336, 16384]
WIDE = [32000, 50257, 65537, 131072, 151936, 262144]
RMS_WIDE = [65537, 131072, 151936, 262144]
RMS_NARROW = [1024, 2048, 2880, 4096, 4097, 5120, 7168, 8192, 14336, 16384, 32000]
TARGETS = [("row_sum", 16384, 4096), ("row_sum", 64, 131072), ("rms", 4096, 131072),
           ("rms", 16, 262144), ("rms", 64, 131072), ("rms", 1, 4096), ("rms", 1024, 1024)]  # fmt: skip
# More cells with torch.compile, warmed after the targets while time allows.
COMPILE_EXTRA = [("row_sum", 23301, 2880), ("row_sum", 16380, 4097), ("row_sum", 8192, 8192),
                 ("row_sum", 64, 50257), ("row_sum", 16, 262144), ("row_sum", 1024, 131072),
                 ("rms", 8192, 4096), ("rms", 64, 151936)]  # fmt: skip


def cells_all(smoke=False):
    if smoke:
        return [("row_sum", 9, 1001, "smoke"), ("row_sum", 3, 300, "smoke"),
                ("rms", 5, 300, "smoke"), ("row_sum", 2, 4100, "smoke")]  # fmt: skip
    out = [(op, r, n, "target") for op, r, n in TARGETS]
    for n in NARROW:
        for r in sorted({(64 << 20) // n, 16384, 2048, SM, 1}, reverse=True):
            out.append(("row_sum", r, n, "narrow"))
    for n in RMS_NARROW:  # the weight loaded early (w_early) against the rule's plan
        for r in ((256 << 20) // (8 * n), 1024, 64, 1):
            out.append(("rms", r, n, "narrow"))
    for n in WIDE:
        for r in (1024, SM, 64, 16, 1):
            out.append(("row_sum", r, n, "wide"))
    for n in RMS_WIDE:
        for r in (max(1, (256 << 20) // (8 * n)), 512, 64, 16):
            out.append(("rms", r, n, "wide"))
    seen = set()
    out = [c for c in out if not (c[:3] in seen or seen.add(c[:3]))]
    return out + [(op, r, n, "rep2") for op, r, n in TARGETS]  # the sweep's own noise


def candidates(op, rows, n, smoke=False):
    """Plans timed besides the rule's (the same set for every row count of a width, so one
    compile serves all of a width's cells; split plans compile once per block)."""
    from warpgauge.kernels.plans import RowPlan as P
    from warpgauge.kernels.plans import _softmax_warps, body_block

    b = body_block(n)
    if smoke:
        c = [P("resident", b, 2, rows=2, programs_per_sm=1), P("resident", b, 1, programs_per_sm=2)]
        return c + ([P.coop(256, 2), P.looped(256, 2)] if n > 1024 else [])
    c = []
    if op == "row_sum" and b <= 32768:
        w0 = _softmax_warps(b) if b < 32768 else 32
        for w in (w0 // 2, 2 * w0):
            if 1 <= w <= 32 and 32 * w <= b:
                c.append(P.resident(n, num_warps=w))
        if 2 * b <= 16384:
            c.append(P.resident(n, rows=2, num_warps=min(32, 2 * w0)))
        for r in (1, 2, 4):
            if r * b > 16384 or (r == 4 and b > 1024):
                continue
            w = min(32, w0 * r)
            for warps_per_sm in (32, 64):
                if warps_per_sm // w >= 1:
                    c.append(P("resident", b, w, rows=r, programs_per_sm=warps_per_sm // w))
    if op == "row_sum" and n > 16384:
        c += [P.coop(16384, 8), P.coop(8192, 4), P.coop(4096, 4), P.looped(4096, 8),
              P.looped(8192, 16), P.looped(16384, 32), P.looped(8192, 16, stages=3)]  # fmt: skip
        if rows < 2 * SM:
            c += [P.split_for(rows, n, SM, block) for block in (2048, 4096, 8192)]
    if op == "rms" and n > 32768:
        c += [P.coop(4096, 4), P.coop(8192, 8), P.coop(8192, 4), P.coop(2048, 4),
              P.coop(16384, 8, sub=4096, evict=True),
              P.coop(16384, 8, sub=4096, stages=2, evict=True),
              P.looped(16384, 32, programs_per_sm=1, evict=True)]  # fmt: skip
        if rows < 2 * SM:
            c += [P.split_for(rows, n, SM, block, per) for block in (2048, 4096)
                  for per in (4, 8, 16)]  # fmt: skip
    if op == "rms" and n <= 32768:
        rule = P.for_shape(rows, n, SM, op, L2, 2)
        if rule.kind in ("resident", "coop"):
            c.append(replace(rule, w_early=not rule.w_early))
    if op == "rms" and n <= 8192 and rows <= 1024 and (rows, n) in ((1, 4096), (1024, 1024)):
        for w in (2, 4, 8, 16):
            if 32 * w <= b and b // (32 * w) <= 64:
                c += [P.resident(n, num_warps=w), replace(P.resident(n, num_warps=w), w_early=True)]
        for r in (2, 4):
            if r * b <= 8192:
                c += [P.resident(n, rows=r), replace(P.resident(n, rows=r), w_early=True)]
        for k in (1, 2, 4):
            c.append(P("resident", b, P.resident(n).num_warps, programs_per_sm=k))
    if op == "rms" and n > 32768:  # the weight before the exchange
        c += [replace(P.coop(*bw), w_early=True) for bw in ((4096, 4), (8192, 8), (2048, 4))]
        c += [
            P.coop(16384, 16),
            replace(P.coop(16384, 16), w_early=True),  # fewer, larger
            replace(P.coop(16384, 8), w_early=True),
            replace(P.coop(32768, 32), w_early=True),
        ]
    return c


def plans_for(op, rows, n, smoke=False):
    from warpgauge.kernels.plans import RowPlan

    rule = RowPlan.for_shape(rows, n, SM, op, L2, 2)
    return list(dict.fromkeys([rule] + candidates(op, rows, n, smoke)))


_COMPILED = {}
WARMED = set()  # cells whose torch.compile finished before timing (others are not timed)


def compiled(op):
    if op not in _COMPILED:
        if op == "row_sum":

            def f(x):
                return x.sum(-1)
        else:

            def f(x, r, w):
                h = x + r
                return torch.nn.functional.rms_norm(h, (h.shape[-1],), w, 1e-6), h

        _COMPILED[op] = torch.compile(f, dynamic=False)
    return _COMPILED[op]


def call(op, plan, args):
    if plan == "compile":
        return compiled(op)(*args)
    return r5.call(op, plan, args)


def main():
    global SM, L2
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--budget", type=float, default=88.0, help="seconds for the whole sweep")
    ap.add_argument("--compile-share", type=float, default=0.42)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--smoke", action="store_true", help="CPU interpreter, tiny cells")
    ap.add_argument("--dry", action="store_true", help="list cells and compile jobs only")
    a = ap.parse_args()
    t0 = time.time()
    if a.smoke:
        r5.DEV, SM, L2 = "cpu", 4, 1 << 20
    elif not a.dry:
        props = torch.cuda.get_device_properties(0)
        SM, L2 = props.multi_processor_count, props.L2_cache_size
    r5.SM = SM
    r5.call = _wrap_call(r5.call)
    cells = cells_all(a.smoke)
    jobs = {}
    for op, rows, n, _fam in cells:
        for p in plans_for(op, rows, n, a.smoke):
            jobs.setdefault(r5.compile_key(op, n, p), (op, n, p))
    print(f"{len(cells)} cells, {len(jobs)} compile jobs, SM={SM}, L2={L2 >> 20} MB", flush=True)
    if a.dry:
        for c in cells:
            print(c, len(plans_for(*c[:3])))
        return 0
    compiled_keys, errors = set(), {}
    use_compile = not (a.smoke or a.no_compile)
    if a.workers == 0:
        for j in jobs.values():
            k, err = r5.warm_one(j)
            (errors.__setitem__(k, err) if err else compiled_keys.add(k))
    else:
        pool = mp.get_context("spawn").Pool(a.workers, initializer=r5._init_worker,
                                            initargs=(SM, r5.DEV))  # fmt: skip
        it = pool.imap_unordered(r5.warm_one, list(jobs.values()))
        if use_compile:  # torch.compile warm-up here while the workers build the plans
            for op, rows, n in TARGETS + COMPILE_EXTRA:
                if time.time() - t0 < 0.35 * a.budget:
                    t1 = time.time()
                    try:
                        call(op, "compile", r5.make_inputs(op, rows, n, 1)[0])
                        torch.cuda.synchronize()
                        WARMED.add((op, rows, n))
                        print(f"torch.compile {op} {rows}x{n}: {time.time() - t1:.1f}s",
                              flush=True)  # fmt: skip
                    except Exception as e:  # noqa: BLE001 - recorded per cell below
                        print(f"torch.compile {op} {rows}x{n} failed: {e}"[:300], flush=True)
        deadline = t0 + a.budget * a.compile_share
        try:
            while True:  # a timeout on every result: a crashed worker never delivers one
                try:
                    k, err = it.next(timeout=max(0.1, deadline - time.time()))
                except StopIteration:
                    break
                except mp.TimeoutError:
                    print("compile deadline: timing what compiled", flush=True)
                    break
                (errors.__setitem__(k, err) if err else compiled_keys.add(k))
                if err:
                    print(f"compile fail {k}: {err}", flush=True)
        finally:
            pool.terminate()
    print(f"compile phase {time.time() - t0:.1f}s: {len(compiled_keys)} ok, {len(errors)} failed",
          flush=True)  # fmt: skip
    import triton

    name = torch.cuda.get_device_name(0) if r5.DEV == "cuda" else "cpu"
    meta = dict(sm=SM, l2=L2, device=name, torch=torch.__version__, triton=triton.__version__,
                compile_errors={repr(k): v for k, v in errors.items()})  # fmt: skip
    if r5.DEV == "cuda":  # this run's copy ceiling (256 MB moved: read + write)
        from graph_timer import bench_graph

        src = torch.empty(r5.TRAFFIC // 4, dtype=torch.bfloat16, device="cuda").normal_()
        dst = torch.empty_like(src)
        med, _mn, _n = bench_graph(lambda: dst.copy_(src), target_s=2e-3)
        meta["copy_tbps"] = 2 * src.numel() * 2 / med / 1e12
        print(f"copy ceiling {meta['copy_tbps']:.2f} TB/s", flush=True)
        del src, dst
    results = []
    for op, rows, n, fam in cells:
        if time.time() - t0 > a.budget:
            print("budget reached", flush=True)
            break
        results += run_cell(op, rows, n, fam, compiled_keys, errors, meta, use_compile, a.smoke)
        with open(a.out + ".tmp", "w") as f:
            json.dump(dict(meta, results=results), f, indent=0)
        os.replace(a.out + ".tmp", a.out)
        print(f"{time.time() - t0:6.1f}s {op} {fam} {rows}x{n} done", flush=True)
    text = summary(results, meta.get("copy_tbps"))
    with open(os.path.join(os.path.dirname(os.path.abspath(a.out)), "summary.txt"), "w") as f:
        f.write(text + "\n")
    print(text)
    fails = sum(1 for r in results if "gate failed" in str(r.get("err")))
    print(f"total {time.time() - t0:.1f}s, {len(results)} records, gate failures: {fails}")
    return 0


def _wrap_call(base):
    def wrapped(op, plan, args):
        if plan == "compile":
            return compiled(op)(*args)
        return base(op, plan, args)

    wrapped.base = getattr(base, "base", base)
    return wrapped


def run_cell(op, rows, n, fam, compiled_keys, errors, meta, use_compile, smoke):
    size = r5.bytes_of(op, rows, n) // 2
    copies = max(1, min(32, -(-3 * L2 // max(size, 1))))
    try:
        ins = r5.make_inputs(op, rows, n, copies)
    except torch.OutOfMemoryError:
        return []
    plans = plans_for(op, rows, n, smoke)
    extra = ["torch"] + (["compile"] if use_compile and (op, rows, n) in WARMED else [])
    target = min(2e-3, max(3e-4, 30 * r5.bytes_of(op, rows, n) / 4e12))
    out = []
    for plan in extra + plans:
        named = isinstance(plan, str)
        rec = dict(op=op, rows=rows, width=n, family=fam, us=None,
                   plan=plan if named else repr(plan), rule=plan is plans[0])  # fmt: skip
        if not named and r5.compile_key(op, n, plan) not in compiled_keys:
            rec["err"] = errors.get(r5.compile_key(op, n, plan), "not compiled in time")
            out.append(rec)
            continue
        try:
            err, poisoned = r5.gate(op, plan, ins[0])
            rec.update(gate=err, poisoned=poisoned)
            if err > 1:
                rec["err"] = f"gate failed: err/allowed {err:.3g}"
                print(f"FAIL {op} {rows}x{n} {plan}: {rec['err']}", flush=True)
            else:
                us, us_min, calls = r5.time_plan(op, ins, plan, target)
                tb = r5.bytes_of(op, rows, n) / us / 1e6
                rec.update(us=us, us_min=us_min, calls=calls, tbps=tb)
                if meta.get("copy_tbps") and tb > 1.05 * meta["copy_tbps"]:
                    rec["flag"] = "above the copy ceiling"
        except Exception as e:  # noqa: BLE001 - recorded
            rec["err"] = f"{type(e).__name__}: {e}"[:200]
            print(f"ERR {op} {rows}x{n} {plan}: {rec['err']}", flush=True)
        out.append(rec)
    return out


def short(plan_repr: str) -> str:
    """A plan's repr without its default fields: ``coop 4096/4 w_early``."""
    from warpgauge.kernels.plans import RowPlan

    if not plan_repr.startswith("RowPlan("):
        return plan_repr
    p = eval(plan_repr, {"RowPlan": RowPlan})  # noqa: S307 - our own repr
    d = RowPlan(p.kind, p.block, p.num_warps)
    extra = [f"{f}={getattr(p, f)}" for f in p.__dataclass_fields__
             if f not in ("kind", "block", "num_warps") and getattr(p, f) != getattr(d, f)]  # fmt: skip
    return f"{p.kind} {p.block}/{p.num_warps} " + " ".join(extra)


def summary(results, copy_tbps=None):
    by = {}
    for r in results:
        by.setdefault((r["op"], r["rows"], r["width"], r["family"]), []).append(r)
    lines = [f"{'op':7s} {'fam':6s} {'shape':>14s} {'rule_us':>8s} {'best_us':>8s} "
             f"{'torch':>7s} {'compile':>7s} {'rule%cp':>7s} {'best%cp':>7s} "
             f"{'best/rule':>9s}  best plan"]  # fmt: skip
    for (op, rows, n, fam), rs in by.items():
        ok = [r for r in rs if r.get("us")]
        mine = [r for r in ok if r["plan"] not in ("torch", "compile")]
        if not mine:
            continue
        rule = [r for r in mine if r["rule"]]
        best = min(mine, key=lambda r: r["us"])

        def us(name, ok=ok):
            t = [r for r in ok if r["plan"] == name]
            return f"{t[0]['us']:7.1f}" if t else "      -"

        def pc(r):
            return f"{100 * r['tbps'] / copy_tbps:6.0f}%" if copy_tbps else "      -"

        ru = f"{rule[0]['us']:8.1f}" if rule else "       -"
        rp = pc(rule[0]) if rule else "      -"
        gain = f"{rule[0]['us'] / best['us']:9.3f}" if rule else "        -"
        lines.append(f"{op:7s} {fam:6s} {rows:>6d}x{n:<7d} {ru} {best['us']:8.1f} {us('torch')} "
                     f"{us('compile')} {rp} {pc(best)} {gain}  {short(best['plan'])}")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
