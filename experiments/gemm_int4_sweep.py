"""GPU sweep for issue 11: GEMM variants vs cuBLAS, INT4 plans vs tinygemm / dense BF16.

Usage (on the GPU machine, from the repo root):
    PYTHONPATH=src python3 experiments/gemm_int4_sweep.py --out $OUT [--only gemm|int4]
        [--warm-workers 12] [--budget 100]

Phase 1 compiles every case in parallel worker processes (Triton's disk cache is shared), phase 2
times every case in one process: CUDA-graph replay of back-to-back calls, operands rotated over
copies totalling > 2x L2 where the operand is memory-bound (INT4 weights, skinny GEMM B), so the
numbers are cold-L2 for the stream that matters. Each case is checked against an FP32/FP64
reference first; a wrong result is recorded and not timed. Results: $OUT/<tag>.json, one record
per case, written as they come; a short table last.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_timer import bench_graph, l2_bytes  # noqa: E402  (same folder)
from sweep_cases import all_cases  # noqa: E402  (same folder)


def run_case(case, timing=True):
    rec = {k: v for k, v in case.items() if k not in ("build",)}
    try:
        t = time.time()
        fn, check = case["build"]()
        out = fn()
        torch.cuda.synchronize()
        rec["first_call_s"] = round(time.time() - t, 3)
        rec["err"] = check(out)
        rec["ok"] = bool(rec["err"] < case.get("tol", 2e-2))
        if timing and rec["ok"]:
            med, mn, n = bench_graph(fn)
            rec.update(us=med * 1e6, us_min=mn * 1e6, n_graph=n)
        del fn, check, out
    except Exception as exc:  # a variant that fails to compile or launch is a result, not a crash
        rec["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        rec["tb"] = traceback.format_exc()[-800:]
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--only", default="")
    ap.add_argument("--part", type=int, default=-1)
    ap.add_argument("--nparts", type=int, default=1)
    ap.add_argument("--warm-workers", type=int, default=14)
    ap.add_argument("--warm-timeout", type=int, default=70)
    ap.add_argument("--budget", type=float, default=100.0)
    ap.add_argument("--tag", default="sweep")
    ap.add_argument("--set", default="explore", choices=["explore", "explore2", "final"])
    args = ap.parse_args()
    t_start = time.time()
    cases = all_cases(args.only, l2_bytes(), args.set)
    if args.part >= 0:  # warm-up worker: compile only
        for c in cases:  # one worker per compile class: variant x alignment of the shape
            if zlib.crc32(c["compile_key"].encode()) % args.nparts != args.part:
                continue
            if not c.get("baseline"):
                r = run_case(c, timing=False)
                if "error" in r:
                    print("warm error", r["variant"], r["shape"], r["error"][:200], flush=True)
                torch.cuda.empty_cache()
        return
    os.makedirs(args.out, exist_ok=True)
    print(
        f"{len(cases)} cases; torch {torch.__version__} triton {triton.__version__} "
        f"{torch.cuda.get_device_name(0)} SMs "
        f"{torch.cuda.get_device_properties(0).multi_processor_count}",
        flush=True,
    )
    if args.warm_workers > 0:
        t = time.time()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--only", args.only, "--set", args.set, "--part", str(i),
                 "--nparts", str(args.warm_workers)],
                env=env,
            )
            for i in range(args.warm_workers)
        ]  # fmt: skip
        for p in procs:
            try:
                p.wait(timeout=max(1, args.warm_timeout - (time.time() - t)))
            except subprocess.TimeoutExpired:
                p.kill()
        print(f"warm-up compile: {time.time() - t:.1f} s", flush=True)
    path = os.path.join(args.out, f"{args.tag}.json")
    recs = []
    for i, c in enumerate(cases):
        if time.time() - t_start > args.budget:
            print(f"budget reached after {i} cases", flush=True)
            break
        r = run_case(c)
        recs.append(r)
        if i % 20 == 0 or "error" in r:
            print(
                i,
                r["variant"],
                r["shape"],
                r.get("us"),
                r.get("err"),
                r.get("error", "")[:120],
                flush=True,
            )
        torch.cuda.empty_cache()
        if i % 25 == 0:
            with open(path, "w") as f:
                json.dump(recs, f)
    with open(path, "w") as f:
        json.dump(recs, f, indent=0)
    from warpgauge.kernels import gemm as gm

    with open(os.path.join(args.out, f"{args.tag}_tuning.json"), "w") as f:
        json.dump(gm.tuning_log(), f, indent=0, default=str)
    summarize(recs)


def summarize(recs):
    """Best variant per shape against its baseline (cuBLAS / tinygemm), geomean per group."""
    by_shape = {}
    for r in recs:
        by_shape.setdefault((r["group"], r["shape"]), []).append(r)
    print(f"\n{'group':8} {'shape':28} {'base us':>9} {'best us':>9} {'ratio':>6}  best variant")
    logs = {}
    for (grp, shape), rs in by_shape.items():
        base = [r for r in rs if r.get("baseline") and "us" in r]
        ours = [r for r in rs if not r.get("baseline") and "us" in r and not r.get("peer")]
        if not base or not ours:
            continue
        b = min(r["us"] for r in base)
        best = min(ours, key=lambda r: r["us"])
        ratio = b / best["us"]
        logs.setdefault(grp, []).append(math.log(ratio))
        print(f"{grp:8} {shape:28} {b:9.1f} {best['us']:9.1f} {ratio:6.2f}  {best['variant']}")
    for grp, ls in logs.items():
        print(f"geomean {grp}: {math.exp(sum(ls) / len(ls)):.3f} over {len(ls)} shapes")


if __name__ == "__main__":
    main()
