"""Replay of eager launcher calls (``kernels/_replay.py``), counted on the CPU.

The launchers here are small stand-ins that do what the real ones do (allocate with
``_launch.empty``, launch with ``_launch.launch``) around the real-binder toy kernel of
``test_host_path``; the device check is opened to CPU tensors, everything else is the real code.
"""

from __future__ import annotations

import pytest
import torch
import triton.language as tl
from torch.utils._python_dispatch import TorchDispatchMode
from triton.tools.tensor_descriptor import TensorDescriptor

from warpgauge.kernels import _launch, _replay, _replay_hit

from .test_host_path import _STREAM, make_toy, toy  # noqa: F401  (toy is a fixture)


def _toy_desc(desc, out_ptr, n, BLOCK: tl.constexpr):
    pass  # never compiled: a kernel taking a TMA descriptor, for the real binder


def _run(launcher, *args):
    return launcher(*args)


@pytest.fixture
def replay(toy, monkeypatch):  # noqa: F811
    monkeypatch.setattr(_replay, "ANY_DEVICE", True)
    monkeypatch.setattr(_replay, "ENABLED", True)
    _replay.clear()
    calls = []

    def launcher(x, y, scale):
        calls.append(scale)
        out = _launch.empty(x.shape, x.dtype, x.device)
        _launch.launch(toy, (x.shape[0], 1), x.view(x.shape), out, x.numel(), x.stride(0), BLOCK=32)
        return out

    yield toy, launcher, calls
    _replay.clear()


def _x(*shape, dtype=torch.float16):
    return torch.randn(shape).to(dtype)


def test_third_call_is_a_replay_with_new_pointers(replay):
    kern, launcher, calls = replay
    for _ in range(2):  # 1st: the kernel compiles (incomplete recording); 2nd: recorded
        _replay.call(launcher, (_x(4, 16), _x(4, 16), 2.0), _run)
    assert _replay.STATS["recorded"] == 1 and len(calls) == 2
    x, y = _x(4, 16), _x(4, 16)
    out = _replay.call(launcher, (x, y, 2.0), _run)
    assert len(calls) == 2, "the launcher ran although a recording existed"
    assert _replay.STATS["replays"] == 1
    assert out.shape == x.shape and out.dtype == x.dtype
    k = kern.compiled[0]
    launch = k.launches[-1]
    assert launch[:9] == (4, 1, 1, _STREAM, k.function, k.packed_metadata, None, None, None)
    # pointers as integers: the new input's and the fresh output's own
    assert launch[9:] == (x.data_ptr(), out.data_ptr(), 64, 16, 32, 3)


@pytest.mark.parametrize(
    "change",
    ["shape", "dtype", "stride", "misaligned", "scalar", "scalar_type"],
)
def test_another_signature_runs_the_launcher(replay, change):
    _, launcher, calls = replay
    for _ in range(2):
        _replay.call(launcher, (_x(4, 16), _x(4, 16), 2.0), _run)
    x, y, s = _x(4, 16), _x(4, 16), 2.0
    if change == "shape":
        x = _x(5, 16)
    elif change == "dtype":
        x = _x(4, 16, dtype=torch.bfloat16)
    elif change == "stride":
        x = _x(4, 20)[:, :16]
    elif change == "misaligned":
        x = _x(4 * 16 + 1)[1:].view(4, 16)
    elif change == "scalar":
        s = 3.0
    else:
        s = 2  # an int where a float was recorded
    before = len(calls)
    _replay.call(launcher, (x, y, s), _run)
    assert len(calls) == before + 1, f"{change}: replayed a recording of other inputs"


def test_a_signature_seen_once_is_not_recorded(replay, monkeypatch):
    _, launcher, calls = replay
    recorded = []
    monkeypatch.setattr(_replay, "_record", lambda *a: recorded.append(a) or a[2](a[0], *a[1]))
    for n in range(1, 6):  # five row counts, each seen once (a decode loop's growing shapes)
        _replay.call(launcher, (_x(n, 16), _x(n, 16), 2.0), _run)
    assert not recorded and len(calls) == 5
    _replay.call(launcher, (_x(5, 16), _x(5, 16), 2.0), _run)
    assert len(recorded) == 1


def test_aliased_inputs_are_never_replayed(replay):
    _, launcher, calls = replay
    for _ in range(2):
        _replay.call(launcher, (_x(4, 16), _x(4, 16), 2.0), _run)
    x = _x(4, 16)
    _replay.call(launcher, (x, x, 2.0), _run)  # same signature, but one buffer twice
    assert len(calls) == 3 and _replay.STATS["refused"] == 1


def test_hooks_refuse_a_replay(replay):
    kern, launcher, calls = replay
    for _ in range(2):
        _replay.call(launcher, (_x(4, 16), _x(4, 16), 2.0), _run)
    hook = lambda metadata: None  # noqa: E731
    kern.hooks.launch_enter_hook.add(hook)
    try:
        _replay.call(launcher, (_x(4, 16), _x(4, 16), 2.0), _run)
    finally:
        kern.hooks.launch_enter_hook.remove(hook)
    assert len(calls) == 3


