"""Warp-count and chunk sweeps for the row kernels (softmax, add_rms_norm, row_sum).

- warps: the resident plan at fixed block, ``num_warps`` in 1..32 (what ``plans._warps`` picks is
  marked ``rule``).
- chunks: wide rows under every looped and split plan (chunk 1024..8192, warps by the block rule)
  and the automatic plan, so the rule's regret (its time over the best forced plan's, minus 1)
  can be read per shape.

Every forced plan is a ``RowPlan`` passed as ``plan=`` to the public launcher; each output is
checked against a PyTorch FP32 computation before timing; variants are interleaved.
"""

from __future__ import annotations

from .common import interleaved

# Every (width, block, warps) is its own binary (widths are compile-time), so the grids are small.
WARP_SHAPES = ((512, 4097), (16384, 4096))
WARPS = (2, 4, 8, 16)
CHUNK_SHAPES = ((4, 32769), (256, 65536))
CHUNKS = (2048, 4096, 8192)
TINY_WARP_SHAPES = ((64, 1024),)
TINY_CHUNK_SHAPES = ((4, 40000),)
TINY_WARPS = (4, 8)
TINY_CHUNKS = (2048, 4096)
OPS = ("softmax", "add_rms_norm")


def _op(name):
    import torch

    from warpgauge.kernels.rmsnorm import add_rms_norm
    from warpgauge.kernels.row_sum import row_sum
    from warpgauge.kernels.softmax import softmax

    def make(rows, n, dtype):
        g = torch.Generator(device="cuda").manual_seed(rows * 131 + n)
        x = torch.randn(rows, n, device="cuda", dtype=dtype, generator=g)
        if name == "softmax":
            ref = torch.softmax(x.float(), -1)
            return (lambda plan: softmax(x, plan=plan)), lambda y: (y.float() - ref).abs().max()
        if name == "row_sum":
            ref = x.float().sum(-1)
            rel = lambda y: ((y.float() - ref).abs() / ref.abs().clamp_min(1.0)).max()
            return (lambda plan: row_sum(x, plan=plan)), rel
        r = torch.randn(rows, n, device="cuda", dtype=dtype, generator=g)
        w = torch.randn(n, device="cuda", dtype=dtype, generator=g)
        h = (x.float() + r.float()).to(dtype).float()
        ref = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
        return (lambda plan: add_rms_norm(x, r, w, 1e-6, plan=plan)), (
            lambda out: (out[0].float() - ref).abs().max()
        )

    return make


def _measure(call, check, plans: dict, rounds: int) -> dict:
    variants, errs = {}, {}
    for label, plan in plans.items():
        try:
            out = call(plan)
            errs[label] = float(check(out))
            variants[label] = lambda p=plan: call(p)
        except Exception as e:  # a plan the kernel rejects is recorded, not fatal
            errs[label] = f"{type(e).__name__}: {e}"
    times = interleaved(variants, rounds=rounds, per_round=4)
    return {label: {"plan": _plan_dict(plans[label]), "max_err": errs[label], **times.get(label, {})}
            for label in plans}  # fmt: skip


def _plan_dict(p):
    if p is None:
        return None
    return {"kind": p.kind, "block": p.block, "num_warps": p.num_warps, "split": p.split}


def run_warps(tiny: bool = False) -> dict:
    import torch

    from warpgauge.kernels.plans import RowPlan

    cells = []
    for op in OPS[:1] if tiny else OPS:
        make = _op(op)
        for rows, n in TINY_WARP_SHAPES if tiny else WARP_SHAPES:
            call, check = make(rows, n, torch.bfloat16)
            rule = RowPlan.resident(n)
            plans = {f"{w}w" + (" (rule)" if w == rule.num_warps else ""):
                     RowPlan("resident", rule.block, w) for w in (TINY_WARPS if tiny else WARPS)}  # fmt: skip
            cells.append({"op": op, "rows": rows, "width": n, "block": rule.block,
                          "variants": _measure(call, check, plans, 3 if tiny else 5)})  # fmt: skip
    return {"dtype": "bfloat16", "kind": "warps", "cells": cells,
            "method": "resident plan, block = next_pow2(width), num_warps forced; CUDA-graph "
            "replay, interleaved shuffled rounds; outputs checked against FP32 PyTorch first"}  # fmt: skip


def run_chunks(tiny: bool = False) -> dict:
    import torch

    from warpgauge._device import device_info
    from warpgauge.kernels.plans import RowPlan

    sm = device_info(torch.device("cuda")).sm_count
    cells = []
    for op in OPS[:1] if tiny else OPS:
        make = _op(op)
        for rows, n in TINY_CHUNK_SHAPES if tiny else CHUNK_SHAPES:
            call, check = make(rows, n, torch.bfloat16)
            plans = {"auto": None}
            for c in TINY_CHUNKS if tiny else CHUNKS:
                plans[f"looped {c}"] = RowPlan.looped(c)
                plans[f"split {c}"] = RowPlan.split_for(rows, n, sm, block=c)
            chosen = RowPlan.for_shape(rows, n, sm)
            res = _measure(call, check, plans, 3 if tiny else 5)
            res["auto"]["plan"] = _plan_dict(chosen)
            timed = {k: v["median_us"] for k, v in res.items() if "median_us" in v and k != "auto"}
            best = min(timed, key=timed.get) if timed else None
            regret = (res["auto"]["median_us"] / timed[best] - 1) if best and "median_us" in res[
                "auto"] else None  # fmt: skip
            cells.append({"op": op, "rows": rows, "width": n, "variants": res, "best": best,
                          "rule_regret": regret})  # fmt: skip
    return {"dtype": "bfloat16", "kind": "chunks", "sm_count": sm, "cells": cells,
            "method": "looped and split plans forced at chunk 1024-8192 (warps by the block rule), "
            "plus the automatic plan; regret = auto / best forced - 1; CUDA-graph replay, "
            "interleaved"}  # fmt: skip


def summary_rows(rec: dict) -> list[str]:
    out = []
    for c in rec["cells"]:
        best = min(
            ((k, v["median_us"]) for k, v in c["variants"].items() if "median_us" in v),
            key=lambda kv: kv[1],
            default=(None, None),
        )
        extra = f" regret {c['rule_regret']:+.1%}" if c.get("rule_regret") is not None else ""
        out.append(f"{c['op']:13s} {c['rows']}x{c['width']}: best {best[0]} {best[1]:.2f}us{extra}"
                   if best[0] else f"{c['op']} {c['rows']}x{c['width']}: nothing timed")  # fmt: skip
    return out
