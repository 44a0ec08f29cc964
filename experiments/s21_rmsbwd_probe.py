"""Session 21 probe (GPU only): add_rms_norm's backward on tiny shapes, one program or several.

s21_probe.py (results/h200-session21/s21probe) found the training step of 32x127 spending 4.97
us in ``_rms_bwd_resident`` (one program: 32 rows in two steps of 16) against 1.19 us for the
forward (32 programs). Here the backward alone runs forced resident plans (rows per step, warps,
prefetch) and, through ``TUNE.min_group_elems``, several groups (then the dw finish kernel runs
too), each checked against FP64 first, timed as one CUDA graph of a fixed number of back-to-back
calls (the same count for every variant: no host-sized graphs), interleaved rounds, warm L2.
``add`` is timed the same way at its small sizes (blocks / warps), beside torch.compile.

    PYTHONPATH=src python3 experiments/s21_rmsbwd_probe.py --out $OUT/rmsbwd21.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_timer import bench_graph  # noqa: E402

from warpgauge.kernels import add as add_mod  # noqa: E402
from warpgauge.kernels import rmsnorm_backward as rb  # noqa: E402
from warpgauge.kernels.plans import RowPlan  # noqa: E402

CALLS = 200
SHAPES = ((32, 127), (128, 127), (32, 1024), (64, 512), (8, 4096))


def _variants(width: int):
    """name -> (plan or None for the rule, TUNE.min_group_elems or None for the default)."""
    blk = 1 << (width - 1).bit_length()
    out = {"rule": (None, None)}
    for rows in (2, 4, 8, 16, 32, 64):
        if rows * blk > 16384 or rows * blk < 256:
            continue
        for warps in (2, 4, 8):
            if rows * blk // (32 * warps) < 2:
                continue
            p = RowPlan("resident", blk, warps, rows=rows, programs_per_sm=2, prefetch=True)
            out[f"r{rows}w{warps}"] = (p, None)
            if rows <= 8:  # several groups (dw partials, then the finish kernel)
                out[f"r{rows}w{warps}_g256"] = (p, 256)
    out["rule_g256"] = (None, 256)
    return out


def _fused_variants(width: int):
    """The tiny plan with dw from the partials and the finish kernel, against one launch with
    a dw program (``TINY_FUSED_DW_MAX``), both through the rule (plan None)."""
    return {"unfused": (None, None, 0), "fused": (None, None, 1 << 20)}


def _rms_case(rows: int, width: int, rounds: int, variants=None) -> dict:
    g = torch.Generator(device="cuda").manual_seed(rows * width)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)  # noqa: E731
    dy, dh, h, w = mk(rows, width), mk(rows, width), mk(rows, width) * 3, mk(width)
    hd, dyd, wd = h.double(), dy.double(), w.double()
    rstd = torch.rsqrt(hd.pow(2).mean(-1, keepdim=True) + 1e-6)
    c = (hd * wd * dyd).mean(-1, keepdim=True)
    dx_ref = rstd * (wd * dyd - hd * c * rstd * rstd) + dh.double()
    dw_ref = (dyd * hd * rstd).sum(0)
    tune0 = rb.TUNE
    fns = {}
    fused0 = rb.TINY_FUSED_DW_MAX
    for name, (plan, elems, *fz) in (variants or _variants(width)).items():

        def call(plan=plan, elems=elems, fz=fz):
            rb.TUNE = dataclasses.replace(tune0, min_group_elems=elems) if elems else tune0
            rb.TINY_FUSED_DW_MAX = fz[0] if fz else 0
            try:
                return rb.add_rms_norm_backward(dy, dh, h, w, 1e-6, plan=plan)
            finally:
                rb.TUNE, rb.TINY_FUSED_DW_MAX = tune0, fused0

        fns[name] = call
    res: dict = {}
    ok = {}
    for k, f in fns.items():
        try:
            dx, dw = f()
            torch.cuda.synchronize()
            e1 = ((dx.double() - dx_ref).abs().max() / dx_ref.abs().max()).item()
            e2 = ((dw.double() - dw_ref).abs().max() / dw_ref.abs().max()).item()
            ok[k] = e1 < 2e-2 and e2 < 2e-2
            if not ok[k]:
                res[k] = f"FAILED dx {e1:.3g} dw {e2:.3g}"
        except Exception as e:  # noqa: BLE001  (a forced plan may not compile: record it)
            ok[k] = False
            res[k] = f"ERROR {type(e).__name__}: {str(e)[:120]}"
    times = {k: [] for k in fns if ok[k]}
    names = list(times)
    for r in range(rounds):
        for k in names[r % len(names) :] + names[: r % len(names)]:
            times[k].append(bench_graph(fns[k], calls=CALLS, replays=3)[0] * 1e6)
    res.update({k: statistics.median(v) for k, v in times.items()})
    return res


def _add_case(n: int, rounds: int) -> dict:
    g = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
    y = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
    comp = torch.compile(lambda a, b: a + b)
    reset = (add_mod.SMALL_BLOCK, add_mod.SMALL_WARPS, add_mod.SMALL_N)
    fns = {"torch": lambda: x + y, "compile": lambda: comp(x, y)}
    for blk, warps in ((256, 2), (512, 4), (512, 2), (1024, 4), (128, 1), (256, 1), (4096, 8)):

        def call(blk=blk, warps=warps):
            add_mod.SMALL_BLOCK, add_mod.SMALL_WARPS, add_mod.SMALL_N = blk, warps, 1 << 20
            try:
                return add_mod.add(x, y)
            finally:
                add_mod.SMALL_BLOCK, add_mod.SMALL_WARPS, add_mod.SMALL_N = reset

        fns[f"b{blk}w{warps}"] = call
    for f in fns.values():
        assert torch.allclose(f().float(), (x.float() + y.float()), rtol=2**-7, atol=0)
    times = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for k in names[r % len(names) :] + names[: r % len(names)]:
            times[k].append(bench_graph(fns[k], calls=CALLS, replays=3)[0] * 1e6)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--set", choices=("all", "fused"), default="all",
                    help="fused: only the one-launch tiny backward against the two-launch one")  # fmt: skip
    a = ap.parse_args()
    if a.set == "fused":
        res = {"device": torch.cuda.get_device_name(), "calls_per_graph": CALLS, "fused": {}}
        for rows, width in ((32, 127), (16, 127), (64, 127), (8, 1024), (16, 512), (4, 300)):
            r = _rms_case(rows, width, a.rounds, _fused_variants(width))
            res["fused"][f"{rows}x{width}"] = r
            print("fused", rows, width, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()},
                  flush=True)  # fmt: skip
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=1)
        return
    res = {
        "device": torch.cuda.get_device_name(),
        "calls_per_graph": CALLS,
        "rms_bwd": {},
        "add": {},
    }
    for n in (257, 700, 1024, 1025, 4097):
        res["add"][n] = r = _add_case(n, a.rounds)
        print("add", n, {k: round(v, 3) for k, v in r.items()}, flush=True)
    for rows, width in SHAPES:
        res["rms_bwd"][f"{rows}x{width}"] = r = _rms_case(rows, width, a.rounds)
        best = sorted((v, k) for k, v in r.items() if isinstance(v, float))[:5]
        print("rms_bwd", rows, width, "rule", round(r.get("rule", float("nan")), 3),
              "best", [(k, round(v, 3)) for v, k in best], flush=True)  # fmt: skip
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=1)
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