@pytest.mark.parametrize("extra", ["zero_", "copy", "offset_view", "no_launch"])
def test_launchers_doing_more_than_allocate_and_launch_are_never_replayed(toy, extra, monkeypatch):  # noqa: F811
    monkeypatch.setattr(_replay, "ANY_DEVICE", True)
    _replay.clear()
    calls = []

    def launcher(x):
        calls.append(1)
        out = _launch.empty(x.shape, x.dtype, x.device)
        src = x
        if extra == "zero_":
            out.zero_()
        elif extra == "copy":
            src = x.clone()
        elif extra == "offset_view":
            src = x[1:]
        if extra != "no_launch":
            _launch.launch(toy, (1,), src, out, x.numel(), 16, BLOCK=32)
        return out

    for _ in range(4):
        _replay.call(launcher, (_x(4, 16),), _run)
    assert len(calls) == 4 and _replay.STATS["replays"] == 0
    assert _replay.STATS["never"] == 1
    _replay.clear()


def test_a_slice_at_an_allocations_first_element_is_replayed(toy, monkeypatch):  # noqa: F811
    """gemm's pad path: a buffer with padded rows, sliced back to the row length (``[:, :C]``,
    an ``aten.slice``), launched on and returned. Recorded and replayed: the launch gets the fresh
    allocation's pointer, the result is the same view of it (shape, strides) in new memory."""
    monkeypatch.setattr(_replay, "ANY_DEVICE", True)
    _replay.clear()
    calls = []

    def launcher(x):
        calls.append(1)
        buf = _launch.empty((x.shape[0], 24), x.dtype, x.device)[:, : x.shape[1]]
        _launch.launch(toy, (1,), x, buf, x.numel(), 16, BLOCK=32)
        return buf

    outs = [_replay.call(launcher, (_x(4, 17),), _run) for _ in range(4)]
    assert len(calls) == 2 and _replay.STATS["replays"] == 2 and _replay.STATS["never"] == 0
    for out in outs:
        assert out.shape == (4, 17) and out.stride() == (24, 1)
    assert len({o.data_ptr() for o in outs}) == 4
    assert toy.compiled[0].launches[-1][10] == outs[-1].data_ptr()
    _replay.clear()


def test_results_that_are_views_and_tuples_are_rebuilt(toy, monkeypatch):  # noqa: F811
    monkeypatch.setattr(_replay, "ANY_DEVICE", True)
    _replay.clear()

    def launcher(x):
        y = _launch.empty((x.shape[0] * x.shape[1],), x.dtype, x.device)
        h = _launch.empty(x.shape, x.dtype, x.device)
        _launch.launch(toy, (1,), x, y, x.numel(), 16, BLOCK=32)
        _launch.launch(toy, (2,), x, h, x.numel(), 16, BLOCK=32)
        return y.view(x.shape), h, None

    for _ in range(3):
        y, h, none = _replay.call(launcher, (_x(4, 16),), _run)
    assert _replay.STATS["replays"] == 1
    assert y.shape == (4, 16) and y.stride() == (16, 1) and h.shape == (4, 16) and none is None
    assert y.data_ptr() != h.data_ptr()
    assert toy.compiled[0].launches[-1][10] == h.data_ptr()
    assert toy.compiled[0].launches[-2][10] == y.data_ptr()
    _replay.clear()


def test_int4_weight_arguments_are_part_of_the_signature(toy, monkeypatch):  # noqa: F811
    """An Int4Weight's tensors are inputs of the recording (their pointers are remapped) and its
    group size is part of the signature."""
    from types import SimpleNamespace

    monkeypatch.setattr(_replay, "ANY_DEVICE", True)
    _replay.clear()
    calls = []

    def launcher(x, w):
        calls.append(1)
        out = _launch.empty(x.shape, x.dtype, x.device)
        _launch.launch(toy, (1,), w.packed, out, w.group_size, 16, BLOCK=32)
        return out

    def weight(group_size=128):
        return SimpleNamespace(packed=_x(8, 16), scales=_x(8, 1), group_size=group_size)

    for _ in range(3):
        w = weight()
        _replay.call(launcher, (_x(4, 16), w), _run)
    assert len(calls) == 2 and _replay.STATS["replays"] == 1
    assert toy.compiled[0].launches[-1][9] == w.packed.data_ptr()
    _replay.call(launcher, (_x(4, 16), weight(group_size=64)), _run)
    assert len(calls) == 3
    _replay.clear()


def test_an_argument_holding_its_own_pointer_is_never_replayed(monkeypatch):
    """A TMA TensorDescriptor carries the tensor it was built on: a replay would reuse it and
    launch on the recorded call's memory (seen on the H200: the TMA GEMM replayed into a stale
    output). Only tensors (rebuilt from the new pointers) and plain scalars may be recorded."""
    from types import SimpleNamespace

    class Descriptor:
        def __init__(self, t):
            self.base = t

    monkeypatch.setattr(_launch, "_RUNTIME", (lambda: 0, None, None))
    x = _x(4, 16)
    out = torch.empty_like(x)
    entry = SimpleNamespace(fast=lambda *a: None, head=())
    rec = SimpleNamespace(
        launches=[(entry, (1, 1, 1), (x, out, 16, 0.5))], allocs=[out], zeroed=set()
    )
    assert _replay._Recipe.build(rec, [x], out) is not None  # control: these arguments record
    rec.launches = [(entry, (1, 1, 1), (Descriptor(x), out, 16, 0.5))]
    assert _replay._Recipe.build(rec, [x], out) is None


@pytest.mark.parametrize("extra", [None, torch.float32, True])
def test_none_dtype_and_str_arguments_replay(replay, extra):
    """``row_sum(x, None)`` and ``row_sum(x, torch.float32)``: None and a dtype are part of the
    signature (a second, narrower tuple of launch constants once shadowed the signature's and made
    every call with such an argument run the launcher)."""
    _, launcher, calls = replay

    def with_extra(x, y, scale, extra):
        return launcher(x, y, scale)

    for _ in range(3):
        _replay.call(with_extra, (_x(4, 16), _x(4, 16), 2.0, extra), _run)
    assert _replay.STATS["recorded"] == 1 and _replay.STATS["replays"] == 1
    assert len(calls) == 2


