"""What one eager call does on the host, counted on the CPU (no GPU needed).

The cached launch path (``kernels/_launch.py``) is exercised with a real ``JITFunction`` and the
real Triton binder for a CUDA target; only the compiled kernel and the driver's device/stream
getters are fakes that record what they are given. So these tests check, with Triton's own
specialization rules, that a repeated launch skips ``JITFunction.run`` and that every change
Triton specializes on (dtype, 16-byte alignment, an integer equal to 1 or divisible by 16, a
constexpr, a launch option) gets its own compiled kernel: a cached kernel is never used for
arguments it was not compiled for.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction, create_function_from_signature

import warpgauge as wg
from warpgauge.kernels import _launch

_STREAM = 0xBEEF


def _toy(x_ptr, y_ptr, n, stride, BLOCK: tl.constexpr, FLAG: tl.constexpr = 3):
    pass  # never compiled: launches go to the fakes below


class _FakeCompiled:
    """Stands in for a CompiledKernel: records low-level launches."""

    def __init__(self, tag):
        self.tag = tag
        self.function = f"function-{tag}"
        self.packed_metadata = ("packed", tag)
        self.launches = []
        self.metadata_calls = 0

    def run(self, *args):  # CompiledKernel.run is the launcher: (gx, gy, gz, stream, fn, ...)
        self.launches.append(args)

    def launch_metadata(self, grid, stream, *args):
        self.metadata_calls += 1
        return {"grid": grid}


class _Hooks:
    def __init__(self):
        from triton.knobs import HookChain

        self.launch_enter_hook = HookChain()
        self.launch_exit_hook = HookChain(reversed=True)


def make_toy(pyfn, monkeypatch):
    """A real JITFunction of ``pyfn`` with Triton's real binder for sm_90, fake compile/launch."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend

    fn = JITFunction(pyfn)
    backend = CUDABackend(GPUTarget("cuda", 90, 32))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    fn.device_caches[0] = ({}, {}, GPUTarget("cuda", 90, 32), backend, binder)
    compiled = []

    def slow_run(*args, grid, warmup, **kwargs):  # JITFunction.run: "compile", launch, return
        k = _FakeCompiled(len(compiled))
        compiled.append(k)
        g = grid(binder(*args, **kwargs)[0]) if callable(grid) else grid
        k.run(*g, "slow", *args)
        return k

    monkeypatch.setattr(fn, "run", slow_run)
    fn.compiled = compiled
    return fn


@pytest.fixture
def toy(monkeypatch):
    """A real JITFunction with Triton's real binder for sm_90, and fake compile/launch."""
    fn = make_toy(_toy, monkeypatch)
    hooks = _Hooks()
    monkeypatch.setattr(_launch, "_RUNTIME", (lambda: 0, lambda device: _STREAM, hooks))
    monkeypatch.setattr(_launch, "_wrap_enabled", lambda: False)
    monkeypatch.setattr(_launch, "FAST", True)
    _launch.clear_launch_cache()
    fn.hooks = hooks
    yield fn
    _launch.clear_launch_cache()


def _x(n=64, dtype=torch.float16, offset=0):
    return torch.randn(n + offset).to(dtype)[offset:]


def test_repeated_launch_skips_jit_run_and_passes_bound_args(toy):
    x, y = _x(), _x()
    _launch.launch(toy, (3, 2), x, y, 64, 128, BLOCK=32, num_warps=2)
    assert len(toy.compiled) == 1 and _launch.launch_stats()["misses"] == 1
    x2, y2 = _x(), _x()  # new tensors, same dtype and alignment
    _launch.launch(toy, (3, 2), x2, y2, 64, 128, BLOCK=32, num_warps=2)
    _launch.launch(toy, (5,), x2, y2, 64, 128, BLOCK=32, num_warps=2)
    assert len(toy.compiled) == 1, "a repeated launch went through JITFunction.run"
    assert _launch.launch_stats()["hits"] == 2
    first, second = toy.compiled[0].launches[1:]
    k = toy.compiled[0]
    # grid, stream, function, packed metadata, no launch metadata/hooks, then every parameter
    # in signature order with the default of FLAG filled in, as JITFunction.run passes them
    assert first[:9] == (3, 2, 1, _STREAM, k.function, k.packed_metadata, None, None, None)
    assert first[9:11] == (x2, y2) and first[11:] == (64, 128, 32, 3)
    assert second[:3] == (5, 1, 1)


