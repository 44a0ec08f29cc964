"""The real eager host path of every public op on CPU tensors, with only the GPU faked.

Imported in a process *without* ``TRITON_INTERPRET`` (so the kernels are real ``JITFunction``s
and the launchers take the cached-launch and replay paths exactly as on a GPU), it replaces:

- ``JITFunction.run`` (Triton's compile-and-launch) by a fake that builds Triton's real binder for
  sm_90 and returns a fake compiled kernel which records its launches;
- the driver's current-device and stream getters (``_launch._RUNTIME``);
- the device checks that want a CUDA tensor (``_checks.check_device``, ``_replay.ANY_DEVICE``,
  the TMA GEMM's ``device_ok``) and ``device_info`` (132 SMs, like the H200);
- the autotuner: an untuned key takes its first config (the pointer GEMM).

So tests and profiles can count what a call does (plans built, validations run, launches,
replays) and profile it with ``cProfile`` on a machine without a GPU. ``install()`` does it;
``python tests/fake_gpu.py profile OP`` prints a profile of one op's repeated call.
"""

from __future__ import annotations

import os
import sys

STREAM = 0xBEEF


class FakeCompiled:
    """Stands in for a ``CompiledKernel``: ``run`` records ``(grid..., stream, fn, ..., args)``."""

    def __init__(self, name, metadata=None):
        self.name = name
        self.function = f"function-{name}"
        self.packed_metadata = ("packed", name)
        self.metadata = metadata
        self.launches = []

    def run(self, *args):
        self.launches.append(args)

    def launch_metadata(self, grid, stream, *args):
        return {"grid": grid}


COMPILED: list = []  # every FakeCompiled, in order of creation


def install(sm_count: int = 132):
    """Install the fakes (idempotent). Returns the warpgauge module."""
    assert os.environ.get("TRITON_INTERPRET", "0") in ("", "0"), "run without TRITON_INTERPRET"
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction, create_function_from_signature

    import warpgauge as wg
    from warpgauge import _checks, _device
    from warpgauge._lazy import load_kernels
    from warpgauge.kernels import _launch, _replay

    if getattr(install, "done", False):
        return wg
    target = GPUTarget("cuda", 90, 32)
    backend = CUDABackend(target)

    def fake_run(self, *args, grid, warmup, **kwargs):
        if 0 not in self.device_caches:
            binder = create_function_from_signature(self.signature, self.params, backend)
            self.device_caches[0] = ({}, {}, target, backend, binder)
        binder = self.device_caches[0][-1]
        bound, _, _ = binder(*args, **kwargs)
        k = FakeCompiled(self.__name__)
        COMPILED.append(k)
        g = grid(bound) if callable(grid) else grid
        k.run(*g, STREAM, k.function, "first", *bound.values())
        return k

    JITFunction.run = fake_run

    def fake_tune(self, *args, **kwargs):  # the first config, no timing
        self.nargs = dict(zip(self.arg_names, args))
        named = dict(self.nargs, **{k: v for k, v in kwargs.items() if k in self.arg_names})
        key = [named[k] for k in self.keys if k in named]
        key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
        config = self.configs[0]
        self.cache[tuple(key)] = config
        self.best_config = config
        return self.fn.run(*args, **kwargs, **config.all_kwargs())

    Autotuner.run = fake_tune
    from triton import knobs

    _launch._RUNTIME = (lambda: 0, lambda device: STREAM, knobs.runtime)
    _checks.check_device = lambda name, t: None
    _replay.ANY_DEVICE = True
    info = _device.DeviceInfo("fake-h200", sm_count, 60 << 20, 228 << 10, False)
    _device.device_info = lambda device: info
    load_kernels()
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("warpgauge.kernels.") and hasattr(
            mod, "device_info"
        ):
            mod.device_info = _device.device_info
    from warpgauge.kernels import _launch as L
    from warpgauge.kernels import gemm_tma

    L.device_info = _device.device_info
    gemm_tma.device_ok = lambda a: True
    torch.manual_seed(0)
    install.done = True
    return wg


