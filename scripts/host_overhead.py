"""Host cost of an eager call, and what torch.compile does to it (CUDA GPU required).

Three measurements, each a host-bound loop: ``calls`` back-to-back calls on tiny inputs, timed on
the CPU from the first call to the return of the last (the GPU finishes the queue afterwards and
is never the bottleneck: each sample also records the time until the GPU is done, and a sample
whose kernels outlast the host loop is flagged). Every variant of a table is sampled in each of
``rounds`` rounds, in an order that rotates from round to round, so background load spoils a few
samples of every variant instead of all samples of one; the tables give medians (p10-p90).

1. Public functions against their PyTorch equivalents, plain and with an input that requires
   grad (then autograd records the call, which goes through ``torch.ops.warpgauge.*``).
2. Where the time goes in one public call: the Triton launch of the kernel alone (raw
   ``kernel[grid](...)`` and through ``wrap_triton`` as the launchers call it), input validation,
   output allocation, the launch plan, a device guard (``with torch.cuda.device(...)``, which the
   launchers do not use: its cost is what adding one would cost), the launcher, the registered op
   called through the dispatcher, and the whole public call.
3. One tiny op and a 16-op chain (8 x (add_rms_norm + softmax)): eager public calls,
   ``torch.compile(fullgraph=True)`` and ``mode="reduce-overhead"`` (one CUDA-graph replay).

Usage: PYTHONPATH=src python3 scripts/host_overhead.py --out results/host_overhead [--quick]
Writes host_overhead.json and host_overhead.md to --out. About 1 minute (compiles included).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

DEV = "cuda"  # --smoke-cpu switches to "cpu" (Triton interpreter) to check the script's logic


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def require_cuda(script: str) -> None:
    if not torch.cuda.is_available():
        sys.exit(
            f"{script}: no CUDA device is available. This script measures GPU kernels and must "
            "run on a CUDA GPU (the H200); the CPU interpreter cannot time them."
        )


# ------------------------------------------------------------------------------------- timing


def loop_sample(fn, calls: int) -> tuple[float, float]:
    """(host us per call, wall us per call until the GPU is idle) for ``calls`` calls of fn."""
    sync()
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter_ns()
    sync()
    t2 = time.perf_counter_ns()
    return (t1 - t0) / calls / 1e3, (t2 - t0) / calls / 1e3


def interleaved(variants: dict, rounds: int, calls: int, warmup: int = 20) -> dict:
    """Sample every variant once per round in rotating order; returns name -> summary."""
    from warpgauge.bench.stats import summarize

    for fn in variants.values():  # compile, autotune, fill caches
        for _ in range(warmup):
            fn()
    sync()
    names = list(variants)
    host = {n: [] for n in names}
    wall = {n: [] for n in names}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            k = r % len(names)
            for n in names[k:] + names[:k]:
                h, w = loop_sample(variants[n], calls)
                host[n].append(h)
                wall[n].append(w)
    finally:
        if gc_was_enabled:
            gc.enable()
    out = {}
    for n in names:
        s = summarize(host[n])
        sw = summarize(wall[n])
        out[n] = {
            "host_us": s,
            "wall_median_us": sw["median_us"],
            # the GPU, not the host, set the pace when the queue drained long after the loop
            "device_bound": sw["median_us"] > 1.5 * s["median_us"],
        }
    return out


def _fmt(entry: dict) -> str:
    h = entry["host_us"]
    flag = " (device-bound)" if entry["device_bound"] else ""
    return f"{h['median_us']:.1f} ({h['p10_us']:.1f}-{h['p90_us']:.1f}){flag}"


# ------------------------------------------------------------------------------- measurements


def rand(shape, dtype, seed=0, scale=1.0):
    g = torch.Generator(device=DEV).manual_seed(seed)
    return (torch.randn(shape, generator=g, device=DEV) * scale).to(dtype)


def public_vs_pytorch(dtype, rounds, calls) -> list[dict]:
    import warpgauge as wg

    x = rand((32, 127), dtype, 0)
    y = rand((32, 127), dtype, 1)
    w = rand((127,), dtype, 2)
    xa, ya = rand((32, 128), dtype, 3), rand((32, 128), dtype, 4)  # 4096 elements
    a, b = rand((64, 64), dtype, 5), rand((64, 64), dtype, 6)
    qw = wg.quantize_int4(rand((256, 256), dtype, 7, 0.05))
    wd = qw.dequantize()
    xv = rand((1, 256), dtype, 8)

    def rms_composition(x, r, w, eps=1e-6):
        h = (x.float() + r.float()).to(x.dtype)
        hf = h.float()
        return (hf * torch.rsqrt(hf.square().mean(-1, keepdim=True) + eps) * w.float()).to(
            x.dtype
        ), h

    def add_then_rms_norm(x, r, w, eps=1e-6):
        h = x + r
        return F.rms_norm(h, (h.shape[-1],), w, eps), h

    cases = [
        ("add", "32x128", (xa, ya), wg.add, {"torch.add": torch.add}),
        ("row_sum", "32x127", (x,), wg.row_sum, {"x.sum(-1)": lambda t: t.sum(-1)}),
        ("softmax", "32x127", (x,), wg.softmax, {"torch.softmax": lambda t: torch.softmax(t, -1)}),
        (
            "add_rms_norm",
            "32x127",
            (x, y, w),
            wg.add_rms_norm,
            {"eager composition": rms_composition, "x + r, F.rms_norm": add_then_rms_norm},
        ),
        ("gemm", "64x64x64", (a, b), wg.gemm, {"torch.mm": torch.mm}),
        (
            "int4_linear",
            "1x256x256",
            (xv, qw),
            wg.int4_linear,
            {"F.linear, dequantized": lambda t, _q: F.linear(t, wd)},
        ),
    ]
    rows = []
    for op, shape, args, public, torch_fns in cases:
        print(f"  {op} {shape}", flush=True)
        grad_args = tuple(
            t.detach().clone().requires_grad_() if isinstance(t, torch.Tensor) and i == 0 else t
            for i, t in enumerate(args)
        )
        variants = {"warpgauge": lambda: public(*args)}
        variants["warpgauge, x requires grad"] = lambda: public(*grad_args)
        for name, fn in torch_fns.items():
            variants[name] = lambda fn=fn: fn(*args)
            variants[f"{name}, x requires grad"] = lambda fn=fn: fn(*grad_args)
        res = interleaved(variants, rounds, calls)
        rows.append({"op": op, "shape": shape, "dtype": str(dtype)[6:], "variants": res})
    return rows


def breakdown(dtype, rounds, calls) -> list[dict]:
    """Components of one eager call for softmax, add_rms_norm, add and gemm."""
    from torch.library import wrap_triton

    import warpgauge as wg
    from warpgauge import _checks
    from warpgauge.kernels import _launch
    from warpgauge.kernels import add as add_k
    from warpgauge.kernels import gemm as gemm_k
    from warpgauge.kernels import rmsnorm as rms_k
    from warpgauge.kernels import softmax as softmax_k

    ops = torch.ops.warpgauge
    x = rand((32, 127), dtype, 0)
    r = rand((32, 127), dtype, 1)
    w = rand((127,), dtype, 2)
    rows, n = x.shape
    dev = x.device
    plan = _launch.row_plan(rows, n, dev, None)
    y_pre, h_pre = torch.empty_like(x), torch.empty_like(x)

    def guard():
        with torch.cuda.device(dev) if DEV == "cuda" else contextlib.nullcontext():
            pass

    out = []
    # --- softmax (resident plan at width 127)
    assert plan.kind == "resident", plan
    k = softmax_k._softmax_resident
    variants = {
        "Triton launch, kernel[grid](...)": lambda: k[(rows,)](
            x, y_pre, n, N=n, BLOCK=plan.block, num_warps=plan.num_warps
        ),
        "Triton launch through wrap_triton": lambda: wrap_triton(k)[(rows,)](
            x, y_pre, n, N=n, BLOCK=plan.block, num_warps=plan.num_warps
        ),
        "input validation": lambda: (_checks.check_tensor("x", x), _checks.rows_view("x", x)),
        "output allocation": lambda: _launch.empty_rows_like(x),
        "launch plan": lambda: _launch.row_plan(rows, n, dev, None),
        "device guard": guard,
        "launcher (kernels.softmax.softmax)": lambda: softmax_k.softmax(x),
        "dispatcher (torch.ops.warpgauge.softmax)": lambda: ops.softmax(x),
        "public call (wg.softmax)": lambda: wg.softmax(x),
        "torch.softmax": lambda: torch.softmax(x, -1),
    }
    print("  softmax 32x127", flush=True)
    out.append(
        {"op": "softmax", "shape": "32x127", "components": interleaved(variants, rounds, calls)}
    )

    # --- add_rms_norm
    kr = rms_k._rms_resident
    variants = {
        "Triton launch, kernel[grid](...)": lambda: kr[(rows,)](
            x, r, w, y_pre, h_pre, n, n, 1e-6, N=n, BLOCK=plan.block, num_warps=plan.num_warps
        ),
        "input validation": lambda: (
            rms_k.validate(x, r, w, 1e-6),
            _checks.rows_view("x", x),
            _checks.rows_view("residual", r),
        ),
        "output allocation": lambda: (_launch.empty_rows_like(x), _launch.empty_rows_like(x)),
        "launch plan": lambda: _launch.row_plan(rows, n, dev, None),
        "device guard": guard,
        "launcher (kernels.rmsnorm.add_rms_norm)": lambda: rms_k.add_rms_norm(x, r, w, 1e-6),
        "dispatcher (torch.ops.warpgauge.add_rms_norm)": lambda: ops.add_rms_norm(x, r, w, 1e-6),
        "public call (wg.add_rms_norm)": lambda: wg.add_rms_norm(x, r, w),
    }
    print("  add_rms_norm 32x127", flush=True)
    out.append(
        {
            "op": "add_rms_norm",
            "shape": "32x127",
            "components": interleaved(variants, rounds, calls),
        }
    )

    # --- add (4096 elements: the anchors' tiny add)
    xa, ya = rand((32, 128), dtype, 3), rand((32, 128), dtype, 4)
    o_pre = torch.empty_like(xa)
    na = xa.numel()
    ka = add_k._add_flat
    grid = (triton_cdiv(na, add_k.BLOCK),)
    variants = {
        "Triton launch, kernel[grid](...)": lambda: ka[grid](
            xa, ya, o_pre, na, BLOCK=add_k.BLOCK, num_warps=add_k.NUM_WARPS
        ),
        "input validation": lambda: add_k.validate(xa, ya),
        "output allocation": lambda: _launch.empty(xa.shape, xa.dtype, xa.device),
        "device guard": guard,
        "launcher (kernels.add.add)": lambda: add_k.add(xa, ya),
        "dispatcher (torch.ops.warpgauge.add)": lambda: ops.add(xa, ya),
        "public call (wg.add)": lambda: wg.add(xa, ya),
        "torch.add": lambda: torch.add(xa, ya),
    }
    print("  add 32x128", flush=True)
    out.append({"op": "add", "shape": "32x128", "components": interleaved(variants, rounds, calls)})

    # --- gemm 64x64x64: the launch is the autotuned kernel's call (autotuner cache lookup included)
    a, b = rand((64, 64), dtype, 5), rand((64, 64), dtype, 6)
    c_pre = torch.empty((64, 64), dtype=dtype, device=dev)
    wg.gemm(a, b)  # autotune before timing

    def gemm_validation():
        _checks.check_tensor("a", a, _checks.HALF_DTYPES)
        _checks.check_tensor("b", b, _checks.HALF_DTYPES)
        _checks.check_same_device([("a", a), ("b", b)])
        _checks.check_same_dtype([("a", a), ("b", b)])

    variants = {
        "Triton launch (gemm_k._launch, autotuned kernel)": lambda: gemm_k._launch(a, b, c_pre),
        "input validation": gemm_validation,
        "output allocation": lambda: torch.empty((64, 64), dtype=dtype, device=dev),
        "device guard": guard,
        "launcher (kernels.gemm.gemm)": lambda: gemm_k.gemm(a, b),
        "dispatcher (torch.ops.warpgauge.gemm)": lambda: ops.gemm(a, b),
        "public call (wg.gemm)": lambda: wg.gemm(a, b),
        "torch.mm": lambda: torch.mm(a, b),
    }
    print("  gemm 64x64x64", flush=True)
    out.append(
        {"op": "gemm", "shape": "64x64x64", "components": interleaved(variants, rounds, calls)}
    )
    return out


def triton_cdiv(a, b):
    return (a + b - 1) // b


def compiled_chains(dtype, rounds, calls) -> list[dict]:
    import warpgauge as wg

    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    x = rand((32, 127), dtype, 0)
    r = rand((32, 127), dtype, 1)
    w = rand((127,), dtype, 2)

    def one(x):
        return wg.softmax(x)

    def chain(x, r, w):
        for _ in range(8):
            y, r = wg.add_rms_norm(x, r, w)
            x = wg.softmax(y)
        return x, r

    def torch_chain(x, r, w):
        for _ in range(8):
            h = (x.float() + r.float()).to(x.dtype)
            hf = h.float()
            y = (hf * torch.rsqrt(hf.square().mean(-1, keepdim=True) + 1e-6) * w.float()).to(
                x.dtype
            )
            x, r = torch.softmax(y, -1), h
        return x, r

    rows = []
    for label, fn, args, torch_fn in (
        ("one softmax, 32x127", one, (x,), lambda t: torch.softmax(t, -1)),
        ("16 ops: 8 x (add_rms_norm + softmax), 32x127", chain, (x, r, w), torch_chain),
    ):
        print(f"  {label}: compiling", flush=True)
        compiled = torch.compile(fn, fullgraph=True)
        reduce_overhead = torch.compile(fn, fullgraph=True, mode="reduce-overhead")
        variants = {
            "eager, warpgauge public functions": lambda fn=fn, args=args: fn(*args),
            "torch.compile": lambda c=compiled, args=args: c(*args),
            'torch.compile, mode="reduce-overhead"': lambda c=reduce_overhead, args=args: c(*args),
            "PyTorch eager equivalent": lambda f=torch_fn, args=args: f(*args),
        }
        with torch.no_grad():
            res = interleaved(variants, rounds, calls)
        rows.append({"workload": label, "dtype": str(dtype)[6:], "variants": res})
    return rows


# ------------------------------------------------------------------------------------ outputs


def provenance() -> dict:
    from warpgauge.environment import provenance as prov

    return prov()


def markdown(record: dict) -> str:
    p = record["provenance"]
    gpu = (p.get("gpu") or {}).get("name")
    pk = p.get("packages", {})
    lines = [
        "# Host cost of eager calls",
        "",
        f"GPU: {gpu}; torch {pk.get('torch')}, triton {pk.get('triton')}; commit "
        f"{p.get('git_commit')}{' (dirty)' if p.get('git_dirty') else ''}. "
        f"{record['config']['rounds']} interleaved rounds of {record['config']['calls']} calls; "
        "host us per call, median (p10-p90).",
        "",
        "## Public functions vs PyTorch",
        "",
        "| op | shape | variant | host us/call |",
        "|---|---|---|---|",
    ]
    for row in record["public_vs_pytorch"]:
        for name, e in row["variants"].items():
            lines.append(f"| {row['op']} | {row['shape']} | {name} | {_fmt(e)} |")
    lines += ["", "## Breakdown of one eager call", ""]
    for row in record["breakdown"]:
        lines += [
            f"### {row['op']} {row['shape']}",
            "",
            "| component | host us/call |",
            "|---|---|",
        ]
        for name, e in row["components"].items():
            lines.append(f"| {name} | {_fmt(e)} |")
        lines.append("")
    lines += [
        "## One op and a 16-op chain: eager vs compiled",
        "",
        "| workload | variant | host us/call |",
        "|---|---|---|",
    ]
    for row in record["compiled"]:
        for name, e in row["variants"].items():
            lines.append(f"| {row['workload']} | {name} | {_fmt(e)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for host_overhead.{json,md}")
    ap.add_argument("--dtype", choices=["bfloat16", "float16"], default="bfloat16")
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--calls", type=int, default=200, help="calls per sample (host-bound loop)")
    ap.add_argument("--quick", action="store_true", help="8 rounds of 50 calls (a smoke test)")
    ap.add_argument("--smoke-cpu", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    global DEV
    if args.smoke_cpu:  # CI check of the script's logic: interpreter, no compile section
        if os.environ.get("TRITON_INTERPRET") != "1":
            sys.exit("--smoke-cpu needs TRITON_INTERPRET=1 set before the script starts")
        DEV = "cpu"
        args.rounds, args.calls = 2, 2
    else:
        require_cuda("host_overhead.py")
    if args.quick:
        args.rounds, args.calls = 8, 50
    from warpgauge.artifacts import atomic_write_bytes, atomic_write_json, utc_now

    dtype = getattr(torch, args.dtype)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    print("public functions vs PyTorch", flush=True)
    public = public_vs_pytorch(dtype, args.rounds, args.calls)
    print("breakdown", flush=True)
    parts = breakdown(dtype, args.rounds, args.calls)
    print("compiled chains", flush=True)
    chains = [] if args.smoke_cpu else compiled_chains(dtype, args.rounds, args.calls)
    record = {
        "what": "scripts/host_overhead.py: host microseconds per eager call",
        "created_at": utc_now(),
        "provenance": provenance(),
        "config": {
            "dtype": args.dtype,
            "rounds": args.rounds,
            "calls": args.calls,
            "method": "host-bound loop of `calls` calls timed with perf_counter_ns; variants "
            "interleaved in rotating order each round; gc disabled while sampling",
        },
        "public_vs_pytorch": public,
        "breakdown": parts,
        "compiled": chains,
        "seconds": time.time() - t0,
    }
    atomic_write_json(out / "host_overhead.json", record)
    md = markdown(record)
    atomic_write_bytes(out / "host_overhead.md", md.encode())
    print()
    print(md)
    print(f"wrote {out / 'host_overhead.json'} and host_overhead.md in {record['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
