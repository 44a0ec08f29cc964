"""Where one repeated eager call's host time goes, part by part, at the host suite's shapes.

Per op (BF16; softmax, add_rms_norm, row_sum 32x127, add 4096, gemm 64x64x64, int4_linear
1x256x256), us per call: the public call, the same call with its differentiable inputs
requiring grad (autograd records it), the launcher's unrolled hit alone (``hit(args)``: type
checks, guard, alignment, replay), the guarded replay alone (``gfast``: device and hook checks,
allocations, C launches), its allocations alone (the replay's own allocators), its launches
alone (the compiled kernels' launchers with the replay's arguments, into one output), the
guard check alone, one ``data_ptr()``, and PyTorch's equivalent for scale. Variants of one op
are interleaved in rotating order; a cell is the median over ``rounds`` loops of ``calls``
calls (the minimum beside it in the JSON).

On a GPU: ``PYTHONPATH=src python3 scripts/host_parts.py --out FILE.json``. On a machine
without one: ``--fake`` (``tests/fake_gpu.py``: CPU tensors, fake launches that only record
their arguments, no CUDA allocator; compare two versions of the code there, never with the GPU).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import statistics
import sys
import time

CLOCK = time.perf_counter  # --clock thread: this thread's CPU time (a shared CPU machine)


class Swapped:
    """A variant whose calls run inside ``swap()`` (a context manager entered around each loop,
    untimed)."""

    def __init__(self, fn, swap):
        self.fn, self.swap = fn, swap


def _unwrap(variant):
    if isinstance(variant, Swapped):
        return variant.fn, variant.swap()
    return variant, contextlib.nullcontext()


def _loop(variant, calls, sync):
    fn, ctx = _unwrap(variant)
    with ctx:
        sync()
        t0 = CLOCK()
        for _ in range(calls):
            fn()
        t1 = CLOCK()
        sync()
    return (t1 - t0) / calls * 1e6


def python_replays(launcher):
    """``(swap, any)``: ``swap()`` puts the generated Python replay in place of each C replay in
    ``launcher``'s hit entries (the same recipe's checks, allocations and launches) and puts the
    entries back on exit; ``any``: there is a C replay to swap."""
    from warpgauge.kernels import _replay, _replay_hit

    hit = _replay._HITS.get(launcher)
    entries = _replay_hit.namespace(hit)["ENTRIES"] if hit else []
    python = {}  # id of a C replay -> the Python replay of its recipe
    for r in _replay._RECIPES.get(launcher, {}).values():
        if type(r) is not _replay._Recipe:
            continue
        for guarded, c in ((True, r.gfast), (False, r.fast)):
            if not hasattr(c, "__code__"):
                src, ns = _replay._replay_source(r, guarded=guarded)
                exec("\n".join(src), ns)  # noqa: S102 - the module's own generated source
                python[id(c)] = ns["replay"]

    @contextlib.contextmanager
    def swap():
        saved = list(entries)
        entries[:] = [(*e[:3], python.get(id(e[3]), e[3]), *e[4:]) for e in saved]
        try:
            yield
        finally:
            entries[:] = saved

    return swap, bool(python)


def measure(variants, rounds, calls, sync):
    for variant in variants.values():
        fn, ctx = _unwrap(variant)
        with ctx:
            for _ in range(20):
                fn()
    names = list(variants)
    got = {n: [] for n in names}
    gc.disable()
    try:
        for k in range(rounds):
            j = k % len(names)
            for n in names[j:] + names[:j]:
                got[n].append(_loop(variants[n], calls, sync))
    finally:
        gc.enable()
    return {n: {"median_us": statistics.median(s), "min_us": min(s)} for n, s in got.items()}


def _parts(launcher, args, tensors):
    """hit, guarded replay, allocations, launches, guard of ``launcher``'s recipe for
    ``args`` (after it has been replayed through a guard)."""
    from warpgauge.kernels import _replay, _replay_hit

    hit = _replay._HITS.get(launcher)
    if not hit:
        return {}
    out = {"hit": lambda: hit(args)}
    entries = _replay_hit.namespace(hit)["ENTRIES"]
    entry = next((e for e in entries if e[0](*tensors)), None)
    if entry is None:
        return out
    check, replay = entry[0], entry[3]
    if type(replay).__name__ == "_Recipe":  # (code before host10: the entry holds the recipe)
        replay = replay.fast
    ptrs = [t.data_ptr() for t in tensors]
    out["guarded replay"] = lambda: replay(tuple(tensors), *ptrs)
    out["guard check"] = lambda: check(*tensors)
    recipe = next(r for r in _replay._RECIPES[launcher].values() if type(r) is _replay._Recipe)
    if hasattr(replay, "__globals__"):  # the generated Python replay
        g = replay.__globals__
        allocs = [g[k] for k in sorted(g) if k[:1] == "F" and k[1:].isdigit()]
    else:  # the C replay (_clauncher.c's Replay): beside it, the Python one it stands for
        allocs = list(replay.fast)
        src, ns = _replay._replay_source(recipe, guarded=True)
        exec("\n".join(src), ns)  # noqa: S102 - the module's own generated source
        py = ns["replay"]
        out["guarded replay, Python"] = lambda: py(tuple(tensors), *ptrs)

    def alloc():
        for f in allocs:
            f()

    out["allocations"] = alloc
    fresh = [f() for f in allocs]
    every = ptrs + [t.data_ptr() for t in fresh]
    stream = _launch_stream()
    calls = []
    for fast, head, g0, g1, g2, template, slots, descs in recipe.launches:
        if descs:
            return out  # TMA descriptors: not rebuilt here
        a = list(template)
        for pos, src in slots:
            a[pos] = every[src]
        calls.append((fast, (g0, g1, g2, stream, *head, *a)))

    def launches():
        for fast, a in calls:
            fast(*a)

    out["C launches"] = launches
    out["data_ptr()"] = tensors[0].data_ptr
    out["_keep"] = fresh  # (not timed: keeps the launches' output alive)
    return out


def _launch_stream():
    from warpgauge.kernels import _launch

    return _launch._RUNTIME[1](0)


def cases(dev):
    import torch
    import torch.nn.functional as F

    import warpgauge as wg
    from warpgauge.kernels import add, gemm, int4, rmsnorm, row_sum, softmax

    g = torch.Generator().manual_seed(0)

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(torch.bfloat16).to(dev)

    x, r, w = rand(32, 127), rand(32, 127), rand(127)
    f1, f2 = rand(4096), rand(4096)
    a, b = rand(64, 64), rand(64, 64)
    q = wg.quantize_int4(rand(256, 256, scale=0.05))
    v = rand(1, 256)
    wd = q.dequantize()

    def rg(t):
        return t.detach().clone().requires_grad_()

    xg, rgr, wgt, f1g, ag, bg, vg = rg(x), rg(r), rg(w), rg(f1), rg(a), rg(b), rg(v)
    return [  # (op, launcher, args, its tensors in the recipe's order, autograd call, PyTorch)
        ("softmax", softmax.softmax, (x,), [x], lambda: wg.softmax(xg),
         lambda: torch.softmax(x, -1)),
        ("add_rms_norm", rmsnorm.add_rms_norm, (x, r, w, 1e-6), [x, r, w],
         lambda: wg.add_rms_norm(xg, rgr, wgt),
         lambda: F.rms_norm(x + r, (127,), w, 1e-6)),
        ("row_sum", row_sum.row_sum, (x, None), [x], lambda: wg.row_sum(xg),
         lambda: x.sum(-1)),
        ("add", add.add, (f1, f2), [f1, f2], lambda: wg.add(f1g, f2), lambda: torch.add(f1, f2)),
        ("gemm", gemm.gemm, (a, b), [a, b], lambda: wg.gemm(ag, bg), lambda: torch.mm(a, b)),
        ("int4_linear", int4.int4_linear, (v, q), [v, q.packed, q.scales],
         lambda: wg.int4_linear(vg, q), lambda: F.linear(v, wd)),
    ]  # fmt: skip


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--fake", action="store_true", help="CPU machine: tests/fake_gpu.py")
    ap.add_argument("--calls", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", default="", help="comma list of ops, in this order (default: all)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--clock", choices=("wall", "thread"), default="wall")
    args = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.thread_time if args.clock == "thread" else time.perf_counter
    if args.fake:
        os.environ.setdefault("WARPGAUGE_POISON_OUTPUTS", "0")
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
        import fake_gpu

        fake_gpu.install()
    import torch

    import warpgauge as wg

    dev = "cpu" if args.fake else "cuda"
    sync = (lambda: None) if args.fake else torch.cuda.synchronize
    if args.fake:
        torch.set_num_threads(1)
    wanted = [o for o in args.ops.split(",") if o]
    every = {c[0]: c for c in cases(dev)}
    res = {}
    for op in wanted or list(every):  # in the order asked for
        op, launcher, call_args, tensors, grad_call, theirs = every[op]
        public = getattr(wg, op)
        for _ in range(5):
            public(*call_args)
            grad_call()
        variants = {"public": lambda: public(*call_args), "public, autograd": grad_call}
        swap, any_c = python_replays(launcher)
        if any_c:  # the same public calls with the generated Python replay in the hit
            variants["public, Python replay"] = Swapped(variants["public"], swap)
            variants["public, autograd, Python replay"] = Swapped(grad_call, swap)
        variants.update(_parts(launcher, call_args, tensors))
        keep = variants.pop("_keep", None)
        if not args.fake:
            variants["PyTorch"] = theirs
        variants["empty loop"] = lambda: None
        res[op] = measure(variants, args.rounds, args.calls, sync)
        del keep
        print(f"{op:13s} " + "  ".join(f"{k}={v['median_us']:.2f}" for k, v in res[op].items()),
              flush=True)  # fmt: skip
        if args.out:  # after each op: a run cut by its time limit keeps what it measured
            with open(args.out, "w") as fh:
                json.dump({"fake": args.fake, "clock": args.clock, "calls": args.calls,
                           "rounds": args.rounds, "torch": torch.__version__, "ops": res},
                          fh, indent=1)  # fmt: skip
    return res


if __name__ == "__main__":
    main()
