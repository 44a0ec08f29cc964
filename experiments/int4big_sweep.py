"""GPU sweep of the INT4 linear at batch 2-256 (int4big round; issue 11, INT4 batch >= 2).

Reuses ``int4s_sweep.py`` (weights, FP64 reference, cold / rotating timers, compile workers) and
adds the tile kernel of ``kernels/int4_tile.py`` as forced plans named
``t:block_m,block_n,split_k,warps,stages,mode,fused[,flags]`` (mode 0 exact q, 1 exact hi + lo,
2 the weight rounded to BF16, checked against the rounded weight's reference like ``dense``;
fused 1: the split-K reduction inside the kernel; flags: ``m`` x and the packed weight through TMA
descriptors, ``n`` the Triton-op decode instead of the PTX one). ``wg`` is the rule of the commit that runs. Baselines: ``tinygemm``
(``torch.ops.aten._weight_int4pack_mm``) for batch <= 16, ``dense`` (BF16 ``F.linear`` on the
dequantized weight) everywhere. Splits are sized from the device's SM count, never per shape.

    PYTHONPATH=src python3 experiments/int4big_sweep.py --out $OUT --budget 100 --workers 15
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import int4s_sweep as s  # noqa: E402  (same folder)
from graph_timer import l2_bytes  # noqa: E402

from warpgauge.kernels import int4 as i4  # noqa: E402
from warpgauge.reference import compare  # noqa: E402

DEV = s.DEV
GS = s.GS
# (N, K) = (out features, in features) of real models, batches in priority order
PLAN = [
    ((4096, 4096), (2, 4, 8, 16, 32, 64, 128, 256)),  # Llama-3-8B q/o
    ((14336, 4096), (2, 4, 8, 16, 32, 64, 128, 256)),  # Llama-3-8B up/gate
    ((8192, 8192), (2, 4, 8, 16, 32, 64, 128, 256)),  # Llama-3-70B q/o
    ((28672, 8192), (4, 16, 128, 256)),  # Llama-3-70B up/gate
    ((4096, 14336), (4, 16, 64, 256)),  # Llama-3-8B down
    ((128256, 4096), (16, 256)),  # Llama-3 vocabulary head
]
FULL = [(4096, 4096), (14336, 4096), (8192, 8192)]  # every candidate; the others fewer
TINY = [((40, 512), (2, 3, 33)), ((48, 1024), (16, 64))]


def _t(bm, bn, sp, w, st, mode, fused, fl=""):
    return f"t:{bm},{bn},{sp},{w},{st},{mode},{fused}" + (f",{fl}" if fl else "")


def candidates(M, N, K, sm, lite=False):
    """Forced tile-kernel plans for one shape; splits from the SM count (``lite``: fewer)."""
    ng = K // GS
    rule = i4.Int4Plan.for_shape(M, N, K, sm, GS)
    out = []
    if M <= 16:
        out.append(_t(16, rule.block_n, rule.split_k, 4, 3, 0, 1))
        if M in (4, 16) and not lite:
            out.append(_t(16, rule.block_n, rule.split_k, 4, 3, 0, 0))
        sp = s._split_for(triton.cdiv(N, 128), sm, 3, 16, ng, 2)
        out.append(_t(16, 128, sp, 4, 4, 0, 1))
        if not lite:  # more, shorter programs: 64 rows, 2 warps
            sp = s._split_for(triton.cdiv(N, 64), sm, 4, 16, ng, 2)
            out.append(_t(16, 64, sp, 2, 3, 0, 1))
        return out
    bm = min(128, triton.next_power_of_2(M))
    # (block_m, block_n, warps, stages, mode, programs per SM the split aims at, flags)
    # 64 x 64 x 4 warps with TMA: 127 registers, 57 KB of shared memory: 3 programs per SM
    grid = [(bm, 128, 8, 3, 0, 1.0, "m"), (bm, 64, 4, 3, 0, 2.0, "m"),
            (min(bm, 64), 256, 8, 3, 0, 1.0, "m"), (min(bm, 64), 64, 4, 3, 0, 3.0, "m")]  # fmt: skip
    if not lite:
        grid[1:1] = [(bm, 128, 8, 3, 0, 1.0, ""), (bm, 128, 8, 3, 2, 1.0, "m"),
                     (bm, 128, 8, 3, 1, 1.0, "m")]  # fmt: skip
        grid.append((bm, 128, 8, 3, 0, 0.5, "m"))  # the split that stays within one wave
        if M >= 128:
            grid.append((128, 128, 8, 4, 0, 1.0, "m"))
    for bm_, bn, w, st, mode, per_sm, fl in grid:
        tiles = triton.cdiv(M, bm_) * triton.cdiv(N, bn)
        sp = s._split_for(tiles, sm, per_sm, 16, ng, 4)
        v = _t(bm_, bn, sp, w, st, mode, 1, fl)
        if v not in out:
            out.append(v)
    return out


def cases(which, sm):
    """Pass 1: every shape with the baselines, the rule and the core candidates (breadth first);
    pass 2: the ``FULL`` shapes again with the other candidates (their baselines are in pass 1)."""
    plan = TINY if which == "tiny" else PLAN
    out = []
    for (N, K), ms in plan:
        items = []
        for M in ms:
            base = ["tinygemm", "wg"] if M <= 8 else ["tinygemm", "dense", "wg"]
            base = base if M <= 16 else ["dense", "wg"]
            items += [(M, v) for v in base + candidates(M, N, K, sm, lite=True)]
        out.append((N, K, items))
    for (N, K), ms in plan:
        if which != "tiny" and (N, K) not in FULL:
            continue
        items = []
        for M in ms:
            core = set(candidates(M, N, K, sm, lite=True))
            items += [(M, v) for v in candidates(M, N, K, sm) if v not in core]
        out.append((N, K, items))
    return out


def parse_t(variant):
    parts = variant[2:].split(",")
    bm, bn, sp, w, st, mode, fused = (int(v) for v in parts[:7])
    fl = parts[7] if len(parts) > 7 else ""
    plan = i4.Int4Plan(block_m=bm, block_n=bn, split_k=sp, num_warps=w, num_stages=st,
                       kernel="tile", mode=mode, fused=bool(fused), tma="m" in fl)  # fmt: skip
    return plan, fl


class NoAsm:
    def __init__(self, on):
        self.on = on

    def __enter__(self):
        self.saved = i4.USE_ASM_DECODE
        if self.on:
            i4.USE_ASM_DECODE = False

    def __exit__(self, *exc):
        i4.USE_ASM_DECODE = self.saved


def compile_key_t(variant):
    """What decides the tile kernel's binary: everything but the split's value (runtime)."""
    plan, fl = parse_t(variant)
    return (plan.block_m, plan.block_n, plan.split_k > 1, plan.num_warps, plan.num_stages,
            plan.mode, plan.fused, plan.tma, fl)  # fmt: skip


def make_call(variant, x, N, K, packs, extra, sm):
    if not variant.startswith("t:"):
        return s.make_call(variant, x, N, K, packs, extra, sm)
    plan, fl = parse_t(variant)
    ctx = NoAsm("n" in fl)

    def call(p):
        with ctx:
            return i4.int4_linear_packed(x, p[0], p[1], GS, plan)

    return packs, call


def is_rounded(variant):
    return variant == "dense" or (variant.startswith("t:") and variant.split(",")[5] == "2")


def run_shape(N, K, items, sm, l2, flush, timing, recs, t_end, save):
    wbytes = N * K // 2 + N * K // GS * 2
    copies = min(16, max(1, -(-int(2.2 * l2) // wbytes))) if DEV == "cuda" else 1
    qw, packs = s.weights(N, K, copies)
    m_max = max(M for M, _ in items)
    g = torch.Generator(device=DEV).manual_seed(K)
    x_all = torch.randn(m_max, K, generator=g, device=DEV).to(s.DT)
    ref_all = s.reference(x_all, qw)
    ref_r = s.reference(x_all, qw, rounded=True)
    extra = {}
    for M, variant in items:
        if time.time() > t_end:
            return False
        rec = dict(M=M, N=N, K=K, variant=variant)
        if variant == "wg":
            rec["plan"] = repr(i4.Int4Plan.for_shape(M, N, K, sm, GS))
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
            out = s.poisoned_call(one)
            if timing:
                torch.cuda.synchronize()
            rec["first_call_s"] = round(time.time() - t_first, 3)
            ref = (ref_r if is_rounded(variant) else ref_all)[:M]
            chk = compare(out, ref)
            rec.update(ok=bool(chk.ok), worst=round(chk.worst_ratio, 4))
            if not chk.ok:
                print("FAIL", rec, str(chk), flush=True)
            if timing and (chk.ok or variant in ("tinygemm", "dense")):
                rec["us_cold"], rec["us_cold_min"] = s.time_cold(one, flush)
                rec["us_rot"], rec["us_rot_min"], rec["n_graph"] = s.time_rot(fn, rec["us_cold"])
                rec["ok_after"] = bool(compare(one(), ref).ok)
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
            key = compile_key_t(v) if v.startswith("t:") else s.compile_key(v, M, N, K, sm)
            keys.setdefault(key, (M, v, N, K))
    todo = sorted(keys.values(), key=lambda c: (-c[0], c[1]))
    for i, (M, v, _n, K) in enumerate(todo):
        if i % nparts != part:
            continue
        qw, packs = s.weights(256, K, 1)
        x = torch.randn(M, K, device=DEV).to(s.DT)
        try:
            items_, call = make_call(v, x, 256, K, packs, {}, sm)
            call(items_[0])
        except Exception as exc:
            print("compile error", v, M, K, f"{type(exc).__name__}: {str(exc)[:200]}", flush=True)
    if DEV == "cuda":
        torch.cuda.synchronize()


def summarize(recs):
    by = {}
    for r in recs:
        by.setdefault((r["M"], r["N"], r["K"]), {})[r["variant"]] = r
    print(f"\n{'shape':17} {'tiny':>6} {'dense':>6} {'wg':>6} {'best':>6} {'wg/ref':>6} "
          f"{'bst/ref':>7}  best cold variant (exact modes only)")  # fmt: skip
    for (M, N, K), d in by.items():
        u = {v: r["us_cold"] for v, r in d.items() if "us_cold" in r and r.get("ok")}
        ours = {v: t for v, t in u.items() if v == "wg" or (v[:2] in ("p:", "t:")
                                                           and not is_rounded(v))}  # fmt: skip
        if not ours or "wg" not in u:
            continue
        b = min(ours, key=ours.get)
        ref = d.get("tinygemm" if M <= 16 else "dense", {}).get("us_cold", 0)
        tg = d.get("tinygemm", {}).get("us_cold", 0)
        de = d.get("dense", {}).get("us_cold", 0)
        print(f"{M}x{N}x{K:<7} {tg:6.1f} {de:6.1f} {u['wg']:6.1f} {u[b]:6.1f} "
              f"{ref / u['wg']:6.2f} {ref / u[b]:7.2f}  {b}")  # fmt: skip


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--part", type=int, default=-1)
    ap.add_argument("--nparts", type=int, default=1)
    ap.add_argument("--workers", type=int, default=15)
    ap.add_argument("--warm-timeout", type=float, default=30)
    ap.add_argument("--budget", type=float, default=100.0)
    ap.add_argument("--tag", default="int4big")
    ap.add_argument("--set", default="main")
    args = ap.parse_args()
    t0 = time.time()
    cuda = DEV == "cuda"
    sm = torch.cuda.get_device_properties(0).multi_processor_count if cuda else 132
    if args.part >= 0:
        compile_worker(args.part, args.nparts, args.set, sm)
        return
    allc = cases(args.set, sm)
    n_cases = sum(len(it) for _, _, it in allc)
    print(f"{n_cases} cases; torch {torch.__version__} triton {triton.__version__} SMs {sm}",
          flush=True)  # fmt: skip
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
    l2 = l2_bytes() if cuda else 60 << 20
    flush = torch.empty(4 * l2, dtype=torch.uint8, device=DEV) if cuda else None
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{args.tag}.json")
    recs = []
    t_end = t0 + args.budget

    def save():
        with open(path + ".tmp", "w") as f:
            json.dump(dict(sm_count=sm, torch=torch.__version__, triton=triton.__version__,
                           records=recs), f, indent=0)  # fmt: skip
        os.replace(path + ".tmp", path)

    for N, K, items in allc:
        if t_end - time.time() < 6 + N * K / 2.0e8:  # the FP64 reference alone takes seconds
            print(f"budget: {N}x{K} and later shapes skipped", flush=True)
            break
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
