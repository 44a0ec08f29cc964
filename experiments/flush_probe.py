"""Does the cold lane's L2 flush (a 4x-L2 write, ``Device.flush``) leave dirty lines whose
write-back lands inside the next timed call? Times a few memory-bound calls after four flushes:

  write        buf.fill_ (the harness's flush until session 10)
  write+read   the fill, then a read of a clean buffer of 2x L2 (the dirty lines leave during it)
  read         only the read (the previous call's own dirty outputs leave during it)
  write+idle   the fill, then ~200 us of GPU sleep (does L2 write back on idle?)

Medians of device time (events around the call only), interleaved by round.

    PYTHONPATH=src python3 experiments/flush_probe.py [--rounds 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

import warpgauge as wg
from warpgauge.quant import quantize_int4


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = props.L2_cache_size
    wbuf = torch.empty(4 * l2, dtype=torch.uint8, device=dev)
    rbuf = torch.ones(2 * l2 // 4, dtype=torch.float32, device=dev)
    sink = torch.empty((), dtype=torch.float32, device=dev)
    cyc = int(props.clock_rate * 1e3 * 200e-6) if hasattr(props, "clock_rate") else 400_000

    def f_write():
        wbuf.fill_(0x5A)

    def f_read():
        torch.sum(rbuf, dim=0, out=sink)

    def f_write_read():
        f_write()
        f_read()

    def f_write_idle():
        f_write()
        torch.cuda._sleep(cyc)

    flushes = {
        "write": f_write,
        "write+read": f_write_read,
        "read": f_read,
        "write+idle": f_write_idle,
    }

    g = torch.Generator(device=dev).manual_seed(0)
    calls = {}
    for mb in (8, 32, 128):
        n = mb * (1 << 20) // 2
        src = torch.randn(n, device=dev, generator=g).to(torch.bfloat16)
        dst = torch.empty_like(src)
        calls[f"copy {mb} MB"] = (lambda s=src, d=dst: d.copy_(s), 2 * mb)
    x = torch.randn(16384, 4096, device=dev, generator=g).to(torch.bfloat16)
    ys = torch.empty(16384, device=dev, dtype=torch.bfloat16)
    calls["row sum 16384x4096 (torch)"] = (lambda: torch.sum(x, -1, out=ys), 128)
    calls["row sum 16384x4096 (wg)"] = (lambda: wg.row_sum(x), 128)
    xs = torch.randn(1024, 4096, device=dev, generator=g).to(torch.bfloat16)
    calls["softmax 1024x4096 (wg)"] = (lambda: wg.softmax(xs), 16)
    for n, k in ((4096, 4096), (28672, 8192)):
        w = (torch.randn(n, k, device=dev, generator=g) * k**-0.5).to(torch.bfloat16)
        q = quantize_int4(w, 128)
        a = torch.randn(1, k, device=dev, generator=g).to(torch.bfloat16)
        calls[f"int4 1x{n}x{k} (wg)"] = (lambda a=a, q=q: wg.int4_linear(a, q), n * k / 2 / 2**20)
        calls[f"F.linear 1x{n}x{k} dense"] = (lambda a=a, w=w: F.linear(a, w), n * k * 2 / 2**20)
    for fn, _ in calls.values():
        fn()
    torch.cuda.synchronize()
    # flush cost itself
    res = {"flush_us": {}, "calls": {}}
    for name, fl in flushes.items():
        e0, e1 = torch.cuda.Event(True), torch.cuda.Event(True)
        fl()
        e0.record()
        for _ in range(10):
            fl()
        e1.record()
        torch.cuda.synchronize()
        res["flush_us"][name] = e0.elapsed_time(e1) * 100.0
    samples = {c: {f: [] for f in flushes} for c in calls}
    ev = [
        (torch.cuda.Event(True), torch.cuda.Event(True)) for _ in range(len(calls) * len(flushes))
    ]
    for r in range(args.rounds):
        i = 0
        order = list(flushes)
        order = order[r % len(order) :] + order[: r % len(order)]
        for fn, _ in calls.values():
            for f in order:
                flushes[f]()
                e0, e1 = ev[i]
                e0.record()
                fn()
                e1.record()
                i += 1
        torch.cuda.synchronize()
        i = 0
        for c in calls:
            for f in order:
                samples[c][f].append(ev[i][0].elapsed_time(ev[i][1]) * 1000.0)
                i += 1
    print(
        f"L2 {l2 >> 20} MiB; flush cost us: "
        + ", ".join(f"{k} {v:.1f}" for k, v in res["flush_us"].items())
    )
    print(f"{'call':32s} " + " ".join(f"{f:>12s}" for f in flushes) + "   (median us; MB moved)")
    for c, (_fn, mb) in calls.items():
        med = {f: statistics.median(samples[c][f]) for f in flushes}
        res["calls"][c] = {"mb": mb, **med}
        print(f"{c:32s} " + " ".join(f"{med[f]:12.2f}" for f in flushes) + f"   {mb:.0f}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