@pytest.fixture
def desc_launcher(toy, monkeypatch):  # noqa: F811  (toy installs the fake runtime)
    """A launcher that builds a TMA descriptor on its input (a transposed view, as the GEMM does
    for a column-major operand) and sets its block shape afterwards (as ``with_blocks`` does)."""
    monkeypatch.setattr(_replay, "ANY_DEVICE", True)
    _replay.clear()
    kern = make_toy(_toy_desc, monkeypatch)
    calls = []

    def launcher(x, offset=0):
        calls.append(1)
        out = _launch.empty((x.shape[1],), x.dtype, x.device)
        s = x.t()[:, offset:]
        d = TensorDescriptor(s, list(s.shape), list(s.stride()), [16, 16])
        d.block_shape = [16, 32]
        _launch.launch(kern, (2,), d, out, x.numel(), BLOCK=32)
        d.block_shape = [64, 64]  # changed after the launch: the recording keeps what launched
        return out

    yield kern, launcher, calls
    _replay.clear()


def test_descriptor_arguments_are_rebuilt_on_each_replay(desc_launcher):
    """A TMA descriptor holds its base tensor: each replay launches a fresh descriptor on the
    new call's tensor, with the recorded shape, strides, block shape and padding (replaying the
    recorded descriptor launched on the recorded call's memory on the H200: stale outputs)."""
    kern, launcher, calls = desc_launcher
    xs = [_x(48, 32).t() for _ in range(4)]  # column-major views: described as their transpose
    for x in xs[:3]:
        _replay.call(launcher, (x,), _run)
    assert len(calls) == 2 and _replay.STATS["replays"] == 1
    recorded = kern.compiled[0].launches[-2][9]  # the recorded call's (cached launch) descriptor
    _replay.call(launcher, (xs[3],), _run)
    assert len(calls) == 2 and _replay.STATS["replays"] == 2
    for x, launch in zip(xs[2:], kern.compiled[0].launches[-2:]):
        d = launch[9]
        assert type(d) is TensorDescriptor and d is not recorded
        assert d.base.data_ptr() == x.data_ptr(), "a replay launched on another call's memory"
        assert (d.shape, d.strides, d.block_shape, d.padding) == (
            [48, 32],
            [32, 1],
            [16, 32],
            "zero",
        )
        assert launch[10] != recorded.base.data_ptr()


def test_a_descriptor_on_memory_the_recipe_cannot_rebuild_is_never_replayed(desc_launcher):
    _, launcher, calls = desc_launcher
    for _ in range(4):  # a base 16 elements into the input: not a view at its first element
        _replay.call(launcher, (_x(48, 32).t(), 16), _run)
    assert len(calls) == 4 and _replay.STATS["never"] == 1


def test_eager_entry_keys_int4_weights_by_their_tensors_and_group_size(toy, monkeypatch):  # noqa: F811
    """``_eager.eager`` builds an Int4Weight's part of the signature inline: a weight of other
    scales (dtype), group size or shape runs the launcher; the same kind of weight replays with
    the new weight's pointers."""
    from types import SimpleNamespace

    import warpgauge as wg
    from warpgauge import _eager

    monkeypatch.setattr(_replay, "ANY_DEVICE", True)
    _replay.clear()
    calls = []

    def launcher(x, w):
        calls.append(1)
        out = _launch.empty(x.shape, x.dtype, x.device)
        _launch.launch(toy, (1,), w.packed, out, w.group_size, 16, BLOCK=32)
        return out

    mod = SimpleNamespace(f=launcher)
    x = _x(4, 16)

    def q(group_size=128, dtype=torch.bfloat16, n=32):
        return wg.quantize_int4(torch.randn(n, 256).to(dtype), group_size=group_size)

    for _ in range(3):
        w = q()
        _eager.eager(mod, "f", (x, w))
    assert len(calls) == 2 and _replay.STATS["replays"] == 1
    assert toy.compiled[0].launches[-1][9] == w.packed.data_ptr()
    for other in (q(group_size=64), q(dtype=torch.float16), q(n=48)):
        before = len(calls)
        _eager.eager(mod, "f", (x, other))
        assert len(calls) == before + 1, "replayed a recording of another weight"
    _replay.clear()


