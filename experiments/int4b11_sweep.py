"""GPU sweep of INT4 linear plans at batch 32-256 on model shapes (int4b11; issue 11).

Question: does another plan than the default (``Int4Plan.for_shape``) make ``int4_linear`` faster
at batch 32-256? Every candidate is a forced ``Int4Plan`` (``plan=``) of the tile kernel
(``kernels/int4_tile.py``, the exact MODE 0 unless named m1) or of the mm kernel's default family;
nothing in the package changes.

Per (N, K) in SHAPES and M in BATCHES: ``wg`` (plan=None, the default; its plan is recorded),
``dense`` (BF16 F.linear on the dequantized weight, the reference time) and the candidates of
FAMILIES (below), each at the split-K values that reach 1, 2, 3 or 4 programs per SM (sized from
the device's SM count) and at split 1. Candidate names:
``t:bm,bn,split,warps,stages,mode,fused,tma`` (tile kernel) and ``m:bm,bn,split,warps,stages``
(mm kernel).

Checks: the first call of each candidate writes into NaN-poisoned buffers and is compared with an
FP64 reference of the exact dequantized weight (``reference.compare``, the tolerance table the GPU
tests use); a failing or erroring candidate is recorded and not timed. The graph's own output is
checked again after timing (``ok_after``). ``dense`` is timed only (BF16-rounded weight).

Timing: one CUDA graph per candidate (one call); per round, before each timed replay a 2x-L2
buffer is written and a separate 2x-L2 buffer is read (the read evicts the write's dirty lines, so
the timed call neither hits the weight in L2 nor pays write-backs); CUDA events around the replay;
candidates interleaved in a rotating order; median / p10 / p90 of ``--rounds`` (>= 20) rounds.
L2 size from ``torch.cuda.get_device_properties``. Kernels are compiled first by worker processes
(shared Triton cache). Output: ``<out>/sweep.jsonl`` (one JSON line per record, written as each
shape finishes), ``summary.txt`` / ``summary.json``; ``--summarize FILE`` rebuilds the summary.

    PYTHONPATH=src python3 experiments/int4b11_sweep.py --out $OUT/int4b11 --budget 165
    PYTHONPATH=src python3 experiments/int4b11_sweep.py --dry --out /tmp/int4b11   # CPU, FP16
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import traceback

DRY = "--dry" in sys.argv
if DRY:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402

from warpgauge.kernels import int4 as i4  # noqa: E402
from warpgauge.quant import Int4Weight  # noqa: E402
from warpgauge.reference import compare  # noqa: E402

DEV = "cpu" if DRY else "cuda"
DT = torch.float16 if DRY else torch.bfloat16  # the interpreter's BF16 dot is wrong
GS = 128
# (N, K) = (out, in) features: Llama-3-8B q/o, up/gate, down; Llama-3-70B q/o, up/gate;
# Llama-3-8B fused qkv (6144); Llama-2-7B up/gate (11008). The issue's three first.
SHAPES = [(14336, 4096), (8192, 8192), (4096, 4096), (4096, 14336), (28672, 8192), (6144, 4096),
          (11008, 4096)]  # fmt: skip
BATCHES = (32, 64, 128, 256)
DRY_SHAPES, DRY_BATCHES = [(192, 1024), (64, 512)], (20, 64, 256)

# Tile-kernel families: (name, block_m (0: max(32, next_pow2(M))), block_n, warps, stages, tma,
# mode, batches, split targets in programs per SM (0 = split 1), unfused too).
# Registers / shared memory from experiments/int4big_compile.py (sm_90a, no spills):
# 32x64x4w 96 regs, 64x64x4w 127, 32x128x4w 168, 64x128x4w 253, 128x64x4w 199 (106 KB at 3
# stages, 143 KB at 4), 128x128x8w 199, 256x64x8w 251 (139 KB at 2 stages).
SMALL, LARGE = (32, 64), (128, 256)
P_SMALL, P_LARGE = (0, 1, 2, 3, 4), (0, 1, 2)
FAMILIES = [
    # batch 32-64: the default tile (bm x 64, 4 warps, 3 stages, TMA), more stages, no TMA,
    # 128 weight rows per program (4 or 8 warps), the hi + lo form (mode 1) at batch 32
    ("s64", 0, 64, 4, 3, True, 0, SMALL, P_SMALL, True),
    ("s64st5", 0, 64, 4, 5, True, 0, SMALL, P_SMALL, False),
    ("s64cp", 0, 64, 4, 3, False, 0, SMALL, P_SMALL, False),
    ("s128", 0, 128, 4, 3, True, 0, SMALL, P_SMALL, False),
    ("s128w8", 0, 128, 8, 4, True, 0, SMALL, P_SMALL, False),
    ("s64m1", 0, 64, 4, 3, True, 1, (32,), P_SMALL, False),
    # batch 128-256: the default wide tile (128 x 64, 4 warps, 3 stages, TMA) and its stages /
    # cp.async / 8-warp 128 x 128 / 256-row and 64-row neighbours
    ("w128x64", 128, 64, 4, 3, True, 0, LARGE, P_LARGE, True),
    ("w128x64st4", 128, 64, 4, 4, True, 0, LARGE, P_LARGE, False),
    ("w128x64st2", 128, 64, 4, 2, True, 0, LARGE, P_LARGE, False),
    ("w128x64cp", 128, 64, 4, 3, False, 0, LARGE, P_LARGE, False),
    ("w128x128", 128, 128, 8, 3, True, 0, LARGE, P_LARGE, False),
    ("w256x64", 256, 64, 8, 2, True, 0, (256,), P_LARGE, False),
    ("w64x128", 64, 128, 4, 3, True, 0, LARGE, P_LARGE, False),
    ("w64x64st4", 64, 64, 4, 4, True, 0, (64,) + LARGE, P_LARGE, False),
]
MM_SPLITS = (1, 2, 4)  # mm kernel (SPLIT_K is a constexpr there): its default family at these


def _split(tiles, sm, per_sm, n_groups, min_groups=4, max_split=16):
    s = 1
    while tiles * s < per_sm * sm and n_groups >= 2 * s * min_groups and s < max_split:
        s *= 2
    return s


def tname(p: i4.Int4Plan) -> str:
    if p.kernel == "tile":
        fused = int(p.fused and p.split_k > 1)
        return (f"t:{p.block_m},{p.block_n},{p.split_k},{p.num_warps},{p.num_stages},{p.mode},"
                f"{fused},{int(p.tma)}")  # fmt: skip
    return f"m:{p.block_m},{p.block_n},{p.split_k},{p.num_warps},{p.num_stages}"


def parse(name: str) -> i4.Int4Plan:
    kind, v = name[0], [int(a) for a in name[2:].split(",")]
    if kind == "t":
        bm, bn, sp, w, st, mode, fused, tma = v
        return i4.Int4Plan(block_m=bm, block_n=bn, split_k=sp, num_warps=w, num_stages=st,
                           kernel="tile", mode=mode, fused=bool(fused), tma=bool(tma))  # fmt: skip
    bm, bn, sp, w, st = v
    return i4.Int4Plan(block_m=bm, block_n=bn, split_k=sp, num_warps=w, num_stages=st)


def candidates(M, N, K, sm):
    """[(name, family, per-SM target)] for one shape; names deduplicated, the default's plan
    included under its own name too (so it is timed as a forced plan as well as ``wg``)."""
    ng = K // GS
    out, seen = [], set()

    def add(name, fam, target):
        if name not in seen:
            seen.add(name)
            out.append((name, fam, target))

    for fam, bm, bn, w, st, tma, mode, ms, targets, unfused in FAMILIES:
        cls = min(BATCHES, key=lambda b: abs(b - M)) if DRY else M  # dry: the nearest batch
        if cls not in ms:
            continue
        bm = bm or max(32, triton.next_power_of_2(M))
        bn = min(bn, max(16, triton.next_power_of_2(N)))
        tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
        for t in targets:
            sp = 1 if t == 0 else _split(tiles, sm, t, ng)
            for fused in (1, 0) if (sp > 1 and unfused) else (1,):
                p = i4.Int4Plan(block_m=bm, block_n=bn, split_k=sp, num_warps=w, num_stages=st,
                                kernel="tile", mode=mode, fused=bool(fused), tma=tma)  # fmt: skip
                add(tname(p), fam, t)
    d = i4.Int4Plan.for_shape(M, N, K, sm, GS)
    if d.kernel == "mm":
        for sp in MM_SPLITS:
            if sp * 8 <= ng:
                add(
                    tname(
                        i4.Int4Plan(
                            block_m=d.block_m,
                            block_n=d.block_n,
                            split_k=sp,
                            num_warps=d.num_warps,
                            num_stages=d.num_stages,
                        )
                    ),
                    "mm",
                    sp,
                )
    add(tname(d), "default", -1)
    return out


def compile_key(name):
    p = parse(name)
    if p.kernel == "tile":  # the split is a runtime value of the tile kernel
        return ("t", p.block_m, p.block_n, p.num_warps, p.num_stages, p.mode, p.split_k > 1,
                p.fused and p.split_k > 1, p.tma)  # fmt: skip
    return ("m", repr(p))


def all_cases(sm):
    shapes, batches = (DRY_SHAPES, DRY_BATCHES) if DRY else (SHAPES, BATCHES)
    return [((N, K), [(M, candidates(M, N, K, sm)) for M in batches]) for N, K in shapes]


# --------------------------------------------------------------------------------------------


def weights(N, K, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    packed = torch.randint(0, 256, (N, K // 2), generator=g, device=DEV, dtype=torch.uint8)
    scales = (torch.rand(N, K // GS, generator=g, device=DEV) * 0.02 + 0.001).to(DT)
    return Int4Weight(packed, scales, (N, K), GS)


def reference(x, qw):
    """FP64 x @ W.T, W = q * scale exactly (dequantized in 4096-row chunks), rounded to x's dtype."""
    N, K = qw.shape
    out = torch.empty(x.shape[0], N, dtype=torch.float64, device=x.device)
    x64 = x.double()
    for n0 in range(0, N, 4096):
        n1 = min(N, n0 + 4096)
        w = Int4Weight(qw.packed[n0:n1], qw.scales[n0:n1], (n1 - n0, K), GS)
        out[:, n0:n1] = x64 @ w.dequantize(torch.float64).T
    return out.to(x.dtype)


