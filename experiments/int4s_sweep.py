"""GPU sweep of INT4 linear plans where the default loses (int4s round; issue 11, INT4 part).

Every case runs one provider on one shape: ``tinygemm`` (torch._weight_int4pack_mm), ``dense``
(BF16 F.linear on the dequantized weight), ``wg`` (int4_linear with its default plan) or a forced
``Int4Plan`` (``p:block_m,block_n,gpi,split_k,warps,stages,pipeline,flags``; flags: ``-`` none,
``t`` TILED_WEIGHT_AS_B (tiled path, with the even/odd halves), ``a`` TILED_ASM_DECODE, ``r``
TILED_ROUND_WEIGHT: the weight rounded to BF16 as q * scale, checked against the reference of
that rounded weight, like ``dense``).

Each case is first checked against an FP64 reference (exact dequantized weight) on a NaN-poisoned
output with the project's tolerance table (``reference.compare``), then timed two ways:

- ``us_cold``: the harness's cold lane: an L2 flush (a write of 4x L2) before each sample, then one
  CUDA-graph replay of one call between events; median of ``COLD_SAMPLES``.
- ``us_rot``: graph replay of ~1 ms of back-to-back calls over weight copies adding up to > 2x L2
  (the graph sized from ``us_cold``), median of 3 replays. (Round 1, results/int4s-h200, sized it
  from an eager estimate with ``graph_timer.bench_graph``: 4 calls per graph for the INT4 cases.)
- A baseline (tinygemm, dense) that fails the gate is still timed; its record keeps ``ok=False``.

Phase 1 compiles every distinct kernel once in worker processes (shared Triton cache; a kernel is
identified by its plan, flags and the specialization its operands get), phase 2 times all cases
in one process, shape by shape, rewriting ``$OUT/<tag>.json`` after each shape, and stops at the
budget. ``INT4S_DEVICE=cpu TRITON_INTERPRET=1 ... --set tiny`` is the CPU dry run (checks only).

    PYTHONPATH=src python3 experiments/int4s_sweep.py --out $OUT --budget 56
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

import torch
import triton

from warpgauge.kernels import int4 as i4
from warpgauge.quant import Int4Weight
from warpgauge.reference import compare

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_timer import l2_bytes  # noqa: E402  (same folder)

DEV = os.environ.get("INT4S_DEVICE", "cuda")
DT = torch.bfloat16
GS = 128
COLD_SAMPLES = 11
FLAG_ATTRS = {"t": "TILED_WEIGHT_AS_B", "a": "TILED_ASM_DECODE", "r": "TILED_ROUND_WEIGHT"}

# Real model projections (N = out features, K = in features): Llama-3 1B/3B/8B/70B, Qwen2.5-7B,
# Qwen2.5-14B, vocabulary heads of Llama-3 (128256) and Qwen3-1.7B (151936).
SMALL = [(4096, 4096), (2048, 2048), (3072, 3072), (5120, 5120), (6144, 4096), (2048, 8192),
         (8192, 2048)]  # fmt: skip
MID = [(14336, 4096), (4096, 14336), (8192, 8192), (18944, 3584), (3584, 18944)]
LARGE = [(28672, 8192), (8192, 28672), (128256, 4096), (151936, 2048)]


def _fmt(bm, bn, gpi, sp, w, st, pipe, fl="-"):
    return f"p:{bm},{bn},{gpi},{sp},{w},{st},{pipe},{fl}"


def rule_variant(M, N, K, sm):
    p = i4.Int4Plan.for_shape(M, N, K, sm, GS)
    return _fmt(p.block_m, p.block_n, p.groups_per_iter, p.split_k, p.num_warps, p.num_stages,
                p.pipeline)  # fmt: skip


def _split_for(tiles, sm, per_sm, max_split, n_groups, min_groups):
    s = 1
    while tiles * s < per_sm * sm and n_groups >= 2 * s * min_groups and s < max_split:
        s *= 2
    return s


def fma_variants(M, N, K, sm):
    """Pipelined FMA GEMV (block_m 1): the default's 32x4 tile at other splits and stages, shorter
    and longer tiles, all with splits sized from the device's SM count."""
    ng = K // GS
    out = []
    for bn, gpi, w, st, per_sm in ((32, 4, 2, 4, 3), (32, 4, 2, 3, 1.5), (32, 4, 2, 3, 6),
                                   (16, 8, 1, 4, 1.5), (64, 2, 2, 3, 3)):  # fmt: skip
        if gpi > ng:
            continue
        tiles = triton.cdiv(N, bn) * M
        sp = _split_for(tiles, sm, per_sm, 16, ng, 2 * gpi)
        out.append(_fmt(1, bn, gpi, sp, w, 1, st))
    if ng >= 4:  # the default tile, never split (no reduction launch)
        out.append(_fmt(1, 32, 4, 1, 2, 1, 3))
    return out