def test_first_launch_on_a_device_is_cached_too(toy, monkeypatch):
    """Before Triton's first launch on a device there is no binder: the normal path builds it,
    and the kernel it returns is cached then, so the second launch is already a hit."""
    caches = toy.device_caches.pop(0)
    slow = toy.run

    def first_run(*args, **kwargs):
        toy.device_caches[0] = caches  # what JITFunction.run's create_binder does
        return slow(*args, **kwargs)

    monkeypatch.setattr(toy, "run", first_run)
    x, y = _x(), _x()
    _launch.launch(toy, (1,), x, y, 64, 128, BLOCK=32)
    _launch.launch(toy, (1,), x, y, 64, 128, BLOCK=32)
    assert len(toy.compiled) == 1 and _launch.launch_stats()["hits"] == 1


@pytest.mark.parametrize(
    "change",
    [
        "dtype",  # *fp16 -> *bf16
        "misaligned",  # data pointer not a multiple of 16 bytes
        "int_is_one",  # n == 1 becomes a constant
        "int_not_div16",  # stride 128 -> 100: loses the divisibility-by-16 attribute
        "int_64bit",  # stride beyond int32
        "constexpr",  # BLOCK
        "default_constexpr",  # FLAG given explicitly with another value
        "option",  # num_warps
    ],
)
def test_every_specialization_gets_its_own_kernel(toy, change):
    base = dict(x=_x(), y=_x(), n=64, stride=128, meta={"BLOCK": 32, "num_warps": 2})
    _launch.launch(toy, (1,), base["x"], base["y"], base["n"], base["stride"], **base["meta"])
    new = dict(base, meta=dict(base["meta"]))
    if change == "dtype":
        new["x"] = _x(dtype=torch.bfloat16)
    elif change == "misaligned":
        new["x"] = _x(offset=1)  # 2-byte offset
        assert new["x"].data_ptr() % 16
    elif change == "int_is_one":
        new["n"] = 1
    elif change == "int_not_div16":
        new["stride"] = 100
    elif change == "int_64bit":
        new["stride"] = 2**33
    elif change == "constexpr":
        new["meta"]["BLOCK"] = 64
    elif change == "default_constexpr":
        new["meta"]["FLAG"] = 4
    else:
        new["meta"]["num_warps"] = 4
    _launch.launch(toy, (1,), new["x"], new["y"], new["n"], new["stride"], **new["meta"])
    assert len(toy.compiled) == 2, f"{change}: reused a kernel compiled for other arguments"
    # and each one is then a hit for its own arguments
    _launch.launch(toy, (1,), base["x"], base["y"], base["n"], base["stride"], **base["meta"])
    _launch.launch(toy, (1,), new["x"], new["y"], new["n"], new["stride"], **new["meta"])
    assert len(toy.compiled) == 2
    assert len(toy.compiled[0].launches) == 2 and len(toy.compiled[1].launches) == 2


def test_values_triton_does_not_specialize_on_share_a_kernel(toy):
    x, y = _x(), _x()
    # n never 1 nor a multiple of 16, stride always a multiple of 16: one specialization
    for n, stride in ((65, 128), (17, 48), (33, 4096)):
        _launch.launch(toy, (1,), x, y, n, stride, BLOCK=32)
    assert len(toy.compiled) == 1
    assert _launch.launch_stats()["hits"] == 2


def test_callable_grid_gets_bound_arguments(toy):
    seen = []

    def grid(meta):
        seen.append(dict(meta))
        return (triton.cdiv(meta["n"], meta["BLOCK"]),)

    for _ in range(2):
        _launch.launch(toy, grid, _x(), _x(), 100, 128, BLOCK=32)
    assert seen[-1]["BLOCK"] == 32 and seen[-1]["n"] == 100 and seen[-1]["FLAG"] == 3
    assert toy.compiled[0].launches[-1][:3] == (4, 1, 1)