def calls():
    """name -> zero-argument callable: one small public call per op (the host-mode shapes)."""
    import torch

    import warpgauge as wg

    bf = torch.bfloat16
    x = torch.randn(32, 128).to(bf)
    r = torch.randn(32, 128).to(bf)
    w = torch.randn(128).to(bf)
    a, b = torch.randn(64, 64).to(bf), torch.randn(64, 64).to(bf)
    a2, b2 = torch.randn(128, 64).to(bf), torch.randn(64, 128).to(bf)
    q = wg.quantize_int4(torch.randn(256, 256).to(bf))
    v = torch.randn(1, 256).to(bf)
    xg = x.detach().requires_grad_()
    # cooperative plans (a row's chunks on several programs; zeroed statistics slots): 4x32769
    # (softmax, add_rms_norm: COOP_FEW_NARROW), 128x50257 (row_sum: COOP_ROW_SUM)
    xc, rc, wc = torch.randn(4, 32769).to(bf), torch.randn(4, 32769).to(bf), torch.randn(32769)
    xs = torch.randn(128, 50257).to(bf)
    wc = wc.to(bf)
    return {
        "softmax": lambda: wg.softmax(x),
        "add_rms_norm": lambda: wg.add_rms_norm(x, r, w),
        "row_sum": lambda: wg.row_sum(x),
        "add": lambda: wg.add(x, r),
        "gemm": lambda: wg.gemm(a, b),
        "gemm_tma": lambda: wg.gemm(a2, b2),
        "int4_linear": lambda: wg.int4_linear(v, q),
        "row_sum_fp32": lambda: wg.row_sum(x, torch.float32),
        "softmax_coop": lambda: wg.softmax(xc),
        "add_rms_norm_coop": lambda: wg.add_rms_norm(xc, rc, wc),
        "row_sum_coop": lambda: wg.row_sum(xs),
        # autograd records these: the launcher's hit replays them and the Functions' forwards
        # return that result (no second lookup through _eager.direct)
        "softmax_grad": lambda: wg.softmax(xg),
        "add_rms_norm_grad": lambda: wg.add_rms_norm(xg, r, w),
        "row_sum_grad": lambda: wg.row_sum(xg),
        "add_grad": lambda: wg.add(xg, r),
        "gemm_grad": lambda: wg.gemm(a.detach().requires_grad_(), b),
        "int4_linear_grad": lambda: wg.int4_linear(v.detach().requires_grad_(), q),
    }


def census(n: int = 5) -> dict:
    """Per op: what ``n`` repeated calls (after 3 warm-up calls) did: replays, launches of the
    fake compiled kernels, argument checks (``check_tensor``), plans built, calls of the
    launchers' unrolled hits (``hits``: recipe lookups) and of ``_eager.direct`` (the autograd
    Functions' own lookup, taken only when the public call's hit did not replay)."""
    import json

    install()
    from warpgauge import _eager
    from warpgauge.kernels import _replay, int4, plans

    counts = {"checks": 0, "plans": 0, "hits": 0, "direct": 0}
    _eager.direct = counted_fn(_eager.direct, counts, "direct")

    def counted(fn, key):
        def wrapper(*a, **kw):
            counts[key] += 1
            return fn(*a, **kw)

        return wrapper

    for mod in list(sys.modules.values()):
        name = getattr(mod, "__name__", "")
        if name.startswith("warpgauge.kernels.") and hasattr(mod, "check_tensor"):
            mod.check_tensor = counted(mod.check_tensor, "checks")
    for cls in (plans.RowPlan, int4.Int4Plan):
        cls.for_shape = classmethod(counted(cls.for_shape.__func__, "plans"))
    out = {}
    for op, fn in calls().items():
        for _ in range(3):
            fn()
        for launcher, hit in list(_replay._HITS.items()):
            if hit and not getattr(hit, "counted", False):
                _replay._HITS[launcher] = counted_fn(hit, counts, "hits")
                _replay._HITS[launcher].counted = True
        before = dict(_replay.STATS, launches=sum(len(k.launches) for k in COMPILED), **counts)
        for _ in range(n):
            fn()
        after = dict(_replay.STATS, launches=sum(len(k.launches) for k in COMPILED), **counts)
        out[op] = {k: after[k] - before[k] for k in after}
    print(json.dumps(out))
    return out


def counted_fn(fn, counts, key):
    def wrapper(*a, **kw):
        counts[key] += 1
        return fn(*a, **kw)

    return wrapper