def test_a_replacing_hook_refuses_a_replay(replay):
    """A profiler may replace the hook chain instead of adding to it (``knobs.runtime.
    launch_enter_hook = fn``): the replay compares the runtime's hook with the chain bound at
    recording, so a replaced one is seen too."""
    kern, launcher, calls = replay
    for _ in range(2):
        _replay.call(launcher, (_x(4, 16), _x(4, 16), 2.0), _run)
    chain = kern.hooks.launch_exit_hook
    kern.hooks.launch_exit_hook = lambda metadata: None
    try:
        _replay.call(launcher, (_x(4, 16), _x(4, 16), 2.0), _run)
    finally:
        kern.hooks.launch_exit_hook = chain
    assert len(calls) == 3 and _replay.STATS["refused"] == 1
    _replay.call(launcher, (_x(4, 16), _x(4, 16), 2.0), _run)  # the chain is back: replays
    assert len(calls) == 3 and _replay.STATS["replays"] == 1


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(func)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("poison", [False, True])
def test_a_replay_runs_one_allocation_per_output_and_no_other_tensor_op(toy, monkeypatch, poison):  # noqa: F811
    """What a replay does, counted by a dispatch mode: one ``aten.empty`` per recorded output
    (the pre-bound ``torch.empty`` of the GPU path, or ``_launch.empty`` with its NaN fill in
    the tests' poison mode), nothing else; a 0-d output keeps its shape."""
    monkeypatch.setattr(_replay, "ANY_DEVICE", True)
    monkeypatch.setattr(_launch, "POISON", poison)
    _replay.clear()
    calls = []

    def launcher(x):
        calls.append(1)
        y = _launch.empty(x.shape, x.dtype, x.device)
        s = _launch.empty((), torch.float32, x.device)
        _launch.launch(toy, (1,), x, y, x.numel(), 16, BLOCK=32)
        _launch.launch(toy, (1,), x, s, x.numel(), 16, BLOCK=32)
        return y, s

    for _ in range(2):
        _replay.call(launcher, (_x(4, 16),), _run)
    x = _x(4, 16)
    with _Ops() as ops:
        y, s = _replay.call(launcher, (x,), _run)
    assert len(calls) == 2 and _replay.STATS["replays"] == 1
    want = [torch.ops.aten.empty.memory_format] * 2
    if poison:
        want = [want[0], torch.ops.aten.fill_.Scalar] * 2
    assert ops.seen == want
    assert y.shape == x.shape and y.dtype == x.dtype and s.shape == () and s.dtype == torch.float32
    # an FP16 and an FP32 output: two specializations, each launched on its fresh output
    assert [k.launches[-1][10] for k in toy.compiled] == [y.data_ptr(), s.data_ptr()]
    _replay.clear()


@pytest.mark.parametrize("poison", [False, True])
def test_a_zeroed_scratch_allocation_is_replayed_zeroed(toy, monkeypatch, poison):  # noqa: F811
    """A launcher's ``_launch.zeros`` scratch (the cooperative plans' statistics slots) is a
    zeroed allocation of the recipe: each replay allocates it with ``aten.zeros`` (never
    poisoned, never the uninitialised allocator entry) and launches on it; a ``torch.zeros``
    the launcher makes itself has no source and is never replayed."""
    monkeypatch.setattr(_replay, "ANY_DEVICE", True)
    monkeypatch.setattr(_launch, "POISON", poison)
    _replay.clear()
    calls = []

    def launcher(x):
        calls.append(1)
        y = _launch.empty(x.shape, x.dtype, x.device)
        slots = _launch.zeros(x.shape[0] * 2, torch.int64, x.device)
        _launch.launch(toy, (1,), x, y, x.numel(), 16, BLOCK=32)
        _launch.launch(toy, (1,), x, slots, x.numel(), 16, BLOCK=32)
        return y

    for _ in range(2):
        _replay.call(launcher, (_x(4, 16),), _run)
    x = _x(4, 16)
    with _Ops() as ops:
        y = _replay.call(launcher, (x,), _run)
    assert len(calls) == 2 and _replay.STATS["replays"] == 1
    empty = [torch.ops.aten.empty.memory_format]
    if poison:
        empty.append(torch.ops.aten.fill_.Scalar)
    assert ops.seen == empty + [torch.ops.aten.zeros.default], ops.seen
    slot_ptr = toy.compiled[-1].launches[-1][10]
    assert slot_ptr not in (0, y.data_ptr())

    def own_zeros(x):
        y = _launch.empty(x.shape, x.dtype, x.device)
        slots = torch.zeros(8, dtype=torch.int64)
        _launch.launch(toy, (1,), x, slots, x.numel(), 16, BLOCK=32)
        return y

    _replay.clear()
    for _ in range(3):
        _replay.call(own_zeros, (_x(4, 16),), _run)
    assert _replay.STATS["replays"] == 0 and _replay.STATS["never"] == 1
    _replay.clear()


@pytest.fixture
def eager_toy(toy, monkeypatch):  # noqa: F811
    """A toy launcher ``mod.f(x, y, scale)`` called through the eager entry until it replays."""
    from types import SimpleNamespace

    from warpgauge import _eager

    monkeypatch.setattr(_replay, "ANY_DEVICE", True)
    _replay.clear()
    calls = []

    def launcher(x, y, scale):
        calls.append(1)
        out = _launch.empty(x.shape, x.dtype, x.device)
        _launch.launch(toy, (1,), x, out, x.numel(), 16, BLOCK=32)
        return out

    mod = SimpleNamespace(f=launcher)
    for _ in range(2):  # the first call compiles, the second records
        _eager.eager(mod, "f", (_x(4, 16), _x(4, 16), 0.5))
    assert _replay.STATS["recorded"] == 1 and callable(_replay._HITS.get(launcher))
    mod.toy = toy
    yield _eager, mod, calls
    _replay.clear()