def poisoned(fn):
    saved = i4._alloc

    def nan_alloc(shape, dtype, device):
        t = torch.empty(shape, dtype=dtype, device=device)
        return t.fill_(float("nan")) if dtype.is_floating_point else t.fill_(0x5A)

    i4._alloc = nan_alloc
    try:
        return fn()
    finally:
        i4._alloc = saved


def capture(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            out = fn()
    torch.cuda.current_stream().wait_stream(s)
    g.replay()
    torch.cuda.synchronize()
    return g, out


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, max(0, int(round(q * (len(v) - 1)))))]


def time_rounds(live, rounds, flush):
    """live: [(rec, replay)]; per round each replay after the flush, rotating order; us."""
    samples = {id(r): [] for r, _ in live}
    for r in range(rounds):
        k = r % len(live)
        order = live[k:] + live[:k]
        order = order[::-1] if r % 2 else order
        evs = []
        for rec, replay in order:
            if DEV == "cuda":
                wbuf, rbuf, scal = flush
                wbuf.fill_(r & 0x7F)
                torch.sum(rbuf, dim=0, out=scal)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                replay()
                b.record()
                evs.append((rec, a, b))
            else:
                t = time.perf_counter()
                replay()
                samples[id(rec)].append((time.perf_counter() - t) * 1e6)
        if DEV == "cuda":
            torch.cuda.synchronize()
            for rec, a, b in evs:
                samples[id(rec)].append(a.elapsed_time(b) * 1e3)
    for rec, _ in live:
        t = samples[id(rec)]
        rec.update(us=round(pct(t, 0.5), 3), p10=round(pct(t, 0.1), 3),
                   p90=round(pct(t, 0.9), 3), n=len(t))  # fmt: skip