def dot_variants(M, N, K, sm):
    """Tensor-core GEMV (block_m 16) tiles and splits; the pipelined dot loop; for M <= 4 the FMA
    GEMV (one program per x row: the rows after the first read the weight from L2)."""
    ng = K // GS
    out = []
    for bn, w, per_sm in ((128, 4, 1.5), (256, 4, 3), (64, 2, 3)):
        tiles = triton.cdiv(N, bn)
        out.append(_fmt(16, bn, 1, _split_for(tiles, sm, per_sm, 16, ng, 2), w, 3, 0))
    for bn, gpi in ((64, 4),):
        if gpi <= ng:
            tiles = triton.cdiv(N, bn)
            out.append(_fmt(16, bn, gpi, _split_for(tiles, sm, 1.5, 16, ng, 2 * gpi), 4, 1, 3))
    if M <= 4:
        tiles = triton.cdiv(N, 32) * M
        out.append(_fmt(1, 32, 4, _split_for(tiles, sm, 3, 16, ng, 8), 2, 1, 3))
    return out


def tiled_variants(M, N, K, sm):
    """Tiled path (M > 16): tile shapes, stages, warps, splits, decode flags; the rounded-weight
    form (flag r) at the default tile, 4 stages, the weight as B, 64-row tiles."""
    ng = K // GS
    out = []
    bm0 = min(128, triton.next_power_of_2(M))
    for bm, bn, w, st, fl, per_sm in ((bm0, 128, 8, 4, "-", 0.75), (bm0, 64, 4, 3, "-", 1.5),
                                      (256, 64, 8, 2, "-", 0.75), (bm0, 128, 8, 3, "t", 0.75),
                                      (64, 128, 8, 3, "-", 0.75), (bm0, 128, 8, 3, "r", 0.75),
                                      (bm0, 128, 8, 4, "r", 0.75), (bm0, 128, 8, 3, "tr", 0.75),
                                      (bm0, 64, 4, 3, "r", 1.5)):  # fmt: skip
        if bm > triton.next_power_of_2(M):
            continue
        tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
        few = tiles < i4.FEW_TILES_PER_SM * sm
        ps = i4.FEW_TILES_PROGRAMS_PER_SM if few and per_sm < 1 else per_sm
        sp = _split_for(tiles, sm, ps, 16, ng, i4.MIN_GROUPS_PER_SPLIT)
        out.append(_fmt(bm, bn, 1, sp, w, st, 0, fl))
    return out


