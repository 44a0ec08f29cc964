"""Session 21 probe (GPU only): two small questions before changing a rule.

1. ``add`` below ``SMALL_N`` elements: which block / warps launch fastest. The s21a add run
   (results/20261204-182132-default) put 257 elements at 1.13 us warm against torch.compile's
   1.08 (256-element blocks of 2 warps: two programs, the second masked). Variants: forced
   ``(block, warps)`` through the module's SMALL_BLOCK / SMALL_WARPS, beside torch and
   torch.compile, each checked against FP64 first; warm lane (one graph of back-to-back calls)
   in interleaved rounds.
2. Where a tiny training step spends its time: add_rms_norm 32x127 (training suite, warm 6.64 us
   against torch.compile's 4.69). torch.profiler over graph-free steps of warpgauge and
   torch.compile lists every kernel with its mean device time; the whole step is also timed as a
   graph replay.

    PYTHONPATH=src python3 experiments/s21_probe.py --out $OUT/s21probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from graph_timer import bench_graph  # noqa: E402

import warpgauge as wg  # noqa: E402
from warpgauge.kernels import add as add_mod  # noqa: E402

ADD_SIZES = (257, 512, 700, 1024, 1025, 2049, 4097)
ADD_VARIANTS = ((256, 2), (512, 4), (512, 2), (1024, 4), (128, 1), (256, 1), (1024, 8))


def _add_case(n: int, rounds: int) -> dict:
    g = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
    y = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g)
    ref = (x.double() + y.double()).to(torch.bfloat16)
    comp = torch.compile(lambda a, b: a + b)
    fns = {"torch": lambda: x + y, "compile": lambda: comp(x, y)}
    reset = (add_mod.SMALL_BLOCK, add_mod.SMALL_WARPS, add_mod.SMALL_N)
    for blk, warps in ADD_VARIANTS:

        def call(blk=blk, warps=warps):
            add_mod.SMALL_BLOCK, add_mod.SMALL_WARPS, add_mod.SMALL_N = blk, warps, 1 << 20
            return add_mod.add(x, y)  # the launcher itself: the public call replays a recording

        fns[f"b{blk}w{warps}"] = call

    def public():
        add_mod.SMALL_BLOCK, add_mod.SMALL_WARPS, add_mod.SMALL_N = reset
        return wg.add(x, y)

    fns["wg"] = public  # the public call, default settings
    times: dict[str, list[float]] = {k: [] for k in fns}
    for k, f in fns.items():
        out = f()
        torch.cuda.synchronize()
        if not torch.allclose(out.float(), ref.float(), rtol=2**-7, atol=0):
            times[k] = None
    for r in range(rounds):
        order = list(fns)[r % len(fns) :] + list(fns)[: r % len(fns)]
        for k in order:
            if times[k] is None:
                continue
            f = fns[k]
            # the graph captures the kernel with the module settings of this variant; a fixed
            # call count for every variant (the s21b run sized graphs from each variant's eager
            # host time, which biased the launcher-path variants: results/h200-session21/README.md)
            med, _, _ = bench_graph(f, replays=5, calls=200)
            times[k].append(med * 1e6)
    add_mod.SMALL_BLOCK, add_mod.SMALL_WARPS, add_mod.SMALL_N = reset
    return {k: (statistics.median(v) if v else "FAILED") for k, v in times.items()}


def _profile(step, n_steps=20) -> list:
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n_steps):
            step()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = getattr(e, "self_cuda_time_total", 0)
        if t > 0 and e.count:  # kernels (CPU ops carry no self device time)
            rows.append({"kernel": e.key[:120], "calls_per_step": e.count / n_steps,
                         "mean_us": t / e.count})  # fmt: skip
    return sorted(rows, key=lambda r: -r["mean_us"] * r["calls_per_step"])


def _rms_step_case(rows: int, width: int) -> dict:
    g = torch.Generator(device="cuda").manual_seed(rows * width)
    mk = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=g)  # noqa: E731
    x, r, w = (t.requires_grad_() for t in (mk(rows, width), mk(rows, width), mk(width)))
    gy, gh = mk(rows, width), mk(rows, width)

    def eager_ref(a, b, ww):
        h = a + b
        hf = h.float()
        y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6) * ww.float()
        return y.to(a.dtype), h

    comp = torch.compile(eager_ref)
    out = {}
    for name, f in (
        ("warpgauge", lambda: wg.add_rms_norm(x, r, w, 1e-6)),
        ("compile", lambda: comp(x, r, w)),
    ):

        def step(f=f):
            return torch.autograd.grad(f(), (x, r, w), (gy, gh))

        med, _, n = bench_graph(step, replays=5, calls=100)
        out[name] = {"step_warm_us": med * 1e6, "kernels": _profile(step)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    res = {"device": torch.cuda.get_device_name(), "add": {}, "rms_step": {}}
    for n in ADD_SIZES:
        res["add"][n] = _add_case(n, a.rounds)
        print(
            "add",
            n,
            {k: (round(v, 3) if isinstance(v, float) else v) for k, v in res["add"][n].items()},
            flush=True,
        )
    for rows, width in ((32, 127), (128, 4096), (1024, 1024)):
        try:
            res["rms_step"][f"{rows}x{width}"] = c = _rms_step_case(rows, width)
            for k, v in c.items():
                print("rms step", rows, width, k, round(v["step_warm_us"], 2),
                      [(q["kernel"][:60], round(q["mean_us"], 2), q["calls_per_step"]) for q in v["kernels"]],
                      flush=True)  # fmt: skip
        except Exception as e:  # noqa: BLE001  (a probe: record and go on)
            res["rms_step"][f"{rows}x{width}"] = repr(e)
            print("rms step failed", rows, width, repr(e), flush=True)
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
