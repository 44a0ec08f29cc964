"""GPU sweep of the INT4 linear plans (issue 11, INT4 part): many Int4Plan x flag variants per
shape against tinygemm, dense BF16 F.linear on the dequantized weight and (M >= 64) dequantize +
cuBLAS. Cold L2 (weights rotated over copies > 2.5x L2), CUDA-graph replay; every case is
checked against an FP64 reference before it is timed.

    PYTHONPATH=src python3 experiments/int4_gemv_sweep.py --out $OUT --budget 110 [--set r1]

Phase 1 compiles each distinct kernel variant once in worker processes (shared Triton cache),
phase 2 times everything in one process, shape by shape, writing $OUT/<tag>.json as it goes.
Variant names: ``p:block_m,block_n,gpi,split_k,warps,stages,flags`` with flag bits 1 PTX decode,
2 one-row x broadcast, 4 weight as dot B, 8 even/odd halves as two dots, 16 offset fold (bits 1
and 4 act on the GEMV path, block_m 16), 32 weight as B and 64 PTX decode on the tiled path.
In round 1 (r1.json) the tiled path ignored bits 1 and 4 (no bit 64 yet) and bit 8 acted on it
alone. ``r:FLAGS`` is the default plan with those flags; ``wg`` the default plan and flags.
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
import zlib

import torch
import triton

from warpgauge.kernels import int4 as i4
from warpgauge.quant import Int4Weight

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_timer import bench_graph, l2_bytes  # noqa: E402  (same folder)

MAX_CALLS = 300  # calls per graph at most

DT = torch.bfloat16
DEV = os.environ.get("INT4_SWEEP_DEVICE", "cuda")  # "cpu": a dry run under TRITON_INTERPRET=1
FLAGS = (
    "USE_ASM_DECODE",
    "ONE_ROW_BROADCAST",
    "WEIGHT_AS_B",
    "SPLIT_HALVES",
    "FOLD_OFFSET",
    "TILED_WEIGHT_AS_B",
)
GEMV_SHAPES = [(4096, 4096), (8192, 8192), (14336, 4096), (4096, 14336), (28672, 8192),
               (128256, 4096)]  # fmt: skip
BIG_SHAPES = [(4096, 4096), (8192, 8192), (14336, 4096), (4096, 14336), (28672, 8192)]


def _splits(tiles, lo=96, hi=2112):
    """split_k values that give between ~1 and ~16 programs per SM."""
    out = [sp for sp in (1, 2, 4, 8, 16) if lo <= tiles * sp <= hi]
    return out or [max(1, min(16, triton.next_power_of_2(max(1, lo // max(tiles, 1)))))]


def gemv_variants(M, N):
    v = ["tinygemm", "wg"]
    if M == 1:
        v += ["dense"] + [f"p:1,64,1,{s},2,1,0" for s in (2, 4)]
    for bn, w, st, fl in ((256, 4, 3, 13), (128, 4, 3, 13), (512, 8, 3, 13), (256, 4, 4, 13),
                          (256, 8, 3, 13), (64, 2, 3, 13), (256, 4, 3, 15), (256, 4, 3, 29)):  # fmt: skip
        if fl == 15 and M != 1:
            continue
        sps = _splits(N // bn)
        if fl in (15, 29):  # the side flags: at the middle split only
            sps = sps[len(sps) // 2 : len(sps) // 2 + 1]
        for sp in sps:
            v.append(f"p:16,{bn},1,{sp},{w},{st},{fl}")
    return v


def big_variants(M):
    v = ["dense", "wg", "deq"]
    for bm, bn, w, st, fl in ((64, 128, 8, 3, 1), (128, 128, 8, 3, 1), (64, 128, 4, 3, 45),
                              (64, 128, 4, 4, 45), (64, 256, 8, 3, 45), (128, 128, 8, 3, 45),
                              (32, 128, 4, 3, 45), (128, 256, 8, 3, 45), (64, 64, 4, 3, 45),
                              (64, 128, 8, 3, 9)):  # fmt: skip
        if bm > M or (bm == 32 and M > 64):
            continue
        v.append(f"p:{bm},{bn},1,1,{w},{st},{fl}")
    return v


def r2_cases():
    """Round 2: long per-row runs on the FMA GEMV (groups_per_iter 4-16 with few rows), the
    defaults against tinygemm, and the tiled path's decode / split choices at the rule's splits."""
    out = []
    for N, K in ((28672, 8192), (128256, 4096), (8192, 8192), (4096, 4096)):
        v = ["tinygemm", "wg"]
        for bn, gpi, w in ((16, 8, 2), (16, 16, 4), (32, 4, 2), (32, 8, 4), (64, 4, 4), (16, 4, 1),
                           (64, 2, 2)):  # fmt: skip
            if gpi * 128 > K:
                continue
            for sp in _splits(N // bn, 264, 2112)[:3]:
                if sp * gpi <= K // 128:
                    v.append(f"p:1,{bn},{gpi},{sp},{w},1,0")
        out += [dict(M=1, N=N, K=K, variant=x) for x in v]
    for M in (4, 16):
        for N, K in GEMV_SHAPES:
            out += [dict(M=M, N=N, K=K, variant=x) for x in ("tinygemm", "wg", "r:5")]
    for M in (64, 256, 128):
        for N, K in BIG_SHAPES:
            v = ["dense", "wg", "r:0", "r:64", "r:72"]
            v += [f"p:64,128,1,{sp},4,3,{fl}" for sp in (1, 2) for fl in (40, 104)]
            v += [f"p:64,128,1,{sp},8,3,{fl}" for sp in (1, 2) for fl in (0, 64)]
            if M >= 128:
                v += [f"p:128,128,1,{sp},8,3,{fl}" for sp in (1, 2) for fl in (0, 64)]
            out += [dict(M=M, N=N, K=K, variant=x) for x in v]
    return out


PIPE_CONFIGS = ((64, 1, 2, 3), (64, 1, 2, 4), (64, 2, 2, 3), (32, 4, 2, 3), (16, 8, 2, 3),
                (128, 1, 4, 3), (32, 2, 2, 4), (64, 4, 4, 3))  # fmt: skip
# (results/int4-pipe-h200 also tried (8, 16, 2, 3): block_n < 16 is not a plan, so it failed)


# The pipelined tensor-core GEMV (block_m 16): rows, groups per step, warps, stages.
# Flags 1: the PTX decode; 17: the PTX decode without its subtract (FOLD_OFFSET).
DOT_PIPE_CONFIGS = ((128, 2, 4, 3, 1), (64, 4, 4, 3, 1), (128, 2, 4, 3, 17), (32, 8, 2, 3, 1),
                    (128, 4, 4, 3, 1), (256, 1, 4, 3, 1), (64, 2, 2, 3, 1),
                    (64, 4, 4, 3, 17))  # fmt: skip


def pipe_splits(tiles, sm, n_groups, gpi, lo=2.5, hi=20, most=3):
    """split_k values for lo-hi programs per SM (at least 2 steps per split), smallest first."""
    ok = [sp for sp in (1, 2, 4, 8, 16) if lo * sm <= tiles * sp <= hi * sm
          and n_groups // (gpi * sp) >= 2]  # fmt: skip
    return ok[:most] or [1]


def pipe_cases(sm=132):
    """int4-pipe round 1: the pipelined FMA GEMV (``p:1,bn,gpi,split,warps,1,0,stages``) and the
    pipelined tensor-core GEMV (``p:16,bn,gpi,split,warps,1,flags,stages``) against the default
    plan and tinygemm at batch 1, the large weights first; then batch 4 and 16 (the default, one
    pipelined FMA plan, three tensor-core ones)."""
    out = []
    for N, K in ((28672, 8192), (128256, 4096), (4096, 4096), (14336, 4096), (4096, 14336),
                 (8192, 8192)):  # fmt: skip
        v = ["tinygemm", "wg"]
        for bn, gpi, w, st in PIPE_CONFIGS:
            for sp in pipe_splits(N // bn, sm, K // 128, gpi, most=2):
                v.append(f"p:1,{bn},{gpi},{sp},{w},1,0,{st}")
        for bn, gpi, w, st, fl in DOT_PIPE_CONFIGS:
            for sp in pipe_splits(N // bn, sm, K // 128, gpi, lo=1.5, hi=12, most=2):
                v.append(f"p:16,{bn},{gpi},{sp},{w},1,{fl},{st}")
        out += [dict(M=1, N=N, K=K, variant=x) for x in v]
    for M, N, K in ((4, 8192, 8192), (16, 28672, 8192), (4, 4096, 4096), (16, 8192, 8192),
                    (4, 28672, 8192)):  # fmt: skip
        v = ["tinygemm", "wg", "p:1,64,1,2,2,1,0,3"]
        for bn, gpi, w, st, fl in DOT_PIPE_CONFIGS[:3]:
            for sp in pipe_splits(N // bn, sm, K // 128, gpi, lo=1.5, hi=12, most=1):
                v.append(f"p:16,{bn},{gpi},{sp},{w},1,{fl},{st}")
        out += [dict(M=M, N=N, K=K, variant=x) for x in v]
    return out


def cases(which):
    """Batch 1-16 on every shape first, then the large batches (the loop stops at its budget)."""
    if which == "r2":
        return r2_cases()
    if which == "pipe":
        sm = torch.cuda.get_device_properties(0).multi_processor_count if DEV == "cuda" else 132
        return pipe_cases(sm)
    out = []
    for M in (1, 16, 4):
        for N, K in GEMV_SHAPES:
            out += [dict(M=M, N=N, K=K, variant=x) for x in gemv_variants(M, N)]
    for M in (256, 64, 128):
        for N, K in BIG_SHAPES:
            out += [dict(M=M, N=N, K=K, variant=x) for x in big_variants(M)]
    return out


_CACHE = {}


def operands(N, K, copies):
    key = (N, K)
    if key not in _CACHE:  # every shape stays resident (~10 GB in all): cases revisit shapes
        g = torch.Generator(device=DEV).manual_seed(N + K)
        packed = torch.randint(0, 256, (N, K // 2), generator=g, device=DEV, dtype=torch.uint8)
        scales = (torch.rand(N, K // 128, generator=g, device=DEV) * 0.02 + 0.001).to(DT)
        qw = Int4Weight(packed, scales, (N, K), 128)
        packs = [(packed, scales)] + [(packed.clone(), scales.clone()) for _ in range(copies - 1)]
        _CACHE[key] = (qw, packs, {})
    return _CACHE[key]


def build(c, l2):
    M, N, K, variant = c["M"], c["N"], c["K"], c["variant"]
    wbytes = N * K // 2 + N * K // 128 * 2
    copies = min(16, max(1, math.ceil(2.5 * l2 / wbytes)))
    qw, packs, extra = operands(N, K, copies)
    g = torch.Generator(device=DEV).manual_seed(M)
    x = torch.randn(M, K, generator=g, device=DEV).to(DT)
    if "wref" not in extra:  # 128256 x 4096: FP64 would need 4 GB; FP32 of the exact weight
        extra["wref"] = qw.dequantize(torch.float64 if N * K <= 28672 * 8192 else torch.float32)
    wref = extra["wref"]
    ref = (x.to(wref.dtype) @ wref.T).float()
    kind, _, opt = variant.partition(":")
    state = {"i": 0}
    if kind == "tinygemm":
        from warpgauge.bench.providers import tinygemm_layout

        tg = [tinygemm_layout(Int4Weight(p, s, (N, K), 128)) for p, s in packs]
        mm = torch.ops.aten._weight_int4pack_mm
        items, call = tg, (lambda p: mm(x, p[0], p[1], p[2]))
    elif kind == "dense":
        if "dense" not in extra:
            wd = qw.dequantize(DT)
            extra["dense"] = [wd] + [wd.clone() for _ in range(max(1, math.ceil(copies / 4)) - 1)]
        items, call = extra["dense"], (lambda w: torch.nn.functional.linear(x, w))
    elif kind == "deq":  # dequantize to BF16 (a Triton-free torch op chain) then cuBLAS
        items = packs

        def call(p):
            w = Int4Weight(p[0], p[1], (N, K), 128).dequantize(DT)
            return torch.nn.functional.linear(x, w)
    else:
        items = packs
        if kind == "wg":
            plan, fl = None, None
        elif kind == "r":  # the default plan with the flags given
            plan, fl = None, int(opt)
        else:
            vals = [int(v) for v in opt.split(",")]
            bm, bn, gpi, split, w, st, fl = vals[:7]
            pipe = vals[7] if len(vals) > 7 else 0  # an 8th field: Int4Plan.pipeline
            plan = i4.Int4Plan(block_m=bm, block_n=bn, groups_per_iter=gpi, split_k=split,
                               num_warps=w, num_stages=st, pipeline=pipe)  # fmt: skip

        def call(p):
            saved = [getattr(i4, f) for f in FLAGS]
            if fl is not None:
                for bit, f in enumerate(FLAGS):
                    setattr(i4, f, bool(fl >> bit & 1))
            try:
                return i4.int4_linear_packed(x, p[0], p[1], 128, plan)
            finally:
                for f, v in zip(FLAGS, saved):
                    setattr(i4, f, v)

    def fn():
        it = items[state["i"] % len(items)]
        state["i"] += 1
        return call(it)

    def check(out):
        out = out.float()
        err = (out - ref).abs()
        tol = 1e-2 * ref.abs() + 1e-2 * ref.abs().max()
        return float(err.max() / ref.abs().max()), bool((err <= tol).all()) and out.isfinite().all()

    return fn, check


def run_case(c, l2, timing=True):
    rec = dict(c)
    try:
        t = time.time()
        fn, check = build(c, l2)
        out = fn()
        if DEV == "cuda":
            torch.cuda.synchronize()
        rec["first_call_s"] = round(time.time() - t, 3)
        rec["err"], rec["ok"] = check(out)
        rec["ok"] = bool(rec["ok"])
        if timing and rec["ok"]:
            med, mn, n = bench_graph(fn, max_calls=MAX_CALLS)
            rec.update(us=med * 1e6, us_min=mn * 1e6, n_graph=n)
    except Exception as exc:  # a variant that fails to compile or launch is a result
        rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        rec["tb"] = traceback.format_exc()[-600:]
    return rec


def compile_key(c):
    return f"{c['variant']}|{c['M'] == 1}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--part", type=int, default=-1)
    ap.add_argument("--nparts", type=int, default=1)
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--warm-timeout", type=int, default=55)
    ap.add_argument("--budget", type=float, default=110.0)
    ap.add_argument("--tag", default="int4_sweep")
    ap.add_argument("--set", default="r1")
    args = ap.parse_args()
    t_start = time.time()
    allc = cases(args.set)
    l2 = l2_bytes()
    if args.part >= 0:  # compile worker: each distinct kernel once, on the smallest shape
        seen = set()
        for c in allc:
            k = compile_key(c)
            if k in seen or c["variant"] in ("tinygemm", "dense", "deq"):
                continue
            seen.add(k)
            if zlib.crc32(k.encode()) % args.nparts != args.part:
                continue
            r = run_case(dict(c, N=4096, K=4096), l2, timing=False)
            if "error" in r:
                print("warm error", k, r["error"][:200], flush=True)
        return
    os.makedirs(args.out, exist_ok=True)
    p = torch.cuda.get_device_properties(0)
    print(f"{len(allc)} cases; torch {torch.__version__} triton {triton.__version__} {p.name} "
          f"SMs {p.multi_processor_count} L2 {l2 >> 20} MB", flush=True)  # fmt: skip
    if args.workers > 0:
        t = time.time()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        procs = [subprocess.Popen([sys.executable, __file__, "--part", str(i), "--nparts",
                                   str(args.workers), "--set", args.set], env=env)
                 for i in range(args.workers)]  # fmt: skip
        for pr in procs:
            try:
                pr.wait(timeout=max(1, args.warm_timeout - (time.time() - t)))
            except subprocess.TimeoutExpired:
                pr.kill()
        print(f"compile phase: {time.time() - t:.1f} s", flush=True)
    path = os.path.join(args.out, f"{args.tag}.json")
    recs = []
    for i, c in enumerate(allc):
        if time.time() - t_start > args.budget:
            print(f"budget reached after {i} of {len(allc)} cases", flush=True)
            break
        r = run_case(c, l2)
        recs.append(r)
        if "error" in r or not r.get("ok"):
            print("FAIL", c, r.get("err"), r.get("error", "")[:200], flush=True)
        if i % 10 == 0:
            if i % 50 == 0:
                print(i, c, r.get("us"), f"{time.time() - t_start:.0f}s", flush=True)
            with open(path + ".tmp", "w") as f:
                json.dump(recs, f)
            os.replace(path + ".tmp", path)
    ceiling = copy_ceiling() if DEV == "cuda" else None
    if DEV == "cuda":
        torch.cuda.empty_cache()
    recs.append(dict(variant="copy_ceiling", tbs=ceiling))
    with open(path + ".tmp", "w") as f:
        json.dump(recs, f, indent=0)
    os.replace(path + ".tmp", path)
    summarize(recs, ceiling)


def copy_ceiling(nbytes=1 << 30):
    """A device-to-device copy of 1 GiB (read + write bytes per second, TB/s), graph-timed."""
    a = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_()
    b = torch.empty_like(a)
    med, _, _ = bench_graph(lambda: b.copy_(a), target_s=5e-3, max_calls=MAX_CALLS)
    return 2 * nbytes / med / 1e12


def summarize(recs, ceiling=None):
    """us of tinygemm / dense / the default (wg) / the best forced plan; TB/s of the best on
    compulsory bytes and its % of the measured copy ceiling (when given)."""
    by = {}
    for r in recs:
        if "M" in r:
            by.setdefault((r["M"], r["N"], r["K"]), []).append(r)
    if ceiling:
        print(f"\ncopy ceiling {ceiling:.2f} TB/s (1 GiB device copy, read + write)")
    print(f"\n{'shape':18} {'tiny':>7} {'dense':>7} {'wg':>7} {'best':>7} {'TB/s':>5} {'%ceil':>5}"
          f" {'wg%':>4}  best variant")  # fmt: skip
    for (M, N, K), rs in by.items():
        t = {r["variant"]: r["us"] for r in rs if "us" in r}
        ours = [r for r in rs if r["variant"].startswith("p:") and "us" in r]
        if not ours:
            continue
        b = min(ours, key=lambda r: r["us"])
        nb = N * K // 2 + N * K // 64 + 2 * M * (N + K)
        tb = nb / b["us"] / 1e6
        pc = f"{100 * tb / ceiling:5.0f}" if ceiling else "    -"
        pw = f"{100 * nb / t['wg'] / 1e6 / ceiling:4.0f}" if ceiling and "wg" in t else "   -"
        print(f"{M}x{N}x{K:<8} {t.get('tinygemm', 0):7.1f} {t.get('dense', 0):7.1f} "
              f"{t.get('wg', 0):7.1f} {b['us']:7.1f} {tb:5.2f} {pc} {pw}  {b['variant']}")  # fmt: skip


if __name__ == "__main__":
    main()