def cases(which, sm):
    """(N, K, [(M, variant), ...]) per weight shape, in priority order."""
    if which == "tiny":  # CPU dry run: small shapes that still reach every variant family
        plan = [((256, 1024), (1, 2, 4)), ((384, 640), (1, 3)), ((256, 2048), (1, 32, 256))]
    else:
        # the named losses first (4096^2 batch 1-8 and 128/256, then the mid shapes), then
        # breadth: other small shapes, scales-stride class 2, the large weights
        plan = [(SMALL[0], (1, 2, 4, 8, 128, 256))] + [(s, (1, 4, 256)) for s in MID[:2]]
        plan += [(MID[2], (1, 4, 128, 256))]
        plan += [(SMALL[1], (1, 2, 4, 8))] + [(s, (1, 4)) for s in SMALL[2:]]
        plan += [(s, (1, 4)) for s in MID[3:]] + [(s, (1, 4)) for s in LARGE[:1]]
        plan += [(s, (1,)) for s in LARGE[1:]] + [(LARGE[0], (256,)), ((6144, 4096), (64, 256))]
    out = []
    for (N, K), ms in plan:
        items = []
        # another scales-stride class: another compile per kernel, so fewer candidates there
        lite = which == "main" and (K // GS) % 16 != 0
        for M in ms:
            base = ["tinygemm", "dense", "wg"] if M <= 16 else ["dense", "wg"]
            if M == 1:
                cand = fma_variants(M, N, K, sm)[: 2 if lite else None]
                cand += dot_variants(M, N, K, sm)[: 0 if lite else 1]
            elif M <= 16:
                cand = dot_variants(M, N, K, sm)[: 2 if lite else None]
            else:
                cand = tiled_variants(M, N, K, sm)[: 3 if M < 128 else None]
            rule = rule_variant(M, N, K, sm)
            seen = {rule}
            for v in cand:
                if v not in seen:
                    seen.add(v)
                    base.append(v)
            items += [(M, v) for v in base]
        out.append((N, K, items))
    return out


def parse(variant, M, N, K, sm):
    """(Int4Plan, flags) of a variant name (wg: the rule's plan, default flags)."""
    if variant == "wg":
        variant = rule_variant(M, N, K, sm)
        fl = "-"
    else:
        fl = variant.split(",")[-1]
    bm, bn, gpi, sp, w, st, pipe = (int(v) for v in variant[2:].split(",")[:7])
    plan = i4.Int4Plan(block_m=bm, block_n=bn, groups_per_iter=gpi, split_k=sp, num_warps=w,
                       num_stages=st, pipeline=pipe)  # fmt: skip
    return plan, fl


def compile_key(variant, M, N, K, sm):
    """What decides the compiled binary: the plan and flags, M == 1 (the pipelined dot's
    broadcast), K // GS's divisibility by 16 (the scales' row stride) and by gpi (EVEN)."""
    plan, fl = parse(variant, M, N, K, sm)
    ng = K // GS
    return (repr(plan), fl, M == 1, ng % 16 == 0, ng % plan.groups_per_iter == 0)


def weights(N, K, copies):
    g = torch.Generator(device=DEV).manual_seed(N * 7 + K)
    packed = torch.randint(0, 256, (N, K // 2), generator=g, device=DEV, dtype=torch.uint8)
    scales = (torch.rand(N, K // GS, generator=g, device=DEV) * 0.02 + 0.001).to(DT)
    packs = [(packed, scales)] + [(packed.clone(), scales.clone()) for _ in range(copies - 1)]
    return Int4Weight(packed, scales, (N, K), GS), packs


def reference(x, qw, rounded=False):
    """FP64 x @ W.T with W = q * scale exactly (dequantized per 8192-row chunk), cast to BF16.
    rounded: W rounded to BF16 first (what the dense baseline multiplies)."""
    N = qw.shape[0]
    x64 = x.double()
    out = torch.empty(x.shape[0], N, dtype=torch.float64, device=x.device)
    for n0 in range(0, N, 8192):
        w = Int4Weight(qw.packed[n0 : n0 + 8192], qw.scales[n0 : n0 + 8192],
                       (min(8192, N - n0), qw.shape[1]), GS).dequantize(DT if rounded else torch.float64)  # fmt: skip
        w = w.double()
        out[:, n0 : n0 + 8192] = x64 @ w.T
    return out.to(DT)


class Flags:
    def __init__(self, letters):
        self.set = {FLAG_ATTRS[c]: True for c in letters if c in FLAG_ATTRS}

    def __enter__(self):
        self.saved = {a: getattr(i4, a) for a in self.set}
        for a, v in self.set.items():
            setattr(i4, a, v)

    def __exit__(self, *exc):
        for a, v in self.saved.items():
            setattr(i4, a, v)


def make_call(variant, x, N, K, packs, extra, sm):
    M = x.shape[0]
    if variant == "tinygemm":
        from warpgauge.bench.providers import tinygemm_layout

        if "tg" not in extra:
            extra["tg"] = [tinygemm_layout(Int4Weight(p, s, (N, K), GS)) for p, s in packs]
        mm = torch.ops.aten._weight_int4pack_mm
        return extra["tg"], lambda t: mm(x, t[0], t[1], t[2])
    if variant == "dense":
        if "dense" not in extra:
            n = max(1, len(packs) // 4)
            extra["dense"] = [Int4Weight(p, s, (N, K), GS).dequantize(DT) for p, s in packs[:n]]
        return extra["dense"], lambda w: torch.nn.functional.linear(x, w)
    plan, fl = parse(variant, M, N, K, sm)
    flags = Flags(fl)
    plan = None if variant == "wg" else plan

    def call(p):
        with flags:
            return i4.int4_linear_packed(x, p[0], p[1], GS, plan)

    return packs, call


def poisoned_call(fn):
    """One call with every output / scratch buffer of int4_linear NaN-filled first."""
    saved = i4._alloc

    def nan_alloc(shape, dtype, device):
        t = torch.empty(shape, dtype=dtype, device=device)
        return t.fill_(float("nan")) if dtype.is_floating_point else t.fill_(0x5A)

    i4._alloc = nan_alloc
    try:
        return fn()
    finally:
        i4._alloc = saved


def time_cold(fn, flush, samples=COLD_SAMPLES):
    """Harness cold lane: flush L2, then one graph replay of one call between events."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    ts = []
    for _ in range(samples):
        flush.zero_()
        s.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3)
    ts.sort()
    return ts[len(ts) // 2], ts[0]


def time_rot(fn, per_call_us, target_s=1.0e-3, replays=3, max_calls=300):
    """Rotating lane: one graph of back-to-back calls (``fn`` rotates the weight copies), its size
    from the cold lane's device time (not an eager, host-bound estimate); median and min per call
    over ``replays`` replays, in us, and the number of calls per graph."""
    n = int(min(max(target_s / max(per_call_us * 1e-6, 1e-7), 4), max_calls))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            for _ in range(n):
                fn()
    torch.cuda.current_stream().wait_stream(stream)
    g.replay()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    ts = []
    for _ in range(replays):
        s.record()
        g.replay()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3 / n)
    ts.sort()
    return ts[len(ts) // 2], ts[0], n


def run_shape(N, K, items, sm, l2, flush, timing, recs, t_end, save=lambda: None):
    wbytes = N * K // 2 + N * K // GS * 2
    copies = min(16, max(1, -(-int(2.2 * l2) // wbytes))) if DEV == "cuda" else 1
    qw, packs = weights(N, K, copies)
    m_max = max(M for M, _ in items)
    g = torch.Generator(device=DEV).manual_seed(K)
    x_all = torch.randn(m_max, K, generator=g, device=DEV).to(DT)
    ref_all = reference(x_all, qw)
    ref_dense = reference(x_all, qw, rounded=True) if any(v == "dense" for _, v in items) else None
    extra = {}
    for M, variant in items:
        if time.time() > t_end:
            return False
        rec = dict(M=M, N=N, K=K, variant=variant)
        if variant == "wg":
            rec["plan"] = rule_variant(M, N, K, sm)
        if variant == "tinygemm" and DEV != "cuda":
            continue
        try:
            x = x_all[:M]
            items_, call = make_call(variant, x, N, K, packs, extra, sm)
            state = [0]

            def fn(items_=items_, call=call, state=state):
                it = items_[state[0] % len(items_)]
                state[0] += 1
                return call(it)

            def one(items_=items_, call=call):
                return call(items_[0])

            t_first = time.time()
            out = poisoned_call(one)
            if timing:
                torch.cuda.synchronize()
            rec["first_call_s"] = round(time.time() - t_first, 3)  # compile / load included
            rounded = variant == "dense" or (variant.startswith("p:") and "r" in variant[-3:])
            ref = (ref_dense if rounded else ref_all)[:M]
            chk = compare(out, ref)
            rec.update(ok=bool(chk.ok), worst=round(chk.worst_ratio, 4))
            if not chk.ok:
                print("FAIL", rec, str(chk), flush=True)
            # a baseline that fails the gate (tinygemm's numerics) is still timed, marked ok=False
            if timing and (chk.ok or variant in ("tinygemm", "dense")):
                rec["us_cold"], rec["us_cold_min"] = time_cold(one, flush)
                rec["us_rot"], rec["us_rot_min"], rec["n_graph"] = time_rot(fn, rec["us_cold"])
                out2 = one()  # the gate again, on a call after timing
                rec["ok_after"] = bool(compare(out2, ref).ok)
        except Exception as exc:  # a variant that fails to compile or launch is a result
            rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            rec["tb"] = traceback.format_exc()[-800:]
            print("ERROR", variant, M, N, K, rec["error"][:200], flush=True)
        recs.append(rec)
        if len(recs) % 4 == 0:
            save()
    return True


def compile_worker(part, nparts, which, sm):
    keys = {}
    for N, K, items in cases(which, sm):
        for M, v in items:
            if v in ("tinygemm", "dense"):
                continue
            keys.setdefault(compile_key(v, M, N, K, sm), (M, v, N, K))
    todo = sorted(keys.values(), key=lambda c: (-c[0], c[1]))  # tiled (large M) first
    for i, (M, v, N, K) in enumerate(todo):
        if i % nparts != part:
            continue
        plan, fl = parse(v, M, N, K, sm)
        qw, packs = weights(256, K, 1)
        x = torch.randn(M, K, device=DEV).to(DT)
        try:
            with Flags(fl):
                i4.int4_linear_packed(x, qw.packed, qw.scales, GS, plan)
        except Exception as exc:
            print("compile error", v, M, K, f"{type(exc).__name__}: {str(exc)[:200]}", flush=True)
    if DEV == "cuda":
        torch.cuda.synchronize()


def summarize(recs):
    by = {}
    for r in recs:
        by.setdefault((r["M"], r["N"], r["K"]), {})[r["variant"]] = r
    print(f"\n{'shape':17} {'tiny':>6} {'dense':>6} {'wg':>6} {'best':>6} {'b/wg':>5} "
          f"{'vs ref':>6}  best cold variant   | rot: wg / best")  # fmt: skip
    for (M, N, K), d in by.items():
        u = {v: r["us_cold"] for v, r in d.items() if "us_cold" in r}
        ur = {v: r["us_rot"] for v, r in d.items() if "us_rot" in r}
        ours = {v: t for v, t in u.items() if v.startswith("p:") or v == "wg"}
        if not ours or "wg" not in u:
            continue
        b = min(ours, key=ours.get)
        rv = "tinygemm" if M <= 16 else "dense"
        refv = u.get(rv, 0)
        ob = {v: t for v, t in ur.items() if v.startswith("p:") or v == "wg"}
        br = min(ob, key=ob.get) if ob else "wg"
        print(f"{M}x{N}x{K:<7} {u.get('tinygemm', 0):6.1f} {u.get('dense', 0):6.1f} "
              f"{u['wg']:6.1f} {u[b]:6.1f} {u['wg'] / u[b]:5.2f} {refv / u[b]:6.2f}  {b:19} | "
              f"{ur.get('wg', 0):.1f} / {ob.get(br, 0):.1f} {br}")  # fmt: skip


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--part", type=int, default=-1)
    ap.add_argument("--nparts", type=int, default=1)
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--warm-timeout", type=float, default=24)
    ap.add_argument("--budget", type=float, default=56.0)
    ap.add_argument("--tag", default="int4s")
    ap.add_argument("--set", default="main")
    args = ap.parse_args()
    t0 = time.time()
    cuda = DEV == "cuda"
    sm = torch.cuda.get_device_properties(0).multi_processor_count if cuda else 4
    sm = 132 if args.set == "tiny" else sm
    if args.part >= 0:
        compile_worker(args.part, args.nparts, args.set, sm)
        return
    allc = cases(args.set, sm)
    n_cases = sum(len(it) for _, _, it in allc)
    n_keys = len({compile_key(v, M, N, K, sm) for N, K, it in allc for M, v in it
                  if v not in ("tinygemm", "dense")})  # fmt: skip
    l2 = l2_bytes() if cuda else 60 << 20
    os.makedirs(args.out, exist_ok=True)
    print(f"{n_cases} cases, {n_keys} kernels; torch {torch.__version__} triton "
          f"{triton.__version__} SMs {sm} L2 {l2 >> 20} MB", flush=True)  # fmt: skip
    if args.workers > 0:
        t = time.time()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--part", str(i),
                                   "--nparts", str(args.workers), "--set", args.set], env=env)
                 for i in range(args.workers)]  # fmt: skip
        for pr in procs:
            try:
                pr.wait(timeout=max(1, args.warm_timeout - (time.time() - t)))
            except subprocess.TimeoutExpired:
                pr.kill()
        print(f"compile phase: {time.time() - t:.1f} s", flush=True)
    flush = torch.empty(4 * l2, dtype=torch.uint8, device=DEV) if cuda else None
    path = os.path.join(args.out, f"{args.tag}.json")
    recs = []
    t_end = t0 + args.budget

    def save():
        with open(path + ".tmp", "w") as f:
            json.dump(recs, f, indent=0)
        os.replace(path + ".tmp", path)

    for N, K, items in allc:
        ts = time.time()
        done = run_shape(N, K, items, sm, l2, flush, cuda, recs, t_end, save)
        print(f"{N}x{K}: {len(items)} cases {time.time() - ts:.1f} s (at {time.time() - t0:.0f} s)",
              flush=True)  # fmt: skip
        save()
        if cuda:
            torch.cuda.empty_cache()
        if not done:
            print(f"budget reached at {N}x{K}", flush=True)
            break
    bad = [r for r in recs if not r.get("ok") or r.get("ok_after") is False]
    print(f"{len(recs)} records, {len(bad)} failed or errored", flush=True)
    summarize(recs)


if __name__ == "__main__":
    main()
