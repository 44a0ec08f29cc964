"""How fast can a Triton kernel read an INT4 weight (N, K/2) bytes with a given access pattern?
No decode: each program sums int32 words of [ROWS, COLS] tiles walking along K, so the time is the
memory system's answer for that pattern (cold L2: copies rotated over > 2.5x L2, graph replay).

    PYTHONPATH=src python3 experiments/int4_read_probe.py --out $OUT
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_timer import bench_graph, l2_bytes  # noqa: E402  (same folder)


@triton.jit
def _read_tiles(w_ptr, out_ptr, N, WORDS_PER_ROW, SPLIT_WORDS,
                ROWS: tl.constexpr, COLS: tl.constexpr):  # fmt: skip
    # ROWS rows x COLS int32 words per step; program (row block, split) walks SPLIT_WORDS words.
    pid = tl.program_id(0)
    pk = tl.program_id(1)
    r = pid * ROWS + tl.arange(0, ROWS)
    c = tl.arange(0, COLS)
    ptrs = w_ptr + (r % N).to(tl.int64)[:, None] * WORDS_PER_ROW + pk * SPLIT_WORDS + c[None, :]
    acc = tl.zeros((ROWS, COLS), dtype=tl.int32)
    for _ in range(0, SPLIT_WORDS, COLS):
        acc ^= tl.load(ptrs)
        ptrs += COLS
    tl.store(out_ptr + pk * N + r, tl.sum(acc, axis=1), mask=r < N)


@triton.jit
def _read_linear(w_ptr, out_ptr, total, CHUNK: tl.constexpr, STEPS: tl.constexpr):
    # each program reads STEPS contiguous CHUNK-word blocks (a pure stream)
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * CHUNK * STEPS
    acc = tl.zeros((CHUNK,), dtype=tl.int32)
    for s in range(STEPS):
        offs = base + s * CHUNK + tl.arange(0, CHUNK)
        acc ^= tl.load(w_ptr + offs, mask=offs < total, other=0)
    tl.store(out_ptr + pid * CHUNK + tl.arange(0, CHUNK), acc)


def make_fn(cfg, ws, N, words):
    """One call of the probe on the next weight copy (rotating)."""
    kind, a, b, warps, split = cfg
    state = {"i": 0}
    if kind == "tiles":
        out = torch.empty(split, N, dtype=torch.int32, device="cuda")
        grid = (triton.cdiv(N, a), split)

        def fn():
            w = ws[state["i"] % len(ws)]
            state["i"] += 1
            _read_tiles[grid](w, out, N, words, words // split, ROWS=a, COLS=b, num_warps=warps)
            return out

        return fn
    total = N * words
    progs = triton.cdiv(total, a * b)
    out = torch.empty(progs * a, dtype=torch.int32, device="cuda")

    def fn():
        w = ws[state["i"] % len(ws)]
        state["i"] += 1
        _read_linear[(progs,)](w, out, total, CHUNK=a, STEPS=b, num_warps=warps)
        return out

    return fn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--budget", type=float, default=20.0)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    l2 = l2_bytes()
    recs = []
    for N, K in ((28672, 8192), (128256, 4096), (8192, 8192)):
        nbytes = N * K // 2
        copies = max(1, math.ceil(2.5 * l2 / nbytes))
        ws = [torch.randint(-(2**31), 2**31 - 1, (N, K // 8), dtype=torch.int32, device="cuda")
              for _ in range(copies)]  # fmt: skip
        words = K // 8
        cfgs = []
        for rows, cols, warps, split in ((64, 16, 2, 2), (64, 16, 4, 2), (128, 16, 4, 1),
                                         (32, 64, 4, 2), (16, 128, 4, 2), (16, 256, 4, 1),
                                         (8, 256, 2, 2), (64, 64, 4, 1), (32, 128, 4, 1),
                                         (16, 128, 2, 4), (4, 512, 4, 1)):  # fmt: skip
            if words % (cols * split) == 0:
                cfgs.append(("tiles", rows, cols, warps, split))
        for chunk, steps, warps in ((1024, 8, 4), (2048, 4, 8), (512, 16, 4)):
            cfgs.append(("linear", chunk, steps, warps, 1))
        for cfg in cfgs:
            if time.time() - t0 > args.budget:
                break
            kind, a, b, warps, split = cfg
            fn = make_fn(cfg, ws, N, words)
            try:
                med, mn, n = bench_graph(fn, max_calls=300)
                rec = dict(N=N, K=K, kind=kind, a=a, b=b, warps=warps, split=split,
                           us=med * 1e6, tbs=nbytes / med / 1e12)  # fmt: skip
            except Exception as exc:
                rec = dict(N=N, K=K, cfg=list(cfg), error=str(exc)[:200])
            recs.append(rec)
            print(rec, flush=True)
            with open(os.path.join(args.out, "read_probe.json"), "w") as f:
                json.dump(recs, f, indent=0)
        del ws
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
