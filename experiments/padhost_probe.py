"""Where the host time of an eager call goes on the shapes whose host + device time in run
20261202-023113-default sat far above their device time (GPU).

That run's cold lane measured per-call host + device (synchronize, flush, event, one eager call,
event) at 458-476 us above the device time for the pad path of ``gemm`` (4096x4096x4100: 665 us
against 207 us of graph replay; 4095^3: 717 against 240) and 220 us above it for
``int4_linear`` 256x14336x4096 (293 against 73.5), while the aligned GEMMs and every row operator
sat 30-110 us above. This probe times, per case: host + device as the harness does (cold: the
harness's flush first; warm: none), the host time alone (``perf_counter`` around ``calls``
back-to-back calls, no synchronize), a cProfile of 20 calls (top functions by cumulative time)
and a torch.profiler table of 5 calls (CUDA API calls: a hidden synchronize or cudaMalloc shows
there). ``torch.mm`` and ``torch.compile`` of the same product are timed beside it (compile's
kernels are listed too: how it handles the unaligned sizes).

``--slice-ab`` (session 13's second look): only warpgauge, each case timed twice in one process,
with ``aten.slice`` allowed in replay recordings (the fix) and without it (as before), recipes
cleared in between, order alternating per case: whether allowing it changed any other path's host
time (the batch 1-64 INT4 cases looked 11-18 us slower in run 20261202-042828-default's cold
host + device column than in 20261202-023113-default's).

    PYTHONPATH=src python3 experiments/padhost_probe.py --out $OUT/padhost
    PYTHONPATH=src python3 experiments/padhost_probe.py --out $OUT/slice --slice-ab
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import time
from pathlib import Path

import torch

import warpgauge as wg

BF = torch.bfloat16


def _rand(g, *shape):
    return torch.randn(*shape, device="cuda", generator=g).to(BF)


def build(name: str, g):
    kind, dims = name.split(" ")
    if kind == "gemm":
        m, n, k = (int(v) for v in dims.split("x"))
        a, b = _rand(g, m, k), _rand(g, k, n)
        return {"warpgauge": lambda: wg.gemm(a, b), "torch.mm": lambda: torch.mm(a, b),
                "compile": torch.compile(lambda: torch.mm(a, b))}  # fmt: skip
    m, n, k = (int(v) for v in dims.split("x"))
    x = _rand(g, m, k)
    w = wg.quantize_int4(_rand(g, n, k) * 0.05)
    dense = w.dequantize()
    return {"warpgauge": lambda: wg.int4_linear(x, w),
            "F.linear dense": lambda: torch.nn.functional.linear(x, dense)}  # fmt: skip


class Flush:
    def __init__(self):
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.buf = torch.empty(4 * l2, dtype=torch.uint8, device="cuda")
        self.clean = torch.ones(2 * l2 // 4, dtype=torch.float32, device="cuda").view(-1, 1024)
        self.sink = torch.empty(1024, dtype=torch.float32, device="cuda")

    def __call__(self):
        self.buf.fill_(0x5A)
        torch.sum(self.clean, dim=0, out=self.sink)


def host_device(fn, flush, n: int, cold: bool) -> list[float]:
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2 * n)]
    fn()
    for i in range(n):
        if cold:
            flush()
        torch.cuda.synchronize()
        ev[2 * i].record()
        fn()
        ev[2 * i + 1].record()
    torch.cuda.synchronize()
    return [ev[2 * i].elapsed_time(ev[2 * i + 1]) * 1e3 for i in range(n)]


def host_only(fn, calls: int) -> tuple[float, float]:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / calls * 1e6, (t2 - t0) / calls * 1e6


def profile_text(fn) -> str:
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(20):
        fn()
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(30)
    return s.getvalue()


def torch_profile(fn) -> str:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
    return prof.key_averages().table(sort_by="cpu_time_total", row_limit=30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--slice-ab", action="store_true")
    args = ap.parse_args()
    if args.slice_ab:
        slice_ab(args)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    torch._dynamo.config.cache_size_limit = 64
    g = torch.Generator(device="cuda").manual_seed(0)
    flush = Flush()
    names = ["gemm 4096x4096x4100", "gemm 4095x4095x4095", "gemm 4096x4104x4096",
             "gemm 4096x4096x4096", "int4 256x14336x4096", "int4 128x8192x8192"]  # fmt: skip
    rows = []
    for name in names:
        provs = build(name, g)
        for pname, fn in provs.items():
            for _ in range(3):
                fn()  # compile, tune, record the replay
            torch.cuda.synchronize()
            cold = host_device(fn, flush, args.n, True)
            warm = host_device(fn, flush, args.n, False)
            h, w = host_only(fn, 20)
            row = {"case": name, "provider": pname, "cold_host_device_us": statistics.median(cold),
                   "warm_host_device_us": statistics.median(warm), "host_only_us": h,
                   "wall_per_call_us": w}  # fmt: skip
            rows.append(row)
            print(json.dumps(row), flush=True)
            tag = f"{name.replace(' ', '_')}__{pname.replace(' ', '_').replace('.', '_')}"
            if pname in ("warpgauge", "compile"):
                (args.out / f"{tag}.cprofile.txt").write_text(profile_text(fn))
                (args.out / f"{tag}.torchprof.txt").write_text(torch_profile(fn))
        (args.out / "padhost.json").write_text(json.dumps(rows, indent=1))


def slice_ab(args) -> None:
    from warpgauge.kernels import _replay

    op = torch.ops.aten.slice.Tensor
    g = torch.Generator(device="cuda").manual_seed(0)
    flush = Flush()
    names = ["int4 1x4096x4096", "int4 1x4096x14336", "int4 4x4096x4096", "int4 64x4096x4096",
             "int4 256x14336x4096", "gemm 4096x4096x4100", "gemm 16x4096x4096",
             "gemm 1024x1024x1024"]  # fmt: skip
    rows = []
    for i, name in enumerate(names):
        fn = build(name, g)["warpgauge"]
        order = (True, False) if i % 2 == 0 else (False, True)
        for rep in range(2):
            for allowed in order:
                (_replay._ALLOWED.add if allowed else _replay._ALLOWED.discard)(op)
                _replay.clear()
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                cold = host_device(fn, flush, args.n, True)
                warm = host_device(fn, flush, args.n, False)
                h, w = host_only(fn, 20)
                row = {"case": name, "slice_allowed": allowed, "rep": rep,
                       "cold_host_device_us": statistics.median(cold),
                       "warm_host_device_us": statistics.median(warm), "host_only_us": h,
                       "wall_per_call_us": w, "replay_stats": dict(_replay.STATS)}  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
        (args.out / "slice_ab.json").write_text(json.dumps(rows, indent=1))
    _replay._ALLOWED.add(op)


if __name__ == "__main__":
    main()