def test_launch_hooks_are_honoured(toy):
    x, y = _x(), _x()
    _launch.launch(toy, (1,), x, y, 64, 128, BLOCK=32)
    calls = []
    hook = calls.append
    toy.hooks.launch_enter_hook.add(hook)
    try:
        _launch.launch(toy, (1,), x, y, 64, 128, BLOCK=32)
    finally:
        toy.hooks.launch_enter_hook.remove(hook)
    k = toy.compiled[0]
    assert k.metadata_calls == 1
    launch = k.launches[-1]
    assert launch[6] == {"grid": (1,)} and launch[7] is toy.hooks.launch_enter_hook


def test_normal_path_when_tracing_or_disabled(toy, monkeypatch):
    calls = []

    class _Wrapped:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            return lambda *a, **k: calls.append((self.kernel, grid))

    monkeypatch.setattr(_launch, "wrap_triton", _Wrapped)
    x, y = _x(), _x()
    monkeypatch.setattr(_launch, "_wrap_enabled", lambda: True)  # tracing: the HOP must see it
    _launch.launch(toy, (1,), x, y, 64, 128, BLOCK=32)
    monkeypatch.setattr(_launch, "_wrap_enabled", lambda: False)
    monkeypatch.setattr(_launch, "FAST", False)
    _launch.launch(toy, (1,), x, y, 64, 128, BLOCK=32)
    assert len(calls) == 2 and not toy.compiled
    assert _launch.launch_stats()["slow"] == 2


def test_autotuned_launch_uses_the_tuned_config(toy, monkeypatch):
    configs = [triton.Config({"BLOCK": 16}, num_warps=1), triton.Config({"BLOCK": 64}, num_warps=4)]
    tuner = triton.autotune(configs=configs, key=["n"])(toy)
    slow = []

    class _Wrapped:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            return lambda *a, **k: slow.append(a)

    monkeypatch.setattr(_launch, "wrap_triton", _Wrapped)
    x, y = _x(), _x()
    _launch.launch(tuner, (1,), x, y, 64, 128)
    assert len(slow) == 1 and _launch.launch_stats()["tuned_misses"] == 1  # untuned: Autotuner.run
    # the autotuner's key: the key arguments' values, then every tensor argument's dtype
    tuner.cache[(64, "torch.float16", "torch.float16")] = configs[1]
    for _ in range(3):
        _launch.launch(tuner, (1,), x, y, 64, 128)
    assert len(slow) == 1 and len(toy.compiled) == 1
    args = toy.compiled[0].launches[-1]
    assert args[-2:] == (64, 3)  # BLOCK from the chosen config, FLAG's default
    assert tuner.best_config is configs[1]
    _launch.launch(tuner, (1,), x, y, 65, 128)  # another key: tuned again, never guessed
    assert len(slow) == 2


# ---------------------------------------------------------------------- the public functions


def test_repeated_calls_build_no_plan(monkeypatch):
    from warpgauge.kernels import int4, plans

    built = []
    real_row, real_int4 = plans.RowPlan.for_shape.__func__, int4.Int4Plan.for_shape.__func__
    monkeypatch.setattr(
        plans.RowPlan, "for_shape", classmethod(lambda c, *a: built.append(a) or real_row(c, *a))
    )
    monkeypatch.setattr(
        int4.Int4Plan,
        "for_shape",
        classmethod(lambda c, *a: built.append(a) or real_int4(c, *a)),
    )
    _launch._plan_for.cache_clear()
    int4._plan_for.cache_clear()
    x = torch.randn(3, 40)
    q = wg.quantize_int4(torch.randn(32, 128))
    xq = torch.randn(2, 128, dtype=torch.bfloat16)
    for _ in range(3):
        wg.softmax(x)
        wg.row_sum(x)
        wg.add_rms_norm(x, x, x[0])
        wg.int4_linear(xq, q)
    # one row plan per operator for (3, 40) (the rule is per operator), one INT4 plan for
    # (2, 32, 128); the second and third calls build none
    assert len(built) == 4, built
    wg.softmax(torch.randn(5, 40))
    assert len(built) == 5  # a new shape gets its own plan