def test_a_repeated_eager_call_is_the_unrolled_hit(eager_toy, monkeypatch):
    """A replay hit through the eager entry: the launcher's unrolled hit alone (no
    ``_replay._signature`` pass, no ``_replay.lookup``, no launcher call); a call it does not
    take goes the general way; ``WARPGAUGE_REPLAY=0``'s flag stops replays at once."""
    _eager, mod, calls = eager_toy
    counts = {"signature": 0, "lookup": 0}

    def counted(fn, key):
        def wrapper(*a):
            counts[key] += 1
            return fn(*a)

        return wrapper

    monkeypatch.setattr(_eager, "_signature", counted(_replay._signature, "signature"))
    monkeypatch.setattr(_eager, "_lookup", counted(_replay.lookup, "lookup"))
    x = _x(4, 16)
    out = _eager.eager(mod, "f", (x, _x(4, 16), 0.5))
    assert counts == {"signature": 0, "lookup": 0} and len(calls) == 2
    assert _replay.STATS["replays"] == 1 and out.shape == x.shape
    # the pointers the hit read for the signature, and the fresh output's, reach the launch
    assert mod.toy.compiled[0].launches[-1][9:] == (x.data_ptr(), out.data_ptr(), 64, 16, 32, 3)
    assert mod.f and _eager.direct(mod.f, x, _x(4, 16), 0.5).shape == x.shape  # the same hit
    assert counts == {"signature": 0, "lookup": 0} and _replay.STATS["replays"] == 2
    _eager.eager(mod, "f", (x, _x(4, 16), 2))  # an int where a float was recorded: general
    assert counts == {"signature": 1, "lookup": 1} and len(calls) == 3
    _eager.eager(mod, "f", (x, x, 0.5))  # aliased inputs: the hit's recipe refuses
    assert len(calls) == 4 and _replay.STATS["refused"] == 1 and counts["signature"] == 1
    monkeypatch.setattr(_replay, "ENABLED", False)
    _eager.eager(mod, "f", (x, _x(4, 16), 0.5))
    assert len(calls) == 5 and _replay.STATS["replays"] == 2


def test_the_unrolled_hit_routes_like_the_general_path(eager_toy, monkeypatch):
    """With the hit installed, every kind of call routes as ``_replay._signature`` says: meta
    tensors and subclasses to the op, gradient-tracking plain tensors to autograd (grad mode
    on), CPU tensors without the test seam and other kinds of arguments to the launcher; the
    replays it does are the general path's (same key, same tensors)."""
    from torch.testing._internal.two_tensor import TwoTensor

    _eager, mod, calls = eager_toy
    x, m = _x(4, 16), torch.empty(4, 16, device="meta", dtype=torch.float16)
    xg, mg = x.clone().requires_grad_(), m.clone().requires_grad_()
    sub = TwoTensor(x, x.clone())
    cases = [(x, m), (m, x), (xg, m), (mg, x), (xg, x), (x, xg), (sub, x), (x, sub), (xg, sub),
             (x, "no"), (x, None), (x, _x(4, 16), 2)]  # fmt: skip
    for args in cases:
        args = (*args, 0.5)[:3] if len(args) == 2 else args
        want = _signature_route(args)
        before = len(calls)
        got = _eager.eager(mod, "f", args)
        kind = got if got is _eager.OP or got is _eager.GRAD else _eager.DIRECT
        assert kind == want, args
        if kind == _eager.DIRECT:
            assert len(calls) == before + 1, args  # no replay of another kind of call
    with torch.no_grad():  # grad mode off: a gradient-tracking tensor replays
        before = _replay.STATS["replays"]
        _eager.eager(mod, "f", (xg, _x(4, 16), 0.5))
        assert _replay.STATS["replays"] == before + 1
    monkeypatch.setattr(_replay, "ANY_DEVICE", False)  # CPU tensors: never replayed
    before = len(calls)
    _eager.eager(mod, "f", (_x(4, 16), _x(4, 16), 0.5))
    assert len(calls) == before + 1


def _signature_route(args):
    from warpgauge import _eager

    sig = _replay._signature(args, [], torch.is_grad_enabled())
    return {id(_replay.NEEDS_OP): _eager.OP, id(_replay.NEEDS_GRAD): _eager.GRAD}.get(
        id(sig), _eager.DIRECT
    )


def test_an_unrolled_hit_that_differs_from_the_signature_is_not_installed(
    toy,  # noqa: F811
    monkeypatch,
):
    """``_replay_hit.build`` checks its unrolled key against ``_replay._signature``'s on the
    call it is built from: a key missing a field (here the alignment) installs no hit."""
    from warpgauge.kernels import _replay_hit

    monkeypatch.setattr(_replay, "ANY_DEVICE", True)
    args = (_x(4, 16), 0.5, torch.float32, None)
    tensors = []
    sig = _replay._signature(args, tensors)
    per = _replay._RECIPES.setdefault("launcher", {})
    try:
        assert callable(_replay_hit.build("launcher", args, sig, tensors))
        monkeypatch.setattr(_replay_hit, "_TENSOR", _replay_hit._TENSOR.rsplit(",", 1)[0])
        assert _replay_hit.build("launcher", args, sig, tensors) is None
        assert _replay_hit.build("launcher", (*args, object()), sig, tensors) is None
    finally:
        per.clear()
        _replay.clear()


def test_signature_routes_and_keys_every_kind_of_argument(monkeypatch):
    """``_replay._signature`` is the one signature (eager entry, ``direct``, ``call``): a meta
    tensor or a subclass needs the op (before grad), a gradient-tracking plain tensor needs
    autograd only when grad is on, a CPU tensor or an unknown object is never replayed; equal
    arguments give equal keys and each differing field a different key."""
    from torch.testing._internal.two_tensor import TwoTensor

    import warpgauge as wg

    x, m = _x(4, 16), torch.empty(4, 16, device="meta")
    xg = x.clone().requires_grad_()
    S = _replay._signature
    assert S((x,), []) is None  # a CPU tensor without the test seam
    assert S((xg, m), [], True) is _replay.NEEDS_OP
    assert S((TwoTensor(x, x.clone()), xg), [], True) is _replay.NEEDS_OP
    assert S((xg, x), [], True) is _replay.NEEDS_GRAD and S((x, "no"), [], True) is None
    monkeypatch.setattr(_replay, "ANY_DEVICE", True)
    q = wg.quantize_int4(torch.randn(32, 256).to(torch.bfloat16))
    tensors = []
    key = S((xg, q, None, torch.float32, 2, 0.5, True), tensors)
    assert type(key) is tuple and hash(key) is not None
    assert [t.data_ptr() for t in tensors] == [xg.data_ptr(), q.packed.data_ptr(),
                                                q.scales.data_ptr()]  # fmt: skip
    assert key == S((x.clone(), wg.quantize_int4(torch.randn(32, 256).to(torch.bfloat16)),
                     None, torch.float32, 2, 0.5, True), [])  # fmt: skip
    others = [
        (_x(4, 17), q, None, torch.float32, 2, 0.5, True),
        (xg, wg.quantize_int4(torch.randn(32, 256).to(torch.bfloat16), group_size=64),
         None, torch.float32, 2, 0.5, True),
        (xg, q, torch.float32, torch.float32, 2, 0.5, True),
        (xg, q, None, torch.float16, 2, 0.5, True),
        (xg, q, None, torch.float32, 2.0, 0.5, True),
        (xg, q, None, torch.float32, 2, 0.25, True),
        (xg, q, None, torch.float32, 2, 0.5, 1),
    ]  # fmt: skip
    assert all(S(o, []) != key for o in others)


