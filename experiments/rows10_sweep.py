"""rows10 sweep: wide-row softmax and add_rms_norm (BF16) against the copy ceiling, cold lane.

Candidates (``RowPlan`` fields added in rows10): ``hold_x`` (the register cooperative softmax
holds its chunk as loaded, BF16, across the exchange and computes the exps again after it),
``maxnreg`` (a ptxas register cap: more programs per SM), ``nap`` (nanosleep between polls).

Timing (cold lane): one CUDA graph per plan holding one call; before each timed replay the L2 is
flushed by a write of 4x L2 and then a read of a separate clean 2x L2 buffer (``torch.sum`` into a
preallocated scalar), so the flush's dirty lines are written back before the start event. The
rule's plan is also timed after a write-only flush (``wflush``: the harness's flush) for
comparison. Samples: ``--samples`` rounds, plans in rotated order within each round; median.
SM count and L2 size come from the device. Every plan is gated against the FP64 reference
(NaN-poisoned outputs) on the cell's input, and every candidate also on special rows (all -inf, a
-inf prefix, a NaN, +1000 offset, a large logit) at an odd width and on strided rows.

    PYTHONPATH=src python3 experiments/rows10_sweep.py --out $OUT/rows10.json --budget 100
    PYTHONPATH=src TRITON_INTERPRET=1 python3 experiments/rows10_sweep.py --out /tmp/r.json --smoke
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rows5_sweep as r5  # noqa: E402

SOFTMAX_CELLS = [(4096, 131072), (1024, 151936), (64, 131072), (64, 128256), (16, 262144),
                 (8192, 32000)]  # fmt: skip
RMS_CELLS = [(4096, 131072), (16, 262144), (64, 131072)]
# Generalization (after the targets; the budget guard cuts from the end): DRAM-bound row counts
# (256 MB of compulsory traffic) at vocabulary and odd widths, few-row and L2-sized cells.
SOFTMAX_MORE = [(1335, 50257), (1023, 65537), (671, 100003), (523, 128256), (441, 151936),
                (256, 262144), (512, 131072), (16, 131072), (64, 50257), (99, 65537),
                (264, 100003), (132, 131072), (1, 131072)]  # fmt: skip
RMS_MORE = [(667, 50257), (220, 151936), (256, 131072)]


def sm_candidates(n, smoke=False):
    from warpgauge.kernels.plans import RowPlan as P

    if smoke:
        return [P.coop(128, 1, fast_exp=True, hold_x=True),
                P.coop(128, 1, fast_exp=True, hold_x=True, nap=100, maxnreg=40)]  # fmt: skip
    c = [
        P.coop(4096, 4, fast_exp=True),
        P.coop(4096, 4, fast_exp=True, hold_x=True, maxnreg=48),  # 10 programs per SM
        P.coop(4096, 4, fast_exp=True, hold_x=True, maxnreg=40),  # 12 per SM
        P.coop(8192, 8, fast_exp=True, hold_x=True, maxnreg=40),  # 6 per SM
        P.coop(4096, 4, fast_exp=True, hold_x=True),  # 64 registers: 8 per SM (control)
        P.coop(8192, 8, fast_exp=True, hold_x=True, maxnreg=48),
        P.coop(16384, 16, fast_exp=True, hold_x=True, maxnreg=40),
        P.coop(4096, 4, fast_exp=True, hold_x=True, maxnreg=48, nap=200),
        P.coop(16384, 8, sub=4096, evict=True, fast_exp=True),  # the looped rule (S9)
        P.coop(16384, 8, sub=4096, evict=True, fast_exp=True, maxnreg=48),
        P.coop(4096, 4, fast_exp=True, hold_x=True, maxnreg=32),  # 16 per SM (spills)
        P.coop(8192, 8, fast_exp=True, hold_x=True, maxnreg=32),  # 8 per SM (spills)
    ]
    if n <= 32768:
        c = c[:4] + [P("resident", 32768, 32, programs_per_sm=1, fast_exp=True)]
    return c


def rms_candidates(n, smoke=False):
    from warpgauge.kernels.plans import RowPlan as P

    if smoke:
        return [P.coop(128, 1, maxnreg=40)]
    if ROUND == 3:  # the rule before R10 (4096/4 where the new rule takes 2048/2)
        return [P.coop(4096, 4)]
    if ROUND == 2:
        return [P.coop(8192, 8), P.coop(16384, 16), P.coop(8192, 4), P.coop(16384, 8),
                P.coop(2048, 2), P.coop(16384, 8, sub=4096, evict=True)]  # fmt: skip
    return [P.coop(4096, 4, maxnreg=48), P.coop(4096, 4, maxnreg=56), P.coop(8192, 8, maxnreg=56),
            P.coop(8192, 8), P.coop(16384, 16)]  # fmt: skip


def sm_candidates2(n):
    """Round 2: the looped cooperative plan software-pipelined (cp.async slices in shared memory:
    loads of the next slices in flight while one is reduced), slices and chunk sizes."""
    from warpgauge.kernels.plans import RowPlan as P

    loop = dict(evict=True, fast_exp=True)
    if n <= 32768:
        return []
    return [
        P.coop(4096, 4, fast_exp=True),
        P.coop(16384, 8, sub=4096, **loop),  # S9's looped rule
        P.coop(16384, 8, sub=4096, stages=2, **loop),  # 71 registers (sm_90, triton 3.9): 3/SM
        P.coop(16384, 8, sub=4096, stages=3, **loop),
        P.coop(16384, 8, sub=2048, stages=3, **loop),  # 59: 4 per SM
        P.coop(16384, 4, sub=2048, stages=3, **loop),  # 71: 7 per SM
        P.coop(16384, 16, sub=4096, **loop),  # 40: 3 per SM, no spills
        P.coop(8192, 8, fast_exp=True),
    ]


def _kernels():
    from warpgauge.kernels import rmsnorm as rk
    from warpgauge.kernels import softmax as sk
    from warpgauge.kernels import softmax_coop as sc

    return [sc._softmax_coop, sc._softmax_coop_loop, rk._rms_coop, sk._softmax_resident_pf]


def _compiled(fns):
    out = {}
    for f in fns:
        for c in getattr(f, "device_caches", {}).values():
            try:
                for ck in c[0].values():
                    out[id(ck)] = (f.__name__, ck)
            except Exception:  # noqa: BLE001 - another Triton's cache layout: no register report
                pass
    return out


def warm_regs(job):
    """rows5_sweep.warm_one, plus (kernel, registers, spills) of the kernels it compiled (Triton's
    CompiledKernel.n_regs / n_spills on this machine's Triton)."""
    fns = _kernels()
    before = _compiled(fns)
    k, err = r5.warm_one(job)
    regs = [(name, getattr(ck, "n_regs", None), getattr(ck, "n_spills", None))
            for i, (name, ck) in _compiled(fns).items() if i not in before]  # fmt: skip
    return k, err, regs


def short(plan_repr):
    """A plan's repr without its default fields (for the log)."""
    import dataclasses

    from warpgauge.kernels.plans import RowPlan

    pre = "wflush " if plan_repr.startswith("wflush ") else ""
    try:
        p = eval(plan_repr[len(pre) :], {"RowPlan": RowPlan})  # noqa: S307 - our own repr
    except Exception:  # noqa: BLE001
        return plan_repr[:150]
    d = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
    keep = {k: v for k, v in d.items() if k in ("kind", "block", "num_warps")
            or v != dataclasses.fields(p)[list(d).index(k)].default}  # fmt: skip
    return pre + " ".join(f"{v}" if k in ("kind", "block") else f"{k}={v}" for k, v in keep.items())


ROUND = 1
SOFTMAX_R2 = [(4096, 131072), (1024, 151936), (64, 131072), (64, 128256), (16, 262144),
              (8192, 32000), (1335, 50257), (1023, 65537), (671, 100003), (523, 128256),
              (441, 151936), (256, 262144), (512, 131072), (16, 131072), (264, 100003),
              (132, 131072)]  # fmt: skip
RMS_R2 = [(4096, 131072), (16, 262144), (64, 131072), (667, 50257), (220, 151936),
          (256, 131072), (512, 65537), (128, 262144)]  # fmt: skip
REPEAT = [("softmax", 4096, 131072), ("rms", 4096, 131072), ("softmax", 1024, 151936)]


def cells(smoke):
    if smoke:
        return [("softmax", 3, 1001), ("softmax", 2, 1000), ("rms", 3, 1001)]
    if ROUND == 3:  # the final commit: add_rms_norm's new rule against the old, softmax rule
        rms = [(4096, 131072), (256, 131072), (667, 50257), (220, 151936), (512, 65537),
               (128, 262144), (16, 262144), (64, 131072), (64, 65537), (1024, 32776),
               (2, 1048576)]  # fmt: skip
        sm_ = [(4096, 131072), (1024, 151936), (64, 131072), (16, 262144)]
        return ([("rms", r, n) for r, n in rms] + [("softmax", r, n) for r, n in sm_]
                + [("rms", 4096, 131072, "rep"), ("rms", 256, 131072, "rep")])  # fmt: skip
    if ROUND == 2:  # the targets, generalization, then a second pass of three cells (noise)
        return ([("softmax", r, n) for r, n in SOFTMAX_R2[:6]] + [("rms", r, n) for r, n in RMS_R2[:3]]
                + [("softmax", r, n) for r, n in SOFTMAX_R2[6:]] + [("rms", r, n) for r, n in RMS_R2[3:]]
                + [c + ("rep",) for c in REPEAT])  # fmt: skip
    return ([("softmax", r, n) for r, n in SOFTMAX_CELLS] + [("rms", r, n) for r, n in RMS_CELLS]
            + [("softmax", r, n) for r, n in SOFTMAX_MORE] + [("rms", r, n) for r, n in RMS_MORE])  # fmt: skip


def cands(op, n, smoke):
    if op == "softmax" and ROUND == 3:
        return []  # the rule only: unchanged by R10, timed as a check of the final commit
    if op == "softmax":
        return sm_candidates2(n) if ROUND == 2 and not smoke else sm_candidates(n, smoke)
    return rms_candidates(n, smoke)


def rule(op, rows, n, sm, l2):
    from warpgauge.kernels.plans import RowPlan

    return RowPlan.for_shape(rows, n, sm, op, l2, 2)


def special_gate(plan, n, strided=False):
    """Special rows (rows9_sweep's) at width n; strided: rows of a wider buffer."""
    from warpgauge import reference as ref
    from warpgauge.kernels import softmax as softmax_k

    g = torch.Generator(device=r5.DEV).manual_seed(1)
    w = n + 64 if strided else n
    x = torch.randn((6, w), device=r5.DEV, generator=g).mul_(3.0)
    x[0] = float("-inf")
    x[1, : n // 2 + 3] = float("-inf")
    x[2, n // 3] = float("nan")
    x[3] += 1000.0
    x[4, 5] = 60.0
    x = x.to(torch.bfloat16)[:, :n]
    c = ref.compare(softmax_k.softmax(x, plan=plan), ref.softmax_ref(x), relative=True)
    return c.worst_ratio if c.ok else max(c.worst_ratio, 1e9)


class Cold:
    """Cold-lane sampler: flush (4x L2 write, then a 2x L2 clean read) before each replay."""

    def __init__(self, l2):
        self.wbuf = torch.empty(4 * l2, dtype=torch.uint8, device="cuda")
        self.rbuf = torch.ones(2 * l2 // 4, dtype=torch.float32, device="cuda")
        self.acc = torch.zeros((), dtype=torch.float32, device="cuda")

    def flush(self, read=True):
        self.wbuf.fill_(0x5A)
        if read:
            torch.sum(self.rbuf, dim=0, out=self.acc)

    @staticmethod
    def graph(fn):
        fn()
        torch.cuda.synchronize()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g.replay()
        torch.cuda.synchronize()
        return g

    def sample(self, graphs, samples):
        """{name: [us]}: graphs {name: (graph, read_flush)}; rounds rotate the order."""
        names = list(graphs)
        out = {k: [] for k in names}
        for r in range(samples):
            order = names[r % len(names) :] + names[: r % len(names)]
            if r % 2:
                order = order[::-1]
            evs = []
            for k in order:
                g, rd = graphs[k]
                self.flush(rd)
                a, b = torch.cuda.Event(True), torch.cuda.Event(True)
                a.record()
                g.replay()
                b.record()
                evs.append((k, a, b))
            torch.cuda.synchronize()
            for k, a, b in evs:
                out[k].append(a.elapsed_time(b) * 1e3)
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--workers", type=int, default=15)
    ap.add_argument("--budget", type=float, default=100.0)
    ap.add_argument("--compile-share", type=float, default=0.45)
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--round", type=int, default=1, help="candidate set: 1 (hold_x, caps), 2")
    a = ap.parse_args()
    global ROUND
    ROUND = a.round
    t0 = time.time()
    if a.smoke:
        r5.DEV, r5.SM, l2 = "cpu", 4, 1 << 20
    else:
        props = torch.cuda.get_device_properties(0)
        r5.SM, l2 = props.multi_processor_count, props.L2_cache_size
    sm = r5.SM
    cl = cells(a.smoke)
    plans_of, jobs = {}, {}
    for op, rows, n, *_tag in cl:
        ps = list(dict.fromkeys([rule(op, rows, n, sm, l2)] + cands(op, n, a.smoke)))
        plans_of[(op, rows, n)] = ps
        for p in ps:
            jobs.setdefault(r5.compile_key(op, n, p), (op, n, p))
    spec_w = [1001] if a.smoke else [50257]
    spec_plans = (
        sm_candidates2(131072) if ROUND == 2 and not a.smoke else sm_candidates(131072, a.smoke)
    )
    for n in spec_w:  # odd width: the aligned-body path of the candidates
        for p in spec_plans:
            jobs.setdefault(r5.compile_key("softmax", n, p), ("softmax", n, p))
    print(f"{len(cl)} cells, {len(jobs)} compile jobs, SM={sm}, L2={l2 >> 20} MB", flush=True)
    compiled, errors, regs = set(), {}, {}
    if a.smoke:
        for j in jobs.values():
            k, err, rg = warm_regs(j)
            regs[repr(k)] = rg
            (errors.__setitem__(k, err) if err else compiled.add(k))
    else:
        pool = mp.get_context("spawn").Pool(a.workers, initializer=r5._init_worker,
                                            initargs=(sm, r5.DEV))  # fmt: skip
        deadline = t0 + a.budget * a.compile_share
        it = pool.imap_unordered(warm_regs, list(jobs.values()))
        try:
            while True:
                try:
                    k, err, rg = it.next(timeout=max(0.1, deadline - time.time()))
                    regs[repr(k)] = rg
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
    print(f"compile {time.time() - t0:.1f}s: {len(compiled)} ok, {len(errors)} failed", flush=True)
    import triton

    meta = dict(sm=sm, l2=l2, torch=torch.__version__, triton=triton.__version__,
                device=torch.cuda.get_device_name(0) if r5.DEV == "cuda" else "cpu",
                samples=a.samples, compile_errors={repr(k): v for k, v in errors.items()},
                regs=regs)  # fmt: skip
    # special rows: every softmax candidate at an odd width and on strided rows
    specials = []
    for p in spec_plans:
        for n, strided in [(spec_w[0], False), (spec_w[0], True)]:
            if r5.compile_key("softmax", n, p) not in compiled:
                continue
            try:
                specials.append(dict(width=n, strided=strided, plan=repr(p),
                                     gate=special_gate(p, n, strided)))  # fmt: skip
            except Exception as e:  # noqa: BLE001 - recorded
                specials.append(dict(width=n, strided=strided, plan=repr(p),
                                     err=f"{type(e).__name__}: {e}"[:200]))  # fmt: skip
    bad = [s for s in specials if s.get("err") or s["gate"] > 1]
    print(f"special rows: {len(specials)} checks, {len(bad)} failed", flush=True)
    for s in bad:
        print("  SPECIAL FAIL", s, flush=True)
    meta["specials"] = specials
    cold = Cold(l2) if r5.DEV == "cuda" else None
    if cold is not None:  # the copy ceiling, cold, same method (256 MB moved)
        src = torch.empty(r5.TRAFFIC // 4, dtype=torch.bfloat16, device="cuda").normal_()
        dst = torch.empty_like(src)
        g = cold.graph(lambda: dst.copy_(src))
        res = cold.sample({"copy": (g, True), "copy_wflush": (g, False)}, a.samples)
        meta["copy_tbps"] = {k: r5.TRAFFIC / statistics.median(v) / 1e6 for k, v in res.items()}
        print(f"copy ceiling (cold) {meta['copy_tbps']}", flush=True)
        del src, dst, g
    results = []
    for op, rows, n, *tag in cl:
        rep = tag[0] if tag else ""
        if time.time() - t0 > a.budget:
            print("budget reached", flush=True)
            break
        ins = r5.make_inputs(op, rows, n, 1)[0]
        ps = plans_of[(op, rows, n)]
        graphs, recs = {}, {}
        for i, p in enumerate(ps):
            name = repr(p)
            rec = dict(op=op, rows=rows, width=n, plan=name, rule=i == 0, rep=rep)
            recs[name] = rec
            results.append(rec)
            if r5.compile_key(op, n, p) not in compiled:
                rec["err"] = errors.get(r5.compile_key(op, n, p), "not compiled in time")
                continue
            try:
                err, poisoned = r5.gate(op, p, ins)
                rec.update(gate=err, poisoned=poisoned)
                if err > 1:
                    rec["err"] = f"gate failed: err/allowed {err:.3g}"
                    print(f"FAIL {op} {rows}x{n} {p}: {rec['err']}", flush=True)
                    continue
                if cold is not None:
                    graphs[name] = (
                        cold.graph(lambda p=p, op=op, ins=ins: r5.call(op, p, ins)),
                        True,
                    )
                    if i == 0:
                        graphs["wflush " + name] = (graphs[name][0], False)
            except Exception as e:  # noqa: BLE001 - recorded
                rec["err"] = f"{type(e).__name__}: {e}"[:200]
                print(f"ERR {op} {rows}x{n} {p}: {rec['err']}", flush=True)
        if graphs:
            res = cold.sample(graphs, a.samples)
            for k, v in res.items():
                rec = recs.get(k)
                if rec is None:  # the rule's plan after a write-only flush
                    rec = dict(op=op, rows=rows, width=n, plan=k, rule=False, rep=rep)
                    results.append(rec)
                v.sort()
                rec.update(us=statistics.median(v), p10=v[len(v) // 10], p90=v[9 * len(v) // 10],
                           n=len(v), samples=v, tbps=r5.bytes_of(op, rows, n) / statistics.median(v) / 1e6)  # fmt: skip
        del graphs, ins
        with open(a.out + ".tmp", "w") as f:
            json.dump(dict(meta, results=results), f, indent=0)
        os.replace(a.out + ".tmp", a.out)
        print(f"{time.time() - t0:6.1f}s {op} {rows}x{n} {rep} done", flush=True)
        for r in results:
            mine = (r["op"], r["rows"], r["width"], r.get("rep", "")) == (op, rows, n, rep)
            if mine and r.get("us"):
                rk = repr((op, n, r["plan"][7:] if r["plan"].startswith("wflush ") else r["plan"]))
                r["regs"] = regs.get(rk)
                print(f"   {r['us']:8.1f} us {r['tbps']:5.2f} TB/s {'*' if r['rule'] else ' '} "
                      f"{short(r['plan'])} {r['regs']}", flush=True)  # fmt: skip
    fails = sum(1 for r in results if "gate failed" in str(r.get("err")))
    print(f"total {time.time() - t0:.1f}s, {len(results)} records, gate failures: {fails}, "
          f"special failures: {len(bad)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