def test_every_public_op_replays_a_repeated_call_on_a_fake_gpu():
    """The real launchers and public functions in a process without the interpreter, only the GPU
    faked (``tests/fake_gpu.py``): a repeated call of every op (the TMA GEMM and the INT4 GEMV
    included) is a replay that launches its kernels and runs no argument check and no plan.
    Before: the INT4 launcher's ``packed.view(torch.int32)`` dispatched ``aten.detach``, which the
    recording refused (never replayed: 91 us per call on the H200), and the TMA GEMM's descriptors
    made it refuse every recording; the cooperative plans' ``torch.zeros`` statistics slots made
    every recording of theirs refused (110-130 us per eager call on the H200, run
    20261201-211302-default) until they came from ``_launch.zeros``, a zeroed allocation the
    replay repeats."""
    import json

    env = _env()
    env["PYTHONPATH"] = os.path.dirname(__file__) + os.pathsep + env["PYTHONPATH"]
    out = subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(__file__), "fake_gpu.py"), "census"],
        capture_output=True, text=True, env=env, check=True, timeout=300,
    )  # fmt: skip
    census = json.loads(out.stdout.strip().splitlines()[-1])
    from warpgauge.kernels.plans import RowPlan

    l2 = 60 << 20  # fake_gpu's device: 132 SMs, 60 MiB of L2
    coop = {"softmax_coop": ("softmax", 4, 32769), "add_rms_norm_coop": ("rms", 4, 32769),
            "row_sum_coop": ("row_sum", 128, 50257)}  # fmt: skip
    for name, (op, rows, width) in coop.items():  # the census's cooperative calls are coop plans
        assert RowPlan.for_shape(rows, width, 132, op, l2, 2).kind == "coop", name
    assert set(coop) <= set(census)
    launches = {"int4_linear": 5, "gemm": 5, "gemm_tma": 5}
    assert {"softmax_grad", "add_grad", "row_sum_grad", "add_rms_norm_grad", "gemm_grad",
            "int4_linear_grad"} <= set(census)  # fmt: skip
    for op, c in census.items():
        assert c["replays"] == 5 and c["refused"] == 0, (op, c)
        assert c["checks"] == 0 and c["plans"] == 0, (op, c)
        assert c["launches"] >= launches.get(op, 5), (op, c)
        # one recipe lookup per call, the public call's hit: an autograd call's Function
        # returns what that hit replayed, without a second lookup of its own (_eager.direct)
        assert c["hits"] == 5 and c["direct"] == 0, (op, c)


def test_the_autograd_path_of_a_repeated_call_on_a_fake_gpu():
    """``tests/fake_gpu.py autograd``: repeated gradient-tracking calls of every op replay in
    the public call's hit, and the graph autograd records is the Function's: its saved tensors
    (in-place changes caught), ``add``'s and ``row_sum``'s gradients, ``create_graph=True`` as
    on the registered op, ``eps`` as ``check_eps`` gives it, and no reference cycle."""
    env = _env()
    env["PYTHONPATH"] = os.path.dirname(__file__) + os.pathsep + env["PYTHONPATH"]
    out = subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(__file__), "fake_gpu.py"), "autograd"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0 and "autograd ok" in out.stdout, out.stderr[-3000:]


def test_import_does_not_load_inductor_or_dynamo():
    code = "import sys, warpgauge; print('torch._inductor' in sys.modules, 'torch._dynamo' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), check=True
    )
    assert out.stdout.split() == ["False", "False"], out.stdout


def test_import_costs_at_most_0_3_s_over_torch():
    """CPU seconds of ``import warpgauge`` after ``import torch`` in a fresh process, median of
    three (process time: less sensitive to other load on the machine than wall time)."""
    code = (
        "import time; import torch; t = time.process_time(); import warpgauge; "
        "print(time.process_time() - t)"
    )
    runs = [
        float(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), check=True
            ).stdout
        )
        for _ in range(3)
    ]
    assert statistics.median(runs) <= 0.3, runs