@pytest.mark.parametrize("n", [2, 3, 5])
def test_any_two_aliased_inputs_refuse_a_replay(toy, monkeypatch, n):  # noqa: F811
    """The replay's aliasing check, pairwise up to four inputs and a set above: the first and
    the last input sharing a buffer refuse the replay; distinct buffers replay."""
    monkeypatch.setattr(_replay, "ANY_DEVICE", True)
    _replay.clear()
    calls = []

    def launcher(*xs):
        calls.append(1)
        out = _launch.empty(xs[0].shape, xs[0].dtype, xs[0].device)
        for x in xs:
            _launch.launch(toy, (1,), x, out, x.numel(), 16, BLOCK=32)
        return out

    for _ in range(3):
        _replay.call(launcher, tuple(_x(4, 16) for _ in range(n)), _run)
    assert len(calls) == 2 and _replay.STATS["replays"] == 1
    xs = [_x(4, 16) for _ in range(n)]
    _replay.call(launcher, (*xs[:-1], xs[0]), _run)
    assert len(calls) == 3 and _replay.STATS["refused"] == 1
    _replay.clear()


class _SeenOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def test_replay_allocates_through_the_allocator_entry_unless_a_mode_could_see_it(
    toy,  # noqa: F811
    monkeypatch,
):
    """Without the test's NaN poisoning, a replay allocates with the allocator's own entry
    (``_launch.direct_empty``: sizes, strides and dtype as recorded), and with ``torch.empty``
    whenever torch.empty could behave otherwise: a dispatch mode active (it sees the ``empty``),
    deterministic algorithms on (torch.empty fills the memory with NaN)."""
    monkeypatch.setattr(_replay, "ANY_DEVICE", True)
    monkeypatch.setattr(_launch, "POISON", False)
    direct = []
    real = _launch.direct_empty

    def counting(shape, strides, dtype, dev, current):
        fn = real(shape, strides, dtype, dev, current)
        assert fn is not None, "no direct allocator for a CPU allocation"
        return lambda: direct.append((shape, strides, dtype)) or fn()

    monkeypatch.setattr(_launch, "direct_empty", counting)
    _replay.clear()

    def launcher(x):
        y = _launch.empty((x.shape[0], 3 * x.shape[1]), torch.float32, x.device)
        h = _launch.empty(x.shape, x.dtype, x.device)
        _launch.launch(toy, (1,), x, y, x.numel(), 16, BLOCK=32)
        _launch.launch(toy, (2,), x, h, x.numel(), 16, BLOCK=32)
        return y.t(), h  # a view: rebuilt from the fresh allocation

    ref = None
    for _ in range(3):
        ref = launcher(_x(4, 16))
        y, h = _replay.call(launcher, (_x(4, 16),), _run)
    assert _replay.STATS["replays"] == 1 and len(direct) == 2, _replay.STATS
    assert direct == [((4, 48), (48, 1), torch.float32), ((4, 16), (16, 1), torch.float16)]
    for got, want in ((y, ref[0]), (h, ref[1])):
        assert (got.shape, got.stride(), got.dtype, got.device) == (
            want.shape,
            want.stride(),
            want.dtype,
            want.device,
        )
        assert got.storage_offset() == want.storage_offset() and not got.requires_grad
    launched = {a for k in toy.compiled for launch in k.launches for a in launch}
    assert y.data_ptr() in launched and h.data_ptr() in launched

    seen = _SeenOps()
    with seen:
        _replay.call(launcher, (_x(4, 16),), _run)
    assert _replay.STATS["replays"] == 2 and len(direct) == 2, "a mode active: torch.empty"
    assert seen.ops.count(torch.ops.aten.empty.memory_format) == 2

    prev = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        y, h = _replay.call(launcher, (_x(4, 16),), _run)
    finally:
        torch.use_deterministic_algorithms(prev)
    assert _replay.STATS["replays"] == 3 and len(direct) == 2
    assert torch.isnan(y).all() and torch.isnan(h).all(), "torch.empty's deterministic fill"
    _replay.call(launcher, (_x(4, 16),), _run)
    assert _replay.STATS["replays"] == 4 and len(direct) == 4
    _replay.clear()