def run_shape(N, K, batches, sm, args, flush, emit):
    qw = weights(N, K, N * 7 + K)
    m_max = max(M for M, _ in batches)
    g = torch.Generator(device=DEV).manual_seed(K)
    x_all = torch.randn(m_max, K, generator=g, device=DEV).to(DT)
    ref_all = reference(x_all, qw)
    w_dense = qw.dequantize(DT)
    for M, cands in batches:
        if time.time() > args.t_end:
            emit(dict(kind="skipped", M=M, N=N, K=K, reason="budget"))
            continue
        t0 = time.time()
        x, ref = x_all[:M].contiguous(), ref_all[:M]
        default = i4.Int4Plan.for_shape(M, N, K, sm, GS)
        items = [("dense", "dense", None, None), ("wg", "default", None, -1)]
        items += [(n, fam, parse(n), t) for n, fam, t in cands]
        live, recs = [], []
        for name, fam, plan, target in items:
            rec = dict(kind="case", M=M, N=N, K=K, variant=name, family=fam, target=target)
            if name == "wg":
                rec["plan"] = tname(default)
            elif plan is not None:
                rec["is_default"] = name == tname(default)
            try:
                if name == "dense":
                    fn = lambda x=x: torch.nn.functional.linear(x, w_dense)
                else:
                    fn = lambda x=x, plan=plan: i4.int4_linear(x, qw, plan=plan)
                out = poisoned(fn)
                if name != "dense":
                    chk = compare(out, ref)
                    rec.update(ok=bool(chk.ok), worst=round(chk.worst_ratio, 4))
                    if not chk.ok:
                        print(f"FAIL {M}x{N}x{K} {name} {chk}", flush=True)
                        recs.append(rec)
                        continue
                if DEV == "cuda":
                    gr, gout = capture(fn)
                    live.append((rec, gr.replay))
                    rec["_keep"] = (gr, gout)
                else:
                    live.append((rec, fn))
            except Exception as exc:  # a plan that fails to compile or launch is a result
                rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
                rec["tb"] = traceback.format_exc()[-600:]
                print(f"ERROR {M}x{N}x{K} {name} {rec['error'][:200]}", flush=True)
            recs.append(rec)
        if live:
            time_rounds(live, args.rounds, flush)
        for rec in recs:
            keep = rec.pop("_keep", None)
            if keep is not None and rec["variant"] != "dense":
                rec["ok_after"] = bool(compare(keep[1], ref).ok)
            emit(rec)
        del live, recs
        if DEV == "cuda":
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        print(f"{M}x{N}x{K}: {len(items)} variants {time.time() - t0:.1f} s "
              f"(at {time.time() - args.t0:.0f} s)", flush=True)  # fmt: skip