def _env():
    """The environment of a GPU user: no interpreter (under it the kernels load at import)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    src = os.path.join(os.path.dirname(os.path.dirname(__file__)), "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def test_public_functions_trace_to_the_registered_ops_under_dynamo():
    """``_eager.eager`` returns OP while compiling, and the public function then calls the
    registered op: Dynamo traces that with ``fullgraph=True`` (no graph break on the sentinel, no
    data pointer read from a traced tensor), and the result is the eager call's."""
    seen = []

    def backend(gm, example_inputs):
        seen.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
        return gm

    x = torch.randn(3, 40)
    w = torch.randn(40)

    @torch.compile(backend=backend, fullgraph=True)
    def f(x, w):
        y, h = wg.add_rms_norm(x, x, w)
        return wg.softmax(y) + wg.row_sum(h, torch.float32)[:, None] + wg.add(x, x)

    got = f(x, w)
    y, h = wg.add_rms_norm(x, x, w)
    torch.testing.assert_close(got, wg.softmax(y) + wg.row_sum(h)[:, None] + wg.add(x, x))
    ops = set().union(*seen)
    for name in ("add_rms_norm", "softmax", "row_sum", "add"):
        assert f"warpgauge.{name}" in ops, ops


def test_autograd_calls_skip_the_python_apply_layer(monkeypatch):
    """Gradient-tracking calls go through the C++ ``_FunctionBase.apply`` bound to the Function
    (``_eager.fast_apply``), not ``Function.apply``'s Python layer; gradients are the same."""
    from warpgauge import _eager

    x = torch.randn(3, 40, requires_grad=True)
    g = torch.randn(3, 40)
    wg.softmax(x).backward(g)
    want = x.grad.clone()
    x.grad = None

    def boom(*a, **k):
        raise AssertionError("Function.apply's Python layer on the eager autograd path")

    monkeypatch.setattr(_eager.Softmax, "apply", classmethod(boom))
    y = wg.softmax(x)
    assert type(y.grad_fn).__name__ == "SoftmaxBackward"
    y.backward(g)
    assert torch.equal(x.grad, want)


def test_eager_entry_routes_like_route():
    """``_eager.eager`` (routing and signature in one pass) routes every kind of call as
    ``_eager.route`` does: meta tensors (with or without grad) and tensor subclasses to the
    registered op, gradient-tracking plain tensors to the autograd Function, the rest to the
    launcher (whose own validation raises on a non-tensor)."""
    from types import SimpleNamespace

    from torch.testing._internal.two_tensor import TwoTensor

    from warpgauge import _eager

    mod = SimpleNamespace(f=lambda *a: "launched")
    x, m = torch.randn(3, 4), torch.empty(3, 4, device="meta")
    xg, mg = x.clone().requires_grad_(), m.clone().requires_grad_()
    sub = TwoTensor(x, x.clone())
    cases = [(x,), (m,), (mg,), (x, m), (xg,), (xg, m), (sub,), (x, sub), (x, 2.0), (xg, "no")]
    for args in cases:
        want = _eager.route(*[a for a in args if isinstance(a, torch.Tensor)])
        got = _eager.eager(mod, "f", args)
        assert (got if got in (_eager.OP, _eager.GRAD) else _eager.DIRECT) == want, args
    with torch.no_grad():
        assert _eager.eager(mod, "f", (xg,)) == "launched"


def test_compiled_variants_counts_plain_and_autotuned_kernels():
    """A @triton.jit kernel holds its caches itself (its ``fn`` is the Python function); an
    autotuner or heuristics wrapper holds the kernel in ``fn``. Both are counted."""
    from collections import defaultdict

    from warpgauge.kernels._launch import compiled_variants

    class Jit:  # the shape of triton.runtime.JITFunction
        def __init__(self, n):
            self.fn = lambda: None
            self.device_caches = defaultdict(tuple)
            self.device_caches[0] = ({i: object() for i in range(n)}, {}, None, None, None)

    class Wrapper:  # Autotuner / Heuristics
        def __init__(self, fn):
            self.fn = fn

    assert compiled_variants(Jit(2)) == 2
    assert compiled_variants(Wrapper(Wrapper(Jit(3)))) == 3
    assert compiled_variants(lambda: None) == 0