def test_the_allocator_entry_is_used_only_on_the_recorded_device():
    cpu, f32 = torch.device("cpu"), torch.float32
    alloc = _launch.direct_empty((3, 5), (5, 1), f32, cpu, 0)
    t = alloc()
    assert (t.shape, t.stride(), t.dtype, t.device) == ((3, 5), (5, 1), f32, cpu)
    assert _launch.direct_empty((), (), f32, cpu, 0)().shape == ()
    assert _launch.direct_empty((3, 5), (5, 1), f32, torch.device("cuda", 1), 0) is None
    assert _launch.direct_empty((3, 5), (5, 1), f32, torch.device("meta"), 0) is None


def _entries(launcher):
    return _replay_hit.namespace(_replay._HITS[launcher])["ENTRIES"]


def test_the_hits_guard_replays_only_what_the_key_would(eager_toy):
    """The hit's guarded section (``_replay_hit._guarded``: Dynamo's C tensor guard, then the
    scalars and the alignment) replays a call only where the key lookup would replay the same
    recipe: every change of the key runs the launcher or the other signature's recipe; what the
    key does not hold (requires_grad with grad mode off, a Parameter) replays through a guard
    of its own."""
    _eager, mod, calls = eager_toy
    f = mod.f
    x = _x(4, 16)
    out = _eager.eager(mod, "f", (x, _x(4, 16), 0.5))  # a key-lookup replay learns its guard
    entries = _entries(f)
    assert len(entries) == 1 and out.shape == (4, 16)
    replays = _replay.STATS["replays"]
    out = _eager.eager(mod, "f", (x, _x(4, 16), 0.5))
    assert _replay.STATS["replays"] == replays + 1 and len(calls) == 2
    assert mod.toy.compiled[0].launches[-1][9:11] == (x.data_ptr(), out.data_ptr())
    changed = {
        "shape": (_x(5, 16), _x(4, 16), 0.5),
        "dtype": (_x(4, 16, dtype=torch.bfloat16), _x(4, 16), 0.5),
        "stride": (_x(4, 20)[:, :16], _x(4, 16), 0.5),
        "misaligned": (_x(4 * 16 + 1)[1:].view(4, 16), _x(4, 16), 0.5),
        "second tensor": (x, _x(4, 17), 0.5),
        "scalar": (x, _x(4, 16), 0.25),
        "scalar type": (x, _x(4, 16), 1),
        "meta": (x, torch.empty(4, 16, device="meta", dtype=torch.float16), 0.5),
    }
    for name, args in changed.items():
        before = len(calls)
        got = _eager.eager(mod, "f", args)
        if name == "meta":
            assert got is _eager.OP, name
        else:
            assert len(calls) == before + 1, f"{name}: replayed another signature's recipe"
    with torch.inference_mode():  # other dispatch keys: the key lookup, then a guard of its own
        before = _replay.STATS["replays"]
        _eager.eager(mod, "f", (x, _x(4, 16), 0.5))
        _eager.eager(mod, "f", (x, _x(4, 16), 0.5))
        assert _replay.STATS["replays"] == before + 2
    n = len(calls)
    xg, w = x.clone().requires_grad_(), torch.nn.Parameter(_x(4, 16), requires_grad=False)
    with torch.no_grad():
        for args in [(xg, _x(4, 16), 0.5), (x, w, 0.5)] * 2:
            out = _eager.eager(mod, "f", args)
            assert mod.toy.compiled[0].launches[-1][9:11] == (args[0].data_ptr(), out.data_ptr())
    assert len(calls) == n and len(entries) == 4  # inference, requires_grad, Parameter, plain
    # grad on: autograd records the call; the guard learned above replays it for the Function
    got = _eager.eager(mod, "f", (xg, _x(4, 16), 0.5))
    assert type(got) is list and len(calls) == n
    assert mod.toy.compiled[0].launches[-1][9:11] == (xg.data_ptr(), got[0].data_ptr())
    assert _eager.eager(mod, "f", (xg, _x(5, 16), 0.5)) is _eager.GRAD  # no guard: the Function


def test_a_call_autograd_records_is_replayed_once_by_the_hit(eager_toy, monkeypatch):
    """Grad mode on and an input requiring grad: the hit tries its guards (those a grad-off
    replay of such tensors learned: the Function's forward makes that replay) and returns the
    replayed result in a one-element list for the public function to hand to its Function (no
    second lookup there); anything else routes to autograd as before (GRAD), never to a key
    lookup (a dead functorch wrapper has no data pointer) nor to a direct result."""
    _eager, mod, calls = eager_toy
    counts = {"signature": 0, "lookup": 0}

    def counted(fn, key):
        def wrapper(*a):
            counts[key] += 1
            return fn(*a)

        return wrapper

    monkeypatch.setattr(_eager, "_signature", counted(_replay._signature, "signature"))
    monkeypatch.setattr(_eager, "_lookup", counted(_replay.lookup, "lookup"))
    xg, y = _x(4, 16).requires_grad_(), _x(4, 16)
    assert _eager.eager(mod, "f", (xg, y, 0.5)) is _eager.GRAD  # no guard for xg yet
    with torch.no_grad():  # what the Function's forward does: a replay that learns the guard
        _eager.direct(mod.f, xg, y, 0.5)
    n, replays = len(calls), _replay.STATS["replays"]
    got = _eager.eager(mod, "f", (xg, y, 0.5))
    assert type(got) is list and len(got) == 1 and got[0].shape == (4, 16)
    assert not got[0].requires_grad and got[0].grad_fn is None  # autograd records it later
    assert len(calls) == n and _replay.STATS["replays"] == replays + 1
    assert mod.toy.compiled[0].launches[-1][9:11] == (xg.data_ptr(), got[0].data_ptr())
    assert counts == {"signature": 0, "lookup": 0}
    refused = _replay.STATS["refused"]
    assert _eager.eager(mod, "f", (xg, xg, 0.5)) is _eager.GRAD  # aliased: the Function runs it
    assert _replay.STATS["refused"] == refused  # (counted once, by the Function's own call)
    assert _eager.eager(mod, "f", (xg, y, 0.25)) is _eager.GRAD  # another scalar: no guard
    assert _eager.eager(mod, "f", (_x(3, 16).requires_grad_(), y, 0.5)) is _eager.GRAD
    assert len(calls) == n and counts == {"signature": 0, "lookup": 0}
    meta = torch.empty(4, 16, device="meta", dtype=torch.float16)
    assert _eager.eager(mod, "f", (xg, meta, 0.5)) is _eager.OP  # (the general path says so)
    with torch.no_grad():  # grad off: the same tensors replay directly, as before
        out = _eager.eager(mod, "f", (xg, y, 0.5))
        assert type(out) is torch.Tensor and len(calls) == n
    monkeypatch.setattr(_replay, "ENABLED", False)  # replay off: autograd, then the launcher
    assert _eager.eager(mod, "f", (xg, y, 0.5)) is _eager.GRAD


