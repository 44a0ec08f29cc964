"""Tile-order (grouping) sweep for the GEMM: ``GROUP_M`` row-tiles walk the column tiles together
so the B panels a wave shares stay in L2. The same tile (the autotuner's choice when it has one,
else 128x256x64, 3 stages, 8 warps) is launched with ``GROUP_M`` in 1 (plain row-major order),
2, 4, 8, 16, 32, beside the autotuned kernel and cuBLAS; outputs are checked against cuBLAS first.

A 60 MB L2 holds all of B up to about 4096^2 BF16 (32 MB), so grouping has little to recover
there; the sweep includes 8192^3 and a tall-skinny shape where it could.
"""

from __future__ import annotations

from ..kernels._launch import cdiv
from .common import compiled_meta, interleaved

SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 4096))
TINY_SHAPES = ((512, 512, 512),)
GROUPS = (1, 2, 4, 8, 16, 32)
TINY_GROUPS = (1, 8)
DEFAULT_TILE = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "num_stages": 3, "num_warps": 8}


def _tuned_tile(kernel) -> dict | None:
    best = getattr(kernel, "best_config", None)
    if best is None:
        return None
    kw = dict(best.kwargs)
    return {"BLOCK_M": kw["BLOCK_M"], "BLOCK_N": kw["BLOCK_N"], "BLOCK_K": kw["BLOCK_K"],
            "num_stages": best.num_stages, "num_warps": best.num_warps, "GROUP_M": kw["GROUP_M"]}  # fmt: skip


def _cell(M: int, N: int, K: int, tiny: bool) -> dict:
    import torch

    from warpgauge.kernels import gemm as G
    from warpgauge.kernels import gemm_tile as T

    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    ref = torch.mm(a, b)
    tuned = None
    if not tiny:  # autotuning compiles every config: too slow for a smoke run
        G.gemm(a, b)  # autotune once, outside timing
        tuned = _tuned_tile(T._gemm_kernel)
    tile = {k: v for k, v in (tuned or DEFAULT_TILE).items() if k != "GROUP_M"}
    grid = (cdiv(M, tile["BLOCK_M"]) * cdiv(N, tile["BLOCK_N"]),)

    def launch(g, c):
        return T._gemm_kernel.fn[grid](
            a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            c.stride(0), c.stride(1), T._bucket(M), T._bucket(K), T._layout(a, b),
            GROUP_M=g, UPCAST=False, HINTS=T.hints(a, b, c), **tile,
        )  # fmt: skip

    variants, meta, errs = {}, {}, {}
    for g in TINY_GROUPS if tiny else GROUPS:
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        meta[f"GROUP_M={g}"] = compiled_meta(launch(g, c))
        torch.cuda.synchronize()
        errs[f"GROUP_M={g}"] = float((c.float() - ref.float()).abs().max())
        variants[f"GROUP_M={g}"] = lambda g=g, c=c: launch(g, c)
    if not tiny:
        variants["autotuned"] = lambda: G.gemm(a, b)
    variants["cublas"] = lambda: torch.mm(a, b)
    times = interleaved(variants, rounds=3 if tiny else 5, per_round=3)
    flops = 2 * M * N * K
    res = {}
    for name, t in times.items():
        med = t.get("median_us")
        res[name] = {**t, **meta.get(name, {}), "max_abs_err_vs_cublas": errs.get(name),
                     "tflops": flops / med / 1e6 if med else None}  # fmt: skip
    return {"M": M, "N": N, "K": K, "tile": tile, "autotuned_config": tuned, "variants": res}


def run(tiny: bool = False) -> dict:
    cells = [_cell(M, N, K, tiny) for M, N, K in (TINY_SHAPES if tiny else SHAPES)]
    return {"dtype": "bfloat16", "cells": cells,
            "method": "same tile, GROUP_M forced via the kernel's JITFunction; autotuned "
            "warpgauge.gemm and torch.mm beside; CUDA-graph replay, interleaved rounds"}  # fmt: skip


def summary_rows(rec: dict) -> list[str]:
    out = []
    for c in rec["cells"]:
        parts = [f"{k.replace('GROUP_M=', 'G')}:{v['tflops']:.0f}" for k, v in c["variants"].items()
                 if v.get("tflops")]  # fmt: skip
        out.append(f"{c['M']}x{c['N']}x{c['K']} TFLOP/s " + " ".join(parts))
    return out