def autograd_checks() -> str:
    """The autograd path of repeated public calls (the hit replays, the Function's forward
    returns that result): the graph it records, what its backward computes where that needs
    no kernel (``add``: the gradient itself; ``row_sum``: its expansion), the saved tensors'
    in-place check, ``create_graph=True`` as on the registered op, and no reference cycle (the
    output and its graph are freed with garbage collection off). Raises on a failure."""
    import gc
    import weakref

    import torch

    import warpgauge as wg
    from warpgauge import _eager
    from warpgauge.kernels import _replay

    install()
    bf = torch.bfloat16
    x, r, w = torch.randn(32, 128).to(bf), torch.randn(32, 128).to(bf), torch.randn(128).to(bf)
    xg, rg, wg_ = (t.clone().requires_grad_() for t in (x, r, w))
    direct = _eager.direct
    seen = []
    _eager.direct = lambda *a: seen.append(a[0]) or direct(*a)
    ops = torch.ops.warpgauge

    def replayed(fn):
        """``fn()``'s result, checked to come from a hit that replayed it for autograd."""
        for _ in range(4):  # seen, recorded, a replay in the forward (learns the guard), ...
            fn()
        seen.clear()
        before = _replay.STATS["replays"]
        out = fn()
        assert _replay.STATS["replays"] == before + 1 and not seen, (fn, seen)
        return out

    gc.disable()
    try:
        # add: the gradient itself to both inputs, as the registered op's _add_bwd
        y = replayed(lambda: wg.add(xg, rg))
        assert type(y.grad_fn).__name__ == "AddBackward" and y.requires_grad
        assert y.grad_fn.needs_input_grad == (True, True, False)
        g = torch.randn(32, 128).to(bf)
        y.backward(g)
        assert torch.equal(xg.grad, g) and torch.equal(rg.grad, g)
        # row_sum: the expansion of the gradient in x's dtype
        xg.grad = None
        s = replayed(lambda: wg.row_sum(xg, torch.float32))
        gs = torch.randn(32)
        s.backward(gs)
        assert xg.grad.dtype == bf and torch.equal(xg.grad, gs.to(bf)[:, None].expand(32, 128))
        # softmax: the output saved (version-checked), freed with its graph (no cycle)
        y = replayed(lambda: wg.softmax(xg))
        assert type(y.grad_fn).__name__ == "SoftmaxBackward"
        (saved,) = y.grad_fn.saved_tensors  # the output itself (an output unpacks as a new object)
        assert saved.data_ptr() == y.data_ptr() and saved._version == y._version
        assert y.grad_fn.next_functions[0][0] is not None
        del saved
        ref, node = weakref.ref(y), weakref.ref(y.grad_fn)
        del y
        assert ref() is None and node() is None, "a reference cycle keeps the output alive"
        y = replayed(lambda: wg.softmax(xg))
        y.mul_(1)
        try:
            y.backward(torch.ones_like(y))
            raise AssertionError("the in-place change of a saved output went unnoticed")
        except RuntimeError as e:
            assert "modified by an inplace operation" in str(e), e
        # create_graph=True: the registered backward op, on both paths
        y = replayed(lambda: wg.softmax(xg))
        (gx,) = torch.autograd.grad(y, xg, torch.ones_like(y), create_graph=True)
        (gx_op,) = torch.autograd.grad(ops.softmax(xg), xg, torch.ones_like(y), create_graph=True)
        assert gx.requires_grad == gx_op.requires_grad and type(gx.grad_fn) is type(gx_op.grad_fn)
        # add_rms_norm: two outputs, h and weight saved, eps kept, an unused output's grad None
        y, h = replayed(lambda: wg.add_rms_norm(xg, rg, wg_))
        node = y.grad_fn
        assert type(node).__name__ == "AddRmsNormBackward" and h.grad_fn is node
        assert node.saved_tensors[0].data_ptr() == h.data_ptr() and node.saved_tensors[1] is wg_
        assert node.eps == 1e-6 and type(node.eps) is float
        backward, grads = _eager.AddRmsNorm.backward, []
        _eager.AddRmsNorm.backward = staticmethod(
            lambda ctx, dy, dh: grads.append(dy) or (backward(ctx, dy, dh))
        )
        h.sum().backward(retain_graph=True)  # y unused: its grad arrives as None, not zeros
        _eager.AddRmsNorm.backward = staticmethod(backward)
        assert grads == [None] and xg.grad is not None
        refs = [weakref.ref(t) for t in (y, h)] + [weakref.ref(node)]
        del y, h, node
        for k in COMPILED:  # the fake kernels' records of the backward's (unreplayed) launches
            k.launches.clear()
        assert all(ref() is None for ref in refs), "a reference cycle keeps the outputs alive"
        with torch.no_grad():  # an int eps (a grad-mode call passes check_eps's 1.0 on)
            for _ in range(3):
                wg.add_rms_norm(xg, rg, wg_, 1)
        y, h = replayed(lambda: wg.add_rms_norm(xg, rg, wg_, 1))  # ... replayed: as check_eps
        assert y.grad_fn.eps == 1.0 and type(y.grad_fn.eps) is float
        # gemm and int4_linear: the saved operands, the frozen INT4 weight
        a, b = torch.randn(64, 64).to(bf).requires_grad_(), torch.randn(64, 64).to(bf)
        c = replayed(lambda: wg.gemm(a, b))
        assert c.grad_fn.saved_tensors[0] is a and c.grad_fn.needs_input_grad == (
            True,
            False,
            False,
        )
        q = wg.quantize_int4(torch.randn(256, 256).to(bf))
        v = torch.randn(1, 256).to(bf).requires_grad_()
        o = replayed(lambda: wg.int4_linear(v, q))
        assert o.grad_fn.saved_tensors[0] is q.packed and o.grad_fn.group_size == q.group_size
    finally:
        gc.enable()
        _eager.direct = direct
    print("autograd ok")
    return "ok"


def main(argv):
    import cProfile
    import pstats
    import time

    wg = install()
    from warpgauge.kernels import _replay

    what = argv[1] if len(argv) > 1 else "all"
    if what == "census":
        return census()
    if what == "autograd":
        return autograd_checks()
    table = calls()
    names = list(table) if what == "all" else [what]
    for n in names:
        fn = table[n]
        for _ in range(5):
            fn()
        before = dict(_replay.STATS)
        t0 = time.perf_counter()
        for _ in range(2000):
            fn()
        us = (time.perf_counter() - t0) / 2000 * 1e6
        d = {k: _replay.STATS[k] - before[k] for k in before}
        print(f"{n:14s} {us:7.2f} us/call  replay stats {d}")
        if len(names) == 1:
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(2000):
                fn()
            pr.disable()
            pstats.Stats(pr).sort_stats("tottime").print_stats(25)
    return wg


if __name__ == "__main__":
    main(sys.argv)