def test_the_hit_keeps_a_few_recent_guards_and_replays_each_signature_with_its_recipe(eager_toy):
    _eager, mod, calls = eager_toy
    from warpgauge.kernels import _replay_hit

    rows = range(1, _replay_hit.MAX_ENTRIES + 3)
    for _ in range(3):  # each row count: seen, recorded, then replayed by key
        for r in rows:
            out = _eager.eager(mod, "f", (_x(r, 16), _x(r, 16), 0.5))
    entries = _entries(mod.f)
    assert len(entries) == _replay_hit.MAX_ENTRIES
    n = len(calls)
    for r in [*rows, *rows]:
        x = _x(r, 16)
        out = _eager.eager(mod, "f", (x, _x(r, 16), 0.5))
        assert out.shape == (r, 16), "another signature's recipe"
        assert (x.data_ptr(), out.data_ptr()) in [k.launches[-1][9:11] for k in mod.toy.compiled]
    assert len(calls) == n
    assert _entries(mod.f) is entries and len(entries) == _replay_hit.MAX_ENTRIES
    # all entries in use: a key-lookup replay replaces one only every EVICT_EVERY-th time ...
    kept = list(entries)
    _replay_hit.namespace(_replay._HITS[mod.f])["STATE"][0] = (
        0  # count from here: 2 misses per cycle
    )
    for _ in range(_replay_hit.EVICT_EVERY // 2 - 1):
        for r in rows:
            _eager.eager(mod, "f", (_x(r, 16), _x(r, 16), 0.5))
    assert entries == kept, "evicted a guard the cycle needs next"
    # ... so a new signature that keeps coming takes the first place within EVICT_EVERY calls
    n = len(calls)
    for _ in range(3 + _replay_hit.EVICT_EVERY):
        x = _x(9, 16)
        _eager.eager(mod, "f", (x, _x(9, 16), 0.5))
    assert len(calls) == n + 2  # seen, recorded, then replays
    assert entries[0][0](x, _x(9, 16)) and len(entries) == _replay_hit.MAX_ENTRIES
    assert not any(e[0](_x(9, 16), _x(9, 16)) for e in kept), "9 rows was never guarded before"


def test_a_launchers_registered_workspace_replays_as_a_constant_on_its_stream(monkeypatch):
    """A persistent scratch tensor a launcher owns (int4_tile's split-K counters, registered in
    ``_launch.WORKSPACES`` with its stream) is recorded as a constant pointer, and the replay
    checks the current stream; an unregistered tensor, or workspaces of two streams, is never
    replayed."""
    from types import SimpleNamespace

    monkeypatch.setattr(_launch, "_RUNTIME", (lambda: 0, None, None))
    monkeypatch.setattr(_launch, "WORKSPACES", {})
    x = _x(4, 16)
    out, ws, ws2 = torch.empty_like(x), torch.zeros(8, dtype=torch.int32), torch.zeros(8)
    entry = SimpleNamespace(fast=lambda *a: None, head=())
    rec = SimpleNamespace(
        launches=[(entry, (1, 1, 1), (x, out, ws, 16))], allocs=[out], zeroed=set()
    )
    assert _replay._Recipe.build(rec, [x], out) is None  # not registered: cannot be rebuilt
    _launch.WORKSPACES[ws.data_ptr()] = 77
    r = _replay._Recipe.build(rec, [x], out)
    assert r is not None and r.stream == 77
    ((_, _, _, _, _, template, slots, _),) = r.launches
    assert template[2] == ws.data_ptr() and [p for p, _ in slots] == [0, 1]
    _launch.WORKSPACES[ws2.data_ptr()] = 78  # a second workspace on another stream
    rec.launches.append((entry, (1, 1, 1), (x, out, ws2, 16)))
    assert _replay._Recipe.build(rec, [x], out) is None
    monkeypatch.setattr(_launch, "_RUNTIME", (lambda: 0, lambda d: 77, SimpleNamespace()))
    monkeypatch.setattr(_launch, "_TYPES", (None, None, type(None)))
    src, _ = _replay._replay_source(r, guarded=False)
    assert "    if get_stream(device) != STREAM:" in src
    rec.launches.pop()
    r0 = _replay._Recipe.build(SimpleNamespace(launches=[(entry, (1, 1, 1), (x, out, 16))],
                                               allocs=[out], zeroed=set()), [x], out)  # fmt: skip
    assert r0.stream is None
    assert "    if get_stream(device) != STREAM:" not in _replay._replay_source(r0, False)[0]
