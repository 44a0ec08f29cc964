"""Host time per public eager call on a machine without a GPU: the real host path, GPU faked.

Runs in a process without ``TRITON_INTERPRET`` and installs ``tests/fake_gpu.py`` (Triton's real
binder for sm_90, fake compiled kernels whose launch records its arguments, fake device/stream
getters), so every public call takes the cached-launch and replay paths exactly as on a GPU, minus
the GPU's own work (``cuLaunchKernelEx``, the CUDA caching allocator). These are CPU-machine,
fake-GPU numbers: use them to compare two versions of the code on one machine, never as H200
numbers. Tensors are CPU tensors, so the "PyTorch" rows include CPU compute: not comparable.

Per op at the harness's host-mode shapes (BF16): the forward call (a replay), the forward with an
input that requires grad (autograd records it), and a forward + backward. Variants are
interleaved in rotating order; each cell is the minimum over ``rounds`` loops of ``calls`` calls
(the least disturbed loop on a shared machine) with the median beside it.

Usage: PYTHONPATH=src python3 scripts/host_cpu.py [--calls 2000 --rounds 7 --out FILE.json]
(works on any checkout that has ``tests/fake_gpu.py``: run it on two commits to compare them).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("host_cpu.py: run without TRITON_INTERPRET (the fake GPU replaces the interpreter)")
os.environ.setdefault("WARPGAUGE_POISON_OUTPUTS", "0")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))


def cases():
    """(op, forward, autograd forward, forward + backward, PyTorch on CPU)."""
    import torch
    import torch.nn.functional as F

    import warpgauge as wg

    g = torch.Generator().manual_seed(0)
    bf = torch.bfloat16

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(bf)

    x, r, w = rand(32, 127), rand(32, 127), rand(127)
    f1, f2 = rand(4096), rand(4096)
    a, b = rand(64, 64), rand(64, 64)
    q = wg.quantize_int4(rand(256, 256, scale=0.05))
    v = rand(1, 256)

    def grad(t):
        return t.detach().clone().requires_grad_()

    xg, rg, wgt, f1g, ag, bg, vg = grad(x), grad(r), grad(w), grad(f1), grad(a), grad(b), grad(v)

    def fb(fn, *args):
        def run():
            out = fn(*args)
            out = out[0] if isinstance(out, tuple) else out
            out.backward(torch.ones_like(out))

        return run

    def add_then_rms(x, r, w, eps=1e-6):
        h = x + r
        return F.rms_norm(h, (h.shape[-1],), w, eps), h

    return [
        ("softmax", lambda: wg.softmax(x), lambda: wg.softmax(xg), fb(wg.softmax, xg),
         lambda: torch.softmax(x, -1)),
        ("add_rms_norm", lambda: wg.add_rms_norm(x, r, w), lambda: wg.add_rms_norm(xg, rg, wgt),
         fb(wg.add_rms_norm, xg, rg, wgt), lambda: add_then_rms(x, r, w)),
        ("row_sum", lambda: wg.row_sum(x), lambda: wg.row_sum(xg), fb(wg.row_sum, xg),
         lambda: x.sum(-1)),
        ("add", lambda: wg.add(f1, f2), lambda: wg.add(f1g, f2), fb(wg.add, f1g, f2),
         lambda: torch.add(f1, f2)),
        ("gemm", lambda: wg.gemm(a, b), lambda: wg.gemm(ag, bg), fb(wg.gemm, ag, bg),
         lambda: torch.mm(a, b)),
        ("int4_linear", lambda: wg.int4_linear(v, q), lambda: wg.int4_linear(vg, q),
         fb(wg.int4_linear, vg, q), None),
    ]  # fmt: skip


CLOCK = time.perf_counter  # --clock thread: time.thread_time (this thread's CPU time)


def measure(variants: dict, rounds: int, calls: int) -> dict:
    for fn in variants.values():
        for _ in range(20):
            fn()
    names = list(variants)
    samples = {n: [] for n in names}
    gc.disable()
    try:
        for k in range(rounds):
            j = k % len(names)
            for n in names[j:] + names[:j]:
                fn = variants[n]
                t0 = CLOCK()
                for _ in range(calls):
                    fn()
                samples[n].append((CLOCK() - t0) / calls * 1e6)
    finally:
        gc.enable()
    return {n: {"min_us": min(s), "median_us": statistics.median(s)} for n, s in samples.items()}


def breakdown(args):
    """``host_cost.breakdown`` (public call, recipe replay, allocations, C launches, launcher
    without replay, argument check, plan lookup) through the fake GPU, as host2 ran it."""
    import torch

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import host_cost

    host_cost.DEV, host_cost.DEV_T = "cpu", torch.device("cpu")
    host_cost.sync = lambda: None
    torch.cuda.current_device = lambda: 0
    out = host_cost.breakdown(args.calls, args.rounds)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)
    return out


def hit_ab(args):
    """The forward and the autograd forward of each op with the launchers' unrolled hits off
    (``_replay_hit.build`` installs none: the general path) and on, alternating per round."""
    from warpgauge.kernels import _replay, _replay_hit

    build = _replay_hit.build
    res = {}
    try:
        for _ in range(args.rounds):
            for mode in ("general", "hit"):
                _replay._HITS.clear()
                _replay_hit.build = build if mode == "hit" else (lambda *a: None)
                for op, fwd, gfwd, _fb, _theirs in cases():
                    for kind, fn in (("forward", fwd), ("autograd forward", gfwd)):
                        cell = measure({kind: fn}, 1, args.calls)[kind]["min_us"]
                        res.setdefault(f"{op} {kind}", {}).setdefault(mode, []).append(cell)
    finally:
        _replay_hit.build = build
    out = {}
    for name, v in res.items():
        g, h = min(v["general"]), min(v["hit"])
        out[name] = {"general_us": g, "hit_us": h}
        print(f"  {name:30s} general {g:6.2f}  hit {h:6.2f}  {h - g:+.2f} us", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)
    return out


def pieces(args):
    """Micro-timings (us per call, min of ``rounds`` loops) of the alternatives weighed for the
    replay and the autograd Functions: allocation calls, signature layouts, ctx saving."""
    import functools
    import timeit

    import torch

    bf, dev = torch.bfloat16, torch.device("cpu")
    x = torch.randn(32, 127).to(bf)
    xg = x.clone().requires_grad_()

    def flat(args):
        sig = []
        for a in args:
            sig += (a.dtype, a.shape, a.stride(), a.get_device(), a.data_ptr() & 15)
        return tuple(sig)

    def nested(args):
        sig = []
        for a in args:
            sig.append((a.dtype, a.shape, a.stride(), a.get_device(), a.data_ptr() & 15))
        return tuple(sig)

    def function(save):
        class F(torch.autograd.Function):
            @staticmethod
            def forward(ctx, t):
                y = torch.empty(32, 127, dtype=bf)
                if save == "method":
                    ctx.save_for_backward(y)
                elif save == "attribute":
                    ctx.to_save = (y,)
                return y

            @staticmethod
            def backward(ctx, g):
                return g

        return torch._C._FunctionBase.__dict__["apply"].__get__(None, F)

    sizes = torch.Size((32, 127))
    guards = torch._C._dynamo.guards
    r, w = x.clone(), torch.randn(127).to(bf)
    check3 = guards.TensorGuards(x, r, w, dynamic_dims_sizes=None, dynamic_dims_strides=None).check
    per = {nested((x, r, w)): 1}
    packed = torch.randint(0, 100, (256, 32), dtype=torch.int32)
    scales = torch.randn(2, 256).to(bf)

    def int4_function(bundled):
        class F(torch.autograd.Function):
            @staticmethod
            def forward(ctx, t, *weight):
                y = torch.empty(32, 127, dtype=bf)
                p, sc, g = weight[0] if bundled else weight
                ctx.group_size = g
                ctx.save_for_backward(p, sc)
                return y

            @staticmethod
            def backward(ctx, g):
                return (g,) + (None,) * (1 if bundled else 3)

        return torch._C._FunctionBase.__dict__["apply"].__get__(None, F)

    items = {
        "torch.empty(32, 127, dtype=, device=)": lambda: torch.empty(32, 127, dtype=bf, device=dev),
        "torch.empty((32, 127), dtype=, device=)": lambda: torch.empty(
            (32, 127), dtype=bf, device=dev
        ),
        "torch.empty(torch.Size, dtype=, device=)": lambda: torch.empty(
            sizes, dtype=bf, device=dev
        ),
        "partial(torch.empty, 32, 127, dtype=, device=)()": functools.partial(
            torch.empty, 32, 127, dtype=bf, device=dev
        ),
        "partial(_dynamo.guards._empty_strided_cpu, sizes, strides, dtype)()": functools.partial(
            guards._empty_strided_cpu, (32, 127), (127, 1), bf
        ),
        "x.new_empty(32, 127)": lambda: x.new_empty(32, 127),
        "torch.empty_like(x)": lambda: torch.empty_like(x),
        "signature of (x,), one tuple per tensor": lambda: nested((x,)),
        "signature of (x,), flat": lambda: flat((x,)),
        "key of (x, r, w) and its dict lookup": lambda: per.get(nested((x, r, w))),
        "TensorGuards.check(x, r, w)": functools.partial(check3, x, r, w),
        "Function apply (x, packed, scales, 128), saves packed, scales": functools.partial(
            int4_function(False), xg, packed, scales, 128
        ),
        "Function apply (x, (packed, scales, 128)), saves packed, scales": functools.partial(
            int4_function(True), xg, (packed, scales, 128)
        ),
        "Function apply, forward only allocates": functools.partial(function(None), xg),
        "... + ctx.save_for_backward(y)": functools.partial(function("method"), xg),
        "... + ctx.to_save = (y,)": functools.partial(function("attribute"), xg),
        "torch.softmax(x) (CPU compute)": lambda: torch.softmax(x, -1),
        "torch.softmax(xg) (CPU compute, autograd records)": lambda: torch.softmax(xg, -1),
    }
    out = {}
    for name, fn in items.items():
        for _ in range(200):
            fn()
        n = max(args.calls * 5, 1)
        out[name] = min(timeit.repeat(fn, number=n, repeat=args.rounds)) / n * 1e6
        print(f"  {out[name]:7.3f}  {name}", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)
    return out


def cycle(args):
    """``wg.softmax`` called in turn on 1, 2, 4 and 6 shapes (32..37 rows of 127), us per call:
    a launcher with more recorded signatures than its hit keeps guards for."""
    import torch

    import warpgauge as wg

    out = {}
    variants = {}
    for n in (1, 2, 4, 6):
        xs = [torch.randn(32 + i, 127).to(torch.bfloat16) for i in range(n)]

        def run(xs=xs):
            for t in xs:
                wg.softmax(t)

        variants[f"{n} shapes in turn"] = run
    for name, cell in measure(variants, args.rounds, args.calls).items():
        n = int(name.split()[0])
        out[name] = {k: v / n for k, v in cell.items()}
        print(f"  {name:20s} {out[name]['min_us']:.2f} us per call", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=None)
    ap.add_argument("--ops", default="", help="comma list of ops (default: all)")
    ap.add_argument(
        "--clock",
        choices=("wall", "thread"),
        default="wall",
        help="thread: time each loop by this thread's CPU time (time.thread_time), which a "
        "machine shared with other processes disturbs less than the wall clock",
    )
    ap.add_argument(
        "--breakdown",
        action="store_true",
        help="scripts/host_cost.py's breakdown (parts of a call) instead, GPU faked",
    )
    ap.add_argument(
        "--pieces",
        action="store_true",
        help="instead: micro-timings of the alternatives weighed in docs/host-cost.md",
    )
    ap.add_argument(
        "--hit-ab",
        action="store_true",
        help="instead: each op with the unrolled replay hit off, then on, in one process",
    )
    ap.add_argument(
        "--cycle",
        action="store_true",
        help="instead: softmax on 1, 2, 4, 6 shapes in turn (more signatures than guards)",
    )
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.thread_time if args.clock == "thread" else time.perf_counter
    import fake_gpu

    fake_gpu.install()
    import torch

    # one intra-op thread: the PyTorch rows' CPU compute would otherwise wake worker threads
    # that compete with the measured (host-path, single-threaded) calls on a shared machine
    torch.set_num_threads(1)

    if args.breakdown:
        return breakdown(args)
    if args.hit_ab:
        return hit_ab(args)
    if args.pieces:
        return pieces(args)
    if args.cycle:
        return cycle(args)

    from warpgauge.kernels import _replay

    only = set(filter(None, args.ops.split(",")))
    res = {"torch": torch.__version__, "python": sys.version.split()[0], "clock": args.clock,
           "calls": args.calls, "rounds": args.rounds, "ops": {}}  # fmt: skip
    for op, fwd, gfwd, fwdbwd, theirs in cases():
        if only and op not in only:
            continue
        variants = {"forward": fwd, "autograd forward": gfwd}
        if theirs is not None:
            variants["PyTorch (CPU, compute included)"] = theirs
        before = _replay.STATS["replays"]
        row = measure(variants, args.rounds, args.calls)
        row["fwd+bwd"] = measure({"fwd+bwd": fwdbwd}, max(args.rounds // 2, 1),
                                 max(args.calls // 4, 1))["fwd+bwd"]  # fmt: skip
        row["replays"] = _replay.STATS["replays"] - before
        res["ops"][op] = row
        cells = "  ".join(f"{k}={v['min_us']:.2f}" for k, v in row.items() if isinstance(v, dict))
        print(f"  {op:13s} {cells}", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(res, fh, indent=1)
    return res


if __name__ == "__main__":
    main()