def compile_worker(part, nparts, sm):
    """Compile this worker's share of the distinct kernels (one launch each on a 256-row weight:
    the binary depends on the plan and the operands' divisibility, which every shape shares)."""
    keys = {}
    for (_N, K), batches in all_cases(sm):
        for M, cands in batches:
            for name, _f, _t in cands:
                keys.setdefault(compile_key(name), (M, name, K))
    todo = sorted(keys.values(), key=lambda c: (-c[0], c[1]))
    qw = weights(256, 4096, 1)
    for i, (M, name, _K) in enumerate(todo):
        if i % nparts != part:
            continue
        try:
            i4.int4_linear(torch.randn(M, 4096, device=DEV).to(DT), qw, plan=parse(name))
        except Exception as exc:
            print(f"compile error {name} {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    if DEV == "cuda":
        torch.cuda.synchronize()


# --------------------------------------------------------------------------------------------


def summarize(recs):
    """Text and JSON: per shape the default, the best exact candidate, dense; per family and
    split target the geometric mean of default / candidate over the shapes where it ran."""
    by = {}
    for r in recs:
        if r.get("kind") == "case" and "us" in r and (r["variant"] == "dense" or r.get("ok")):
            if r.get("ok_after") is False:
                continue
            by.setdefault((r["M"], r["N"], r["K"]), {})[r["variant"]] = r
    lines = [f"{'shape':18} {'dense':>7} {'default':>8} {'best':>7} {'b/def':>6} {'def/dn':>6} "
             f"{'best/dn':>7}  best variant (family)   default plan"]  # fmt: skip
    rows, rel = [], {}
    for (M, N, K), d in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        if "wg" not in d:
            continue
        ours = {v: r for v, r in d.items() if v != "dense"}
        ranked = sorted(ours.values(), key=lambda r: r["us"])
        best = ranked[0]
        dn = d.get("dense", {}).get("us", float("nan"))
        wg = d["wg"]["us"]
        for v, r in ours.items():
            if v != "wg":
                rel.setdefault((M > 64, r["family"], r["target"]), []).append(wg / r["us"])
        row = dict(M=M, N=N, K=K, dense_us=dn, default_us=wg, default_plan=d["wg"].get("plan"),
                   best=best["variant"], best_family=best["family"], best_us=best["us"],
                   best_vs_default=round(wg / best["us"], 3), default_vs_dense=round(dn / wg, 3),
                   best_vs_dense=round(dn / best["us"], 3),
                   top3=[(r["variant"], r["us"], r["p10"], r["p90"]) for r in ranked[:3]])  # fmt: skip
        rows.append(row)
        lines.append(f"{M}x{N}x{K:<8} {dn:7.1f} {wg:8.1f} {best['us']:7.1f} "
                     f"{row['best_vs_default']:6.2f} {row['default_vs_dense']:6.2f} "
                     f"{row['best_vs_dense']:7.2f}  {best['variant']} ({best['family']})  "
                     f"{row['default_plan']}")  # fmt: skip
    fam = []
    for (large, f, t), v in sorted(rel.items(), key=lambda kv: (kv[0][0], -len(kv[1]), kv[0][1])):
        gm = math.exp(sum(math.log(a) for a in v) / len(v))
        fam.append(dict(batch="128-256" if large else "32-64", family=f, target=t, n=len(v),
                        geomean_default_over=round(gm, 3), worst=round(min(v), 3),
                        best=round(max(v), 3)))  # fmt: skip
    lines.append(
        "\nper family and split target (programs per SM; 0 = split 1, -1 = the default "
        "plan): geomean of default_us / us (> 1: faster than the default), n, min, max"
    )
    for r in fam:
        lines.append(
            f"  {r['batch']:8} {r['family']:12} {r['target']:>3} n={r['n']:<3} "
            f"{r['geomean_default_over']:6.3f}  [{r['worst']:.3f}, {r['best']:.3f}]"
        )
    if rows:
        gm = math.exp(sum(math.log(r["best_vs_default"]) for r in rows) / len(rows))
        lines.append(
            f"\ngeomean best-per-shape / default over {len(rows)} shapes: {gm:.3f} "
            "(an upper bound: the best of many noisy samples)"
        )
    return "\n".join(lines), dict(shapes=rows, families=fam)


def write_summary(recs, out):
    text, data = summarize(recs)
    print(text, flush=True)
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(data, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp/out"), "int4b11"))
    ap.add_argument("--budget", type=float, default=165.0, help="seconds from start, then stop")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--warm-timeout", type=float, default=45.0)
    ap.add_argument("--part", type=int, default=-1)
    ap.add_argument("--nparts", type=int, default=1)
    ap.add_argument("--dry", action="store_true", help="CPU, TRITON_INTERPRET, FP16, tiny shapes")
    ap.add_argument("--list", action="store_true", help="print the cases and compile count")
    ap.add_argument("--sm", type=int, default=132, help="SM count without a GPU (--list, --dry)")
    ap.add_argument("--summarize", default="", help="a sweep.jsonl to summarize (nothing runs)")
    args = ap.parse_args()
    args.t0 = time.time()
    args.t_end = args.t0 + args.budget
    if args.summarize:
        with open(args.summarize) as f:
            recs = [json.loads(line) for line in f if line.strip()]
        write_summary(recs, os.path.dirname(os.path.abspath(args.summarize)))
        return
    cuda = not DRY and torch.cuda.is_available()
    sm = torch.cuda.get_device_properties(0).multi_processor_count if cuda else args.sm
    cases = all_cases(sm)
    n_cases = sum(len(c) + 2 for _, b in cases for _, c in b)
    n_keys = len({compile_key(n) for _, b in cases for _, c in b for n, _f, _t in c})
    if args.list:
        for (N, K), b in cases:
            for M, c in b:
                print(f"{M}x{N}x{K}: " + " ".join(n for n, _f, _t in c))
        print(f"{n_cases} cases, {n_keys} distinct kernels")
        return
    if not cuda and not DRY:
        sys.exit("no CUDA device (use --dry on the CPU)")
    if args.part >= 0:
        compile_worker(args.part, args.nparts, sm)
        return
    if args.rounds < 20 and not DRY:
        sys.exit("--rounds must be >= 20")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "sweep.jsonl")
    open(path, "w").close()
    recs = []

    def emit(rec):
        recs.append(rec)
        with open(path, "a") as f:
            f.write(json.dumps(rec) + "\n")

    l2 = int(torch.cuda.get_device_properties(0).L2_cache_size) if not DRY else 1 << 20
    emit(
        dict(
            kind="meta",
            device=torch.cuda.get_device_name(0) if not DRY else "cpu",
            sm=sm,
            l2=l2,
            torch=torch.__version__,
            triton=triton.__version__,
            rounds=args.rounds,
            dtype=str(DT),
            cases=n_cases,
            kernels=n_keys,
            git=os.environ.get("GIT_REV", "?"),
        )
    )
    print(f"{n_cases} cases, {n_keys} distinct kernels; SMs {sm}, L2 {l2 >> 20} MiB", flush=True)
    if args.workers > 0 and not DRY:
        t = time.time()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--part", str(i),
                                   "--nparts", str(args.workers)], env=env)
                 for i in range(args.workers)]  # fmt: skip
        for pr in procs:
            try:
                pr.wait(timeout=max(1, args.warm_timeout - (time.time() - t)))
            except subprocess.TimeoutExpired:
                pr.kill()
        emit(dict(kind="compile", seconds=round(time.time() - t, 1)))
        print(f"compile phase: {time.time() - t:.1f} s", flush=True)
    flush = None
    if not DRY:
        flush = (torch.empty(2 * l2, dtype=torch.uint8, device=DEV),
                 torch.ones(2 * l2 // 4, dtype=torch.float32, device=DEV),
                 torch.empty((), dtype=torch.float32, device=DEV))  # fmt: skip
    for (N, K), batches in cases:
        if time.time() > args.t_end - 4:
            emit(dict(kind="skipped", N=N, K=K, reason="budget"))
            continue
        run_shape(N, K, batches, sm, args, flush, emit)
    bad = [r for r in recs if r.get("kind") == "case" and r["variant"] != "dense"
           and (not r.get("ok") or r.get("ok_after") is False or "error" in r)]  # fmt: skip
    print(f"{len(recs)} records, {len(bad)} failed or errored", flush=True)
    for r in bad:
        print(f"  BAD {r['M']}x{r['N']}x{r['K']} {r['variant']} {r.get('error', '')[:120]}")
    write_summary(recs, args.out)


if __name__ == "__main__":
    main()
