"""GPU sweep for issue 11, GEMM part: the shapes that lose to cuBLAS, candidate schedules, side by side.

Usage (GPU machine, repo root):  PYTHONPATH=src python3 experiments/gemm_shapes_sweep.py --out $OUT

Phase 1 compiles every case in parallel worker processes (Triton's disk cache is shared); phase 2
times the cases in priority order in one process until the budget is spent:

- cold: an L2 flush (a write of 4x the device's L2) then one CUDA-graph replay of one call,
  timed with events around the replay only (the harness's cold lane); median of the samples;
- warm: one graph of n back-to-back calls (~1 ms), median of 3 replays / n.

Every case is checked against an FP32 reference (TF32 off) on NaN-poisoned outputs before it is
timed, and again after the timed replays. SM count and L2 size come from the device. Results:
$OUT/<tag>.json (rewritten after every case), a summary table last.

Variants: ``cublas`` (torch.mm), ``auto`` (the current dispatch, ``gemm._launch``),
``tma:BM,BN,BK,stages,warps,persistent,ws`` (gemm_tma.tma_kernel),
``p2:BM,BN,BK,stages,warps,FLAGS`` (gemm_persistent.persistent_kernel; FLAGS letters f = flatten,
w = warp-specialize, s = epilogue in two halves, c = pointer-store epilogue), ``p2t:...`` (the
same over the swapped product c^T = b^T a^T, tiles stored transposed: run_transposed),
``sk:BM,BN,BK,stages,warps,SPLIT`` (split-K over every tile + fixed-order reduction; ``skf:``
the same reduced inside the split kernel by the last split of each tile),
``hy:BM,BN,BK,stages,warps,SPLIT,FLAGS`` (whole waves persistent, the last partial wave split-K),
``ptr:BM,BN,BK,stages,warps`` (gemm_tile pointer kernel with hints),
``pad:<variant>`` (row-major operands copied into 16-byte rows by gemm_persistent.pad_rows first; C is
written in place by a ``c`` variant), ``padt:<variant>`` (the same with torch's copy_),
``skp:BM,BN,BK,stages,warps,SPLIT`` (gemm_skinny with that SkinnyPlan), ``pad128:a|b|ab:<variant>``
(those operands' storage copied into rows padded to 128 bytes first, each call), ``padv`` (``auto`` into
an output whose rows are padded to 16 bytes: the pad path without copying C back).
``--set g95`` / ``g95b`` run the cases of ``gemm_95_cases.py`` (rounds 1 and 2).
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

import torch
import triton

from warpgauge.kernels import gemm as gm
from warpgauge.kernels import gemm_persistent as gp
from warpgauge.kernels import gemm_skinny as skinny
from warpgauge.kernels import gemm_tma as tm

torch.backends.cuda.matmul.allow_tf32 = False
DT = torch.bfloat16
_OPS: dict = {}


def dev_props():
    p = torch.cuda.get_device_properties(0)
    return p.multi_processor_count, int(getattr(p, "L2_cache_size", 0) or (50 << 20))


def operands(M, N, K, layout, with_ref=True):
    key = (M, N, K, layout)
    if key not in _OPS:
        _OPS.clear()
        torch.cuda.empty_cache()
        g = torch.Generator(device="cuda").manual_seed(M * 7 + N * 3 + K)

        def r(*s, scale=1.0):
            return (torch.randn(*s, generator=g, device="cuda") * scale).to(DT)

        sb = 1.0 / math.sqrt(K)
        if layout == "SS":  # the harness's ",sliced": column slices of tensors 64 columns wider
            a, b = r(M, K + 64)[:, :K], r(K, N + 64, scale=sb)[:, :N]
        else:
            a = r(K, M).t() if layout[0] == "T" else r(M, K)
            b = r(N, K, scale=sb).t() if layout[1] == "T" else r(K, N, scale=sb)
        _OPS[key] = [a, b, None]
    ops = _OPS[key]
    if with_ref and ops[2] is None:  # FP64 math, one cast (the project's reference contract)
        ops[2] = (ops[0].double() @ ops[1].double()).to(DT)
    return ops


def _flags(s):
    return dict(FLATTEN="f" in s, WS="w" in s, SUBTILE="s" in s, C_PTR="c" in s)


def make_call(variant, a, b, c, token_dim, sms):
    """A closure computing c = a @ b by ``variant`` (see the module docstring)."""
    kind, _, opt = variant.partition(":")
    if kind == "cublas":
        return lambda: torch.mm(a, b, out=c)
    if kind in ("auto", "padv"):  # padv: run_case hands it an output with padded rows
        return lambda: gm._launch(a, b, c, token_dim)
    if kind in ("pad", "padt"):
        inner_a = {}

        def padded(t):
            if tm.aligned(t):
                return t
            if kind == "pad":
                return gp.pad_rows(t)
            return gm._padded(t)

        def call():
            inner_a["fn"] = make_call(opt, padded(a), padded(b), c, token_dim, sms)
            inner_a["fn"]()

        return call
    if kind == "pad128":  # pad128:a|b|ab:<variant>: those operands copied into 128-byte rows

        def rows128(t):
            st = t if t.stride(1) == 1 else t.t()  # the row-major storage
            R, C = st.shape
            buf = torch.empty(R, triton.cdiv(C, 64) * 64, dtype=t.dtype, device=t.device)[:, :C]
            gp.copy_rows(st, buf)
            return buf if t.stride(1) == 1 else buf.t()

        which, _, inner = opt.partition(":")

        def call():
            pa = rows128(a) if "a" in which else a
            pb = rows128(b) if "b" in which else b
            make_call(inner, pa, pb, c, token_dim, sms)()

        return call
    if kind == "pad3":  # A, B and C padded (Triton copies), C copied back by the same kernel

        def call():
            pa = a if tm.aligned(a) else gp.pad_rows(a)
            pb = b if tm.aligned(b) else gp.pad_rows(b)
            pc = c if tm.aligned(c) else gp.pad_rows(c)  # its contents are overwritten
            make_call(opt, pa, pb, pc, token_dim, sms)()
            if pc is not c:
                R, C = c.shape
                gp.pad_copy_kernel[(triton.cdiv(R, 16), triton.cdiv(C, 256))](
                    pc, c, R, C, pc.stride(0), c.stride(0), BR=16, BC=256, num_warps=4
                )

        return call
    v = [int(x) if x.isdigit() else x for x in opt.split(",")]
    bm, bn, bk, st, w = v[:5]
    meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_stages=st, num_warps=w)
    if kind == "tma":
        pers, ws = v[5], v[6]

        def call():
            descs = tm.descriptors(a, b, c)
            m = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, PERSISTENT=bool(pers),
                     WS=bool(ws), A_T=descs[3], B_T=descs[4], UPCAST=False)  # fmt: skip
            tm.with_blocks(descs, m)
            grid = tm.grid(a.shape[0], b.shape[1], m, sms)
            tm.tma_kernel[grid](descs[0], descs[1], descs[2], a.shape[0], b.shape[1], a.shape[1],
                                1, 1, 0, num_warps=w, num_stages=st, **m)  # fmt: skip

        return call
    if kind == "p2":
        meta.update(_flags(v[5] if len(v) > 5 else ""))
        return lambda: gp.run_persistent(a, b, c, meta, sms)
    if kind == "p2t":  # the swapped product c^T = b^T a^T, tiles stored transposed
        meta.update(_flags(v[5] if len(v) > 5 else ""))
        return lambda: gp.run_transposed(a, b, c, meta, sms)
    if kind in ("sk", "skf"):  # 7th field "w": WS split K loop; skf: the in-kernel reduction
        meta["WS"] = len(v) > 6 and "w" in str(v[6])
        return lambda: gp.run_split(a, b, c, meta, v[5], fused=kind == "skf")
    if kind == "hy":
        meta.update(_flags(v[6] if len(v) > 6 else ""))
        return lambda: gp.run_hybrid(a, b, c, meta, v[5], sms)
    if kind == "skp":
        plan = skinny.SkinnyPlan(bm, bn, bk, v[5], num_warps=w, num_stages=st)
        return lambda: gm._launch_skinny(a, b, c, False, plan)
    if kind == "ptr":
        M, K = a.shape
        N = b.shape[1]

        def call():
            h = gm.hints(a, b, c)
            grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
            gm._KERNELS["m"].fn[grid](
                a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                c.stride(0), c.stride(1), 1, 1, 0,
                BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, UPCAST=False, HINTS=h,
                num_warps=w, num_stages=st,
            )  # fmt: skip

        return call
    raise ValueError(f"unknown variant {variant!r}")


# ------------------------------------------------------------------------------------------ cases

WIDE = "128,256,64,3,8"
TALL = "256,128,64,3,8"
BIG = ["cublas", "auto", "tma:128,256,64,3,8,1,0", f"p2:{WIDE},f", f"p2:{WIDE},fs",
       "p2:128,256,64,4,8,fs", f"p2:{WIDE},fw", f"p2:{WIDE},w", f"p2:{TALL},f",
       "tma:128,256,64,3,8,0,1"]  # fmt: skip
SMALL_1K = [
    "cublas", "auto", "tma:128,128,64,4,8,0,0", "tma:64,128,64,4,4,0,0", "tma:128,64,64,4,4,0,0",
    "tma:64,256,64,4,4,0,0", "tma:128,128,128,3,8,0,0", "tma:64,64,64,4,4,0,0",
    "tma:128,128,64,4,8,0,1", "sk:128,128,64,4,8,2", "sk:128,256,64,3,8,4", "sk:64,128,64,4,4,2",
    "sk:128,128,64,4,8,4", "ptr:64,128,64,4,4", "p2:64,128,64,4,4,f",
]  # fmt: skip
TINY = [
    "cublas", "auto", "tma:128,64,64,4,4,0,0", "tma:64,64,64,4,4,0,0", "tma:64,64,128,2,4,0,0",
    "tma:64,128,64,4,4,0,0", "tma:64,64,32,4,4,0,0", "ptr:64,64,64,4,4", "ptr:128,64,64,4,4",
    "sk:64,64,64,4,4,2",
]  # fmt: skip
N4104 = [
    "cublas", "auto", "tma:128,256,64,3,8,1,0", f"p2:{TALL},f", f"p2:{TALL},fc", f"p2:{WIDE},f",
    f"p2:{WIDE},fs", f"p2:{WIDE},fc", f"hy:{WIDE},8,f", f"hy:{WIDE},8,fs", f"p2:{WIDE},fw",
    f"hy:{TALL},8,f",
]  # fmt: skip
ODD = ["cublas", "auto", f"pad:p2:{WIDE},c", f"pad:p2:{WIDE},fc", f"pad:p2:{TALL},fc",
       f"padt:p2:{WIDE},fc"]  # fmt: skip
MID = "128,128,64,4,8"
PTR_SMALL = ["cublas", "auto", "ptr:64,64,64,4,4", "ptr:64,128,32,4,4", "ptr:128,64,32,4,4",
             "ptr:32,64,64,4,4"]  # fmt: skip
CTRL = ["cublas", "auto", f"p2:{WIDE},f", f"p2:{WIDE},fs", f"p2:{WIDE},fw"]


def case_list():
    """(group, M, N, K, layout, token_dim, variants) in priority order (the budget cuts the end)."""
    return [
        ("fwd", 1024, 1024, 1024, "NN", "m", SMALL_1K),
        ("fwd", 4096, 4104, 4096, "NN", "m", N4104),
        ("fwd", 16384, 1024, 1024, "NN", "m", BIG + ["p2:128,128,64,4,8,f"]),
        ("fwd", 256, 256, 256, "NN", "m", TINY),
        ("fwd", 4096, 4096, 4096, "NN", "m", BIG),
        ("grad_a", 4096, 4096, 4096, "NT", "m", CTRL + [f"p2:{TALL},f"]),  # also the ,bt case
        ("grad_b", 4096, 4096, 4096, "TN", "k", CTRL + [f"p2:{TALL},f"]),  # also the ,at case
        ("grad_a", 4096, 4096, 14336, "NT", "m", CTRL),  # dC[4096,14336] @ W: 4096x14336x4096
        ("grad_b", 4096, 14336, 4096, "TN", "k", CTRL),  # A^T @ dC of the same layer
        ("fwd", 4096, 14336, 4096, "NN", "m", CTRL),
        ("fwd", 4095, 4095, 4095, "NN", "m", ODD),
        ("fwd", 16384, 4096, 4096, "NN", "m", CTRL),
        ("fwd", 8192, 8192, 8192, "NN", "m", ["cublas", "auto", f"p2:{WIDE},f", f"p2:{WIDE},fs"]),
        ("fwd", 2048, 2048, 2048, "NN", "m", ["cublas", "auto", f"p2:{WIDE},f", f"p2:{MID},f"]),
        ("fwd", 127, 255, 65, "NN", "m", PTR_SMALL),
    ]


def confirm_list():
    """Round 2 (<= 40 s): the new defaults (``auto``) against cuBLAS where the rules changed, the
    K > 4096 decision at 8192^3, and the few candidates round 1 left open, misses first."""
    ab = ["cublas", "auto"]
    return [
        (
            "fwd",
            1024,
            1024,
            1024,
            "NN",
            "m",
            ab + ["tma:64,128,64,6,4,0,0", "tma:64,128,128,3,4,0,0", "tma:64,128,64,8,4,0,0"],
        ),
        ("fwd", 4096, 4104, 4096, "NN", "m", ab + ["p2:256,128,64,4,8,fs"]),
        ("fwd", 16384, 1024, 1024, "NN", "m", ab),
        ("fwd", 4095, 4095, 4095, "NN", "m", ab + [f"pad3:p2:{WIDE},fw"]),
        ("fwd", 256, 256, 256, "NN", "m", ab),
        ("fwd", 8192, 8192, 8192, "NN", "m", ab + [f"p2:{WIDE},fw"]),
        ("grad_b", 4096, 4096, 4096, "TN", "k", ab),
        ("fwd", 127, 255, 65, "NN", "m", ab),
        ("fwd", 4096, 4096, 4096, "SS", "m", ab),
    ]


def cases(which="round1"):
    if which in ("g95", "g95b", "g11", "g11b"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from gemm11_cases import g11_list, g11b_list
        from gemm_95_cases import g95_list, g95b_list

        sets = {"g95": g95_list, "g95b": g95b_list, "g11": g11_list, "g11b": g11b_list}
        todo = sets[which]()
    else:
        todo = confirm_list() if which == "confirm" else case_list()
    out = []
    for grp, M, N, K, lay, td, vs in todo:
        for v in vs:
            out.append(dict(group=grp, M=M, N=N, K=K, layout=lay, token_dim=td, variant=v,
                            shape=f"{M}x{N}x{K} {lay}",
                            ckey=f"{v}|{lay}|{N % 16}|{K % 16}|{M % 16}|{min(M, 2048)}"))  # fmt: skip
    return out


# ----------------------------------------------------------------------------------------- timing


def _graph(fn, n):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            for _ in range(n):
                fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    return g


def time_cold(fn, flush, samples):
    g = _graph(fn, 1)
    ev = [(torch.cuda.Event(True), torch.cuda.Event(True)) for _ in range(samples)]
    g.replay()
    for e0, e1 in ev:
        flush.zero_()
        e0.record()
        g.replay()
        e1.record()
    torch.cuda.synchronize()
    ts = sorted(e0.elapsed_time(e1) * 1e3 for e0, e1 in ev)
    return ts[len(ts) // 2], ts[0], g


def time_warm(fn, est_us):
    n = int(min(max(1000.0 / max(est_us, 1.0), 4), 200))
    g = _graph(fn, n)
    g.replay()
    e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
    ts = []
    for _ in range(3):
        e0.record()
        g.replay()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e3 / n)
    return sorted(ts)[1]


def _err(c, ref):
    """max |c - ref| / max |ref| (NaN if c holds a NaN) and the project check (reference.compare:
    the dtype's tolerance table against the FP64 reference cast once; NaN never passes)."""
    from warpgauge.reference import compare

    chk = compare(c, ref)
    rel = float((c.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-30))
    return rel, chk


def run_case(cs, sms, flush, timing=True):
    rec = {k: v for k, v in cs.items() if k != "ckey"}
    try:
        t = time.time()
        a, b, ref = operands(cs["M"], cs["N"], cs["K"], cs["layout"], with_ref=timing)
        width = -(-cs["N"] // 8) * 8 if cs["variant"] == "padv" else cs["N"]
        c = torch.full((cs["M"], width), float("nan"), dtype=DT, device="cuda")[:, : cs["N"]]
        fn = make_call(cs["variant"], a, b, c, cs["token_dim"], sms)
        seen = len(gm.tuning_log())
        fn()
        torch.cuda.synchronize()
        rec["first_call_s"] = round(time.time() - t, 3)
        rec["tuning"] = gm.tuning_log()[seen:]  # configs this call chose (autotuned or by rule)
        fn()  # a second eager call before any capture (the first may have autotuned)
        torch.cuda.synchronize()
        if not timing:
            return rec
        rec["err"], chk = _err(c, ref)
        rec["worst"] = chk.worst_ratio  # error / allowed, <= 1 passes
        rec["ok"] = bool(chk.ok)  # NaN fails
        if not rec["ok"]:
            return rec
        samples = 41 if cs["M"] * cs["N"] * cs["K"] < (1 << 34) else 9
        rec["cold_us"], rec["cold_min_us"], g = time_cold(fn, flush, samples)
        c.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        rec["err_after"], chk = _err(c, ref)
        rec["ok"] = bool(chk.ok)
        del g
        rec["warm_us"] = time_warm(fn, rec["cold_us"])
    except Exception as exc:  # a variant that fails to compile or launch is a result
        rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        rec["tb"] = traceback.format_exc()[-600:]
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--part", type=int, default=-1)
    ap.add_argument("--nparts", type=int, default=14)
    ap.add_argument("--warm-timeout", type=float, default=50.0)
    ap.add_argument("--budget", type=float, default=100.0)
    ap.add_argument("--tag", default="shapes")
    ap.add_argument(
        "--set", default="round1", choices=["round1", "confirm", "g95", "g95b", "g11", "g11b"]
    )
    args = ap.parse_args()
    t0 = time.time()
    sms, l2 = dev_props()
    cs = cases(args.set)
    done_dir = os.path.join(args.out, "compiled")
    if args.part >= 0:  # compile worker: one call of each of its cases, a line per success
        keys = list(dict.fromkeys(c["ckey"] for c in cs if c["variant"] != "cublas"))
        mine = {k for i, k in enumerate(keys) if i % args.nparts == args.part}
        part = os.path.join(done_dir, f"part-{args.part}")
        with open(part + ".txt", "a") as log, open(part + ".jsonl", "a") as jl:  # compile records
            for c in cs:
                if c["variant"] == "cublas" or c["ckey"] not in mine:
                    continue
                seen = len(gm.tuning_log())
                r = run_case(c, sms, None, timing=False)
                if "error" in r:
                    print("compile error", r["variant"], r["shape"], r["error"][:160], flush=True)
                else:
                    log.write(f"{c['variant']}|{c['shape']}\n")
                    log.flush()
                    rec = dict(
                        variant=c["variant"],
                        shape=c["shape"],
                        group=c["group"],
                        first_call_s=r["first_call_s"],
                        tuning=gm.tuning_log()[seen:],
                    )
                    jl.write(json.dumps(rec) + "\n")
                    jl.flush()
        return
    os.makedirs(done_dir, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    info = dict(torch=torch.__version__, triton=triton.__version__,
                gpu=torch.cuda.get_device_name(0), sms=sms, l2_bytes=l2)  # fmt: skip
    print(len(cs), "cases", info, flush=True)
    procs = [
        subprocess.Popen([sys.executable, __file__, "--part", str(i), "--nparts", str(args.nparts),
                          "--out", args.out, "--set", args.set],
                         env=dict(os.environ, PYTHONUNBUFFERED="1"))
        for i in range(args.nparts)
    ]  # fmt: skip
    for p in procs:
        try:
            p.wait(timeout=max(1.0, args.warm_timeout - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
    info["compile_phase_s"] = round(time.time() - t0, 1)
    print("compile phase", info["compile_phase_s"], "s", flush=True)
    compiled = set()
    info["compile"] = []  # per case: first call in a fresh worker (compile + tuning), tuning log
    for name in os.listdir(done_dir):
        with open(os.path.join(done_dir, name)) as f:
            if name.endswith(".jsonl"):
                info["compile"] += [json.loads(line) for line in f if line.strip()]
            else:
                compiled.update(line.strip() for line in f)
    flush = torch.empty(4 * l2 // 4, dtype=torch.int32, device="cuda")
    path = os.path.join(args.out, f"{args.tag}.json")
    recs = []
    for i, c in enumerate(cs):
        if time.time() - t0 > args.budget:
            print(f"budget reached after {i} of {len(cs)} cases", flush=True)
            break
        if c["variant"] != "cublas" and f"{c['variant']}|{c['shape']}" not in compiled:
            r = {k: v for k, v in c.items() if k != "ckey"}
            r["error"] = "skipped: failed, hung or did not finish in the compile phase"
        else:
            r = run_case(c, sms, flush)
        recs.append(r)
        print(i, r["shape"], r["variant"], r.get("cold_us"), r.get("warm_us"), r.get("err"),
              r.get("error", "")[:100], flush=True)  # fmt: skip
        with open(path + ".tmp", "w") as f:
            json.dump(dict(info=info, records=recs), f)
        os.replace(path + ".tmp", path)
    summarize(recs)


def summarize(recs):
    by = {}
    for r in recs:
        by.setdefault((r["group"], r["shape"]), []).append(r)
    print(f"\n{'group':7} {'shape':22} {'cuBLAS':>7} {'auto':>7} {'r_auto':>6} {'best':>7} "
          f"{'r_best':>6} {'warm r':>6}  best variant (cold us; ratio = cuBLAS / ours)")  # fmt: skip
    for (grp, shape), rs in by.items():
        ok = [r for r in rs if r.get("ok") and "cold_us" in r]
        base = [r for r in ok if r["variant"] == "cublas"]
        auto = [r for r in ok if r["variant"] == "auto"]
        ours = [r for r in ok if r["variant"] != "cublas"]
        if not base or not ours:
            continue
        b = base[0]
        best = min(ours, key=lambda r: r["cold_us"])
        ra = f"{b['cold_us'] / auto[0]['cold_us']:6.2f}" if auto else "     -"
        au = f"{auto[0]['cold_us']:7.1f}" if auto else "      -"
        print(f"{grp:7} {shape:22} {b['cold_us']:7.1f} {au} {ra} {best['cold_us']:7.1f} "
              f"{b['cold_us'] / best['cold_us']:6.2f} {b['warm_us'] / best['warm_us']:6.2f}  "
              f"{best['variant']}")  # fmt: skip
    geo = {}
    for (grp, _), rs in by.items():
        t = {r["variant"]: r["cold_us"] for r in rs if r.get("ok") and "cold_us" in r}
        if "cublas" in t and "auto" in t:
            geo.setdefault(grp, []).append(t["cublas"] / t["auto"])
    for grp, rs in geo.items():
        g = math.exp(sum(math.log(x) for x in rs) / len(rs))
        print(f"auto vs cuBLAS, {grp}: geomean {g:.3f}, min {min(rs):.3f}, n {len(rs)}")
    bad = [r for r in recs if not r.get("ok")]
    print(
        f"{len(bad)} cases failed or errored:",
        ", ".join(f"{r['variant']}@{r['shape']}" for r in bad[:30]),
    )


if __name__ == "__main__":
    main()
