"""Host time per eager call of the cooperative row plans, replayed against not replayed (GPU).

Until the statistics slots came from ``_launch.zeros`` the cooperative plans' ``torch.zeros``
made every recording refused, so each call ran the whole launcher (110-130 us host + device per
call in run 20261201-211302-default against 17-40 us at resident shapes). Per case: ``calls``
back-to-back calls timed with ``perf_counter`` from the first call to the last one's return
(host time per call), then a synchronize (wall time per call: above the host time the GPU was the
bound), for warpgauge with replay on (the default), warpgauge with replay off and PyTorch's
equivalent, interleaved in rotating order over ``rounds``; medians in the JSON and the table.

    PYTHONPATH=src python3 experiments/coop_host_probe.py --out $OUT/coop_host.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import warpgauge as wg
from warpgauge.kernels import _replay
from warpgauge.kernels.plans import RowPlan

BF = torch.bfloat16


def cases(dev):
    g = torch.Generator(device=dev).manual_seed(0)

    def r(*s):
        return torch.randn(*s, device=dev, generator=g).to(BF)

    out = {}
    for rows, n in ((4, 32769), (16, 262144), (64, 131072), (2, 1048576), (32, 127)):
        x = r(rows, n)
        out[f"softmax {rows}x{n}"] = ("softmax", rows, n, lambda x=x: wg.softmax(x),
                                      lambda x=x: torch.softmax(x, -1))  # fmt: skip
    x, res, w = r(4, 32769), r(4, 32769), r(32769)
    out["add_rms_norm 4x32769"] = ("rms", 4, 32769, lambda: wg.add_rms_norm(x, res, w),
                                   lambda: F.rms_norm(x + res, (32769,), w))  # fmt: skip
    xs = r(128, 50257)
    out["row_sum 128x50257"] = ("row_sum", 128, 50257, lambda: wg.row_sum(xs),
                                lambda: xs.sum(-1))  # fmt: skip
    return out


def timed(fn, calls):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / calls * 1e6, (t2 - t0) / calls * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    props = torch.cuda.get_device_properties(0)
    sm, l2 = props.multi_processor_count, props.L2_cache_size
    res = {}
    for name, (op, rows, n, mine, theirs) in cases("cuda").items():
        plan = RowPlan.for_shape(rows, n, sm, op, l2, 2)

        def off(mine=mine):
            _replay.ENABLED = False
            try:
                return mine()
            finally:
                _replay.ENABLED = True

        variants = {"replay": mine, "no replay": off, "torch": theirs}
        for fn in variants.values():
            for _ in range(5):
                fn()
        samples = {k: [] for k in variants}
        names = list(variants)
        before = dict(_replay.STATS)
        for rd in range(a.rounds):
            for k in names[rd % 3 :] + names[: rd % 3]:
                samples[k].append(timed(variants[k], a.calls))
        replays = _replay.STATS["replays"] - before["replays"]
        row = {"plan": plan.kind, "block": plan.block, "replays": replays}
        for k, s in samples.items():
            row[k] = {"host_us": statistics.median(h for h, _ in s),
                      "wall_us": statistics.median(w for _, w in s)}  # fmt: skip
        res[name] = row
        print(f"{name:24s} {plan.kind:8s} replays {replays:6d}  "
              + "  ".join(f"{k} {v['host_us']:7.1f} / {v['wall_us']:7.1f}"
                          for k, v in row.items() if isinstance(v, dict)),
              flush=True)  # fmt: skip
    meta = dict(device=torch.cuda.get_device_name(0), sm=sm, torch=torch.__version__,
                calls=a.calls, rounds=a.rounds, units="us per call: host / wall")  # fmt: skip
    with open(a.out, "w") as f:
        json.dump(dict(meta, cases=res), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
