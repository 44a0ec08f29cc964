"""The fast eager host path on a GPU: replayed and cached launches give bit-identical results to
Triton's normal launch path, and the registered ops still work under opcheck and torch.compile."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import warpgauge as wg
from warpgauge.kernels import _launch, _replay, _replay_hit

pytestmark = pytest.mark.gpu
DEV = "cuda"
BF = torch.bfloat16


def _normal(fn):
    _launch.FAST = _replay.ENABLED = False
    try:
        return fn()
    finally:
        _launch.FAST = _replay.ENABLED = True


def _equal(a, b):
    a, b = (a, b) if isinstance(a, tuple) else ((a,), (b,))
    return all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(a, b)
    )


def _calls():
    q = wg.quantize_int4(torch.randn(512, 1024, device=DEV, dtype=BF) * 0.05)

    def inputs(seed):
        g = torch.Generator(device=DEV).manual_seed(seed)
        r = lambda *s: torch.randn(*s, device=DEV, generator=g).to(BF)  # noqa: E731
        return r(8, 4096), r(8, 4096), r(4096), r(64, 128), r(128, 96), r(3, 1024)

    gw = torch.Generator(device=DEV).manual_seed(7)
    wide = [
        torch.randn(*s, device=DEV, generator=gw).to(BF)
        for s in ((4, 32769), (4, 32769), (32769,), (16, 262144), (128, 50257))
    ]

    # the pad path (M*N*K >= 2^30 with rows TMA cannot read: padded copies, a sliced buffer) and
    # the INT4 tile kernel's permuted x (batch 17-256 on a weight of 2^25 values or more)
    pad = [torch.randn(*s, device=DEV, generator=gw).to(BF)
           for s in ((1025, 1033), (1033, 1031), (1024, 1028), (1028, 1024))]  # fmt: skip
    q_big = wg.quantize_int4(torch.randn(14336, 4096, device=DEV, generator=gw).to(BF) * 0.05)
    xq = torch.randn(256, 4096, device=DEV, generator=gw).to(BF)

    ops = {
        "gemm pad": lambda x, y, w, a, b, v: wg.gemm(pad[0] + x[:1, :1], pad[1]),
        "gemm pad K": lambda x, y, w, a, b, v: wg.gemm(pad[2] + x[:1, :1], pad[3]),
        "int4_linear tile 256": lambda x, y, w, a, b, v: wg.int4_linear(xq + x[:1, :1], q_big),
        "int4_linear tile 32": lambda x, y, w, a, b, v: wg.int4_linear(xq[:32] + x[:1, :1], q_big),
        "softmax": lambda x, y, w, a, b, v: wg.softmax(x),
        "softmax strided": lambda x, y, w, a, b, v: wg.softmax(x[:, :4000]),
        # a start 2 bytes past a 16-byte boundary: Triton specializes on alignment
        "softmax misaligned": lambda x, y, w, a, b, v: wg.softmax(
            x.view(-1)[1:28673].view(7, 4096)
        ),
        "softmax fp16": lambda x, y, w, a, b, v: wg.softmax(x.half()),
        "add_rms_norm misaligned": lambda x, y, w, a, b, v: wg.add_rms_norm(
            x.view(-1)[1:28673].view(7, 4096), y[:7], w
        ),
        "row_sum": lambda x, y, w, a, b, v: wg.row_sum(x, torch.float32),
        "add": lambda x, y, w, a, b, v: wg.add(x, y),
        "add_rms_norm": lambda x, y, w, a, b, v: wg.add_rms_norm(x, y, w),
        "gemm": lambda x, y, w, a, b, v: wg.gemm(a, b),
        "gemm transposed": lambda x, y, w, a, b, v: wg.gemm(b.t(), a.t()),  # M = 96: TMA
        "gemm tma": lambda x, y, w, a, b, v: wg.gemm(x.view(256, 128), b),  # M = 256: TMA
        "int4_linear": lambda x, y, w, a, b, v: wg.int4_linear(v, q),
        "int4_linear batch": lambda x, y, w, a, b, v: wg.int4_linear(x[:5, :1024], q),
        # cooperative plans (zeroed statistics slots, _launch.zeros): the inputs' own random
        # values plus these fixed wide rows (4x32769: COOP_FEW_NARROW; 16x262144: coop 4096;
        # 128x50257: COOP_ROW_SUM)
        "softmax coop": lambda x, y, w, a, b, v: wg.softmax(wide[0] + x[:1, :1]),
        "add_rms_norm coop": lambda x, y, w, a, b, v: wg.add_rms_norm(
            wide[0] + x[:1, :1], wide[1], wide[2]
        ),
        "row_sum coop": lambda x, y, w, a, b, v: wg.row_sum(wide[4] + x[:1, :1]),
        "softmax coop 262144": lambda x, y, w, a, b, v: wg.softmax(wide[3] + x[:1, :1]),
    }
    return ops, inputs


NAMES = ["softmax", "softmax strided", "softmax misaligned", "softmax fp16", "row_sum", "add",
         "add_rms_norm", "add_rms_norm misaligned", "gemm", "gemm transposed", "gemm tma",
         "int4_linear", "int4_linear batch", "softmax coop", "add_rms_norm coop", "row_sum coop",
         "softmax coop 262144", "gemm pad", "gemm pad K", "int4_linear tile 256",
         "int4_linear tile 32"]  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_replay_is_bitwise_the_normal_path(name):
    ops, inputs = _calls()
    fn = ops[name]
    # 1st call: signature seen, kernels compiled and cached; 2nd: recorded (an autotuned GEMM
    # tunes on the 1st and records on the 3rd); from then on: replays
    for seed in range(3):
        fn(*inputs(seed))
    before = _replay.STATS["replays"]
    for seed in range(3, 7):  # new inputs of the same signature: replays
        args = inputs(seed)
        assert _equal(fn(*args), _normal(lambda args=args: fn(*args))), name
    assert _replay.STATS["replays"] >= before + 4, f"{name}: not replayed"


@pytest.mark.parametrize("name", NAMES)
def test_replay_without_poisoning_is_bitwise_the_normal_path(name, monkeypatch):
    """As above with the tests' NaN poisoning off, as a user runs: the replays allocate through
    the allocator's own entry (``_empty_strided_cuda``) and are matched by the hits' tensor
    guards; outputs on the inputs' device, bit-identical to the normal path."""
    monkeypatch.setattr(_launch, "POISON", False)
    _replay.clear()  # recipes generated now, without poisoning
    dev = torch.device(DEV, torch.cuda.current_device())
    alloc = _launch.direct_empty((7, 33), (33, 1), BF, dev, dev.index)
    assert alloc is not None and alloc().device == dev
    ops, inputs = _calls()
    fn = ops[name]
    for seed in range(3):
        fn(*inputs(seed))
    before = _replay.STATS["replays"]
    for seed in range(3, 7):
        args = inputs(seed)
        got = fn(*args)
        for t in got if isinstance(got, tuple) else (got,):
            assert t.device == args[0].device and not torch.isnan(t).any(), name
        assert _equal(got, _normal(lambda args=args: fn(*args))), name
    assert _replay.STATS["replays"] >= before + 4, f"{name}: not replayed"
    _replay.clear()


C_REPLAYED = {"softmax", "softmax strided", "softmax misaligned", "softmax fp16", "row_sum", "add",
              "add_rms_norm", "add_rms_norm misaligned", "gemm", "int4_linear",
              "int4_linear batch", "softmax coop", "add_rms_norm coop", "row_sum coop",
              "softmax coop 262144"}  # fmt: skip


@pytest.mark.parametrize("name", NAMES)
def test_c_replay_is_bitwise_the_python_replay(name, monkeypatch):
    """The replay in one C call (``_clauncher.c``'s Replay) against the generated Python replay,
    both without poisoning: same outputs bit for bit on the same inputs (so the same kernels,
    grids and packed arguments), outputs in fresh memory; the calls whose launches all go
    through warpgauge's C launcher take it (the TMA GEMMs keep the Python replay)."""
    monkeypatch.setattr(_launch, "POISON", False)
    ops, inputs = _calls()
    fn = ops[name]
    got = {}
    for c_replay in (True, False):
        monkeypatch.setattr(_replay, "C_REPLAY", c_replay)
        _replay.clear()
        for seed in range(3):
            fn(*inputs(seed))
        kinds = {type(r.fast).__name__ for per in _replay._RECIPES.values() for r in per.values()
                 if type(r) is _replay._Recipe}  # fmt: skip
        before = _replay.STATS["replays"]
        got[c_replay] = [fn(*inputs(seed)) for seed in range(3, 6)]
        assert _replay.STATS["replays"] >= before + 3, f"{name}: not replayed"
        if c_replay:
            assert ("Replay" in kinds) == (name in C_REPLAYED), (
                name,
                kinds,
                _replay.C_REPLAY_FALLBACKS,
            )
        else:
            assert kinds == {"function"}, kinds
    for a, b in zip(got[True], got[False]):
        assert _equal(a, b), name
        for t in a if isinstance(a, tuple) else (a,):
            assert not torch.isnan(t).any(), name
    _replay.clear()


def test_c_replay_refuses_hooks_aliasing_and_other_streams(monkeypatch):
    """The C replay's refusals on the GPU: a launch hook installed, two inputs sharing memory;
    on a side stream it replays (no workspace), bitwise the normal path."""
    from warpgauge.kernels import add as ka

    monkeypatch.setattr(_launch, "POISON", False)
    _replay.clear()
    a = torch.randn(4096, device=DEV, dtype=BF)
    b = torch.randn(4096, device=DEV, dtype=BF)
    for _ in range(4):
        wg.add(a, b)
    recipe = next(r for r in _replay._RECIPES[ka.add].values() if type(r) is _replay._Recipe)
    assert type(recipe.gfast).__name__ == "Replay"
    assert recipe.gfast((a, b), a.data_ptr(), a.data_ptr()) is _replay._REFUSED  # aliasing
    from triton import knobs

    calls = []
    knobs.runtime.launch_enter_hook.add(lambda *x: calls.append(1))
    try:
        assert recipe.gfast((a, b), a.data_ptr(), b.data_ptr()) is _replay._REFUSED
        assert _equal(wg.add(a, b), _normal(lambda: wg.add(a, b))) and calls  # hook called
    finally:
        knobs.runtime.launch_enter_hook.calls.clear()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        out = recipe.gfast((a, b), a.data_ptr(), b.data_ptr())
    s.synchronize()
    assert out is not _replay._REFUSED and _equal(out, _normal(lambda: wg.add(a, b)))
    _replay.clear()


def test_repeated_call_runs_no_jit_launch_path(monkeypatch):
    from warpgauge.kernels import softmax as sk

    x = torch.randn(8, 4096, device=DEV, dtype=BF)
    for _ in range(3):
        wg.softmax(x)
    k = sk._softmax_resident

    def boom(*a, **kw):
        raise AssertionError("JITFunction.run on a repeated call")

    monkeypatch.setattr(k, "run", boom)
    stats = dict(_launch.launch_stats())
    for _ in range(5):
        wg.softmax(x)
    assert _launch.launch_stats()["misses"] == stats["misses"]


def test_autograd_path_matches_torch():
    x = torch.randn(8, 4096, device=DEV, dtype=torch.float32, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    g = torch.randn(8, 4096, device=DEV)
    for _ in range(3):  # replays in forward and backward
        x.grad = x2.grad = None
        wg.softmax(x).backward(g)
        torch.softmax(x2, -1).backward(g)
        torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-6)


def _grad_cases():
    """name -> (inputs(seed), ours(*inputs), registered op(*inputs)); the differentiable inputs
    require grad."""
    ops = torch.ops.warpgauge
    q = wg.quantize_int4(torch.randn(512, 1024, device=DEV, dtype=BF) * 0.05)

    def leaves(*shapes):
        def make(seed):
            g = torch.Generator(device=DEV).manual_seed(seed)
            return [
                torch.randn(*s, device=DEV, generator=g).to(BF).requires_grad_() for s in shapes
            ]

        return make

    return {
        "softmax": (leaves((8, 4096)), wg.softmax, ops.softmax),
        "add": (leaves((8, 4096), (8, 4096)), wg.add, ops.add),
        "row_sum": (leaves((8, 4096)), wg.row_sum, lambda x: ops.row_sum(x, None)),
        "add_rms_norm": (leaves((8, 4096), (8, 4096), (4096,)), wg.add_rms_norm,
                         lambda x, r, w: ops.add_rms_norm(x, r, w, 1e-6)),
        "gemm": (leaves((64, 128), (128, 96)), wg.gemm, ops.gemm),
        "int4_linear": (leaves((3, 1024)), lambda v: wg.int4_linear(v, q),
                        lambda v: ops.int4_linear(v, q.packed, q.scales, q.group_size)),
    }  # fmt: skip


@pytest.mark.parametrize(
    "name", ["softmax", "add", "row_sum", "add_rms_norm", "int4_linear", "gemm"]
)
def test_replayed_autograd_calls_match_the_registered_op_bitwise(name, monkeypatch):
    """Repeated gradient-tracking calls: from the fourth on (a GEMM that tunes, the sixth) the
    public call's hit replays the forward and the autograd Function returns it (no second
    lookup: ``_eager.direct`` is not called); outputs and every input's gradient are bitwise
    those of the registered op's autograd on the same inputs."""
    from warpgauge import _eager

    inputs, ours, op = _grad_cases()[name]
    direct = _eager.direct
    seen = []
    monkeypatch.setattr(_eager, "direct", lambda *a: seen.append(a[0]) or direct(*a))
    for seed in range(9):
        seen.clear()
        mine, theirs = inputs(seed), [t.detach().clone().requires_grad_() for t in inputs(seed)]
        before = _replay.STATS["replays"]
        got, want = ours(*mine), op(*theirs)
        if seed >= 6:
            assert not seen and _replay.STATS["replays"] > before, (
                f"{name}: not replayed in the hit"
            )
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        assert _equal(tuple(t.detach() for t in got), tuple(t.detach() for t in want)), name
        g = torch.Generator(device=DEV).manual_seed(100 + seed)
        grads = [torch.randn(t.shape, device=DEV, generator=g).to(t.dtype) for t in got]
        torch.autograd.backward(got, grads)
        torch.autograd.backward(want, grads)
        for a, b in zip(mine, theirs):
            assert torch.equal(a.grad, b.grad), f"{name}: gradient differs from the registered op's"


def test_registered_ops_opcheck_and_compile():
    x = torch.randn(8, 4096, device=DEV, dtype=BF)
    torch.library.opcheck(torch.ops.warpgauge.softmax, (x,))
    f = torch.compile(lambda t: wg.softmax(t) * 2, fullgraph=True)
    assert torch.equal(f(x), wg.softmax(x) * 2)


def test_meta_calls_on_gpu_build():
    m = torch.empty(8, 4096, device="meta", dtype=BF)
    y, h = wg.add_rms_norm(m, m, torch.empty(4096, device="meta", dtype=BF))
    assert y.device.type == "meta" and y.shape == (8, 4096)
    assert wg.gemm(m, m.t()).shape == (8, 8)
    assert F.softmax(torch.zeros(1), -1).item() == 1.0  # the process still has a working GPU


def test_guarded_one_device_replay_on_the_gpu(monkeypatch):
    """On a one-GPU process, a repeated call replays through its guard's replay (no current
    device read, no dispatch-stack read), bitwise the normal path; under a dispatch mode every
    call shows the mode the replay's ``aten.empty`` (the guard learned outside fails there, the
    one learned there keeps the mode-checking replay); on a side stream it replays as well."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from warpgauge.kernels import softmax as sk

    if torch.cuda.device_count() != 1:
        pytest.skip("one visible GPU only")
    assert _replay._one_device(0)
    monkeypatch.setattr(_launch, "POISON", False)  # as a user runs: the allocator's own entry
    _replay.clear()  # recipes generated now, without poisoning
    x = torch.randn(8, 4096, device=DEV, dtype=BF)
    for _ in range(4):
        y = wg.softmax(x)
    entries = _replay_hit.namespace(_replay._HITS[sk.softmax])["ENTRIES"]
    recipe = next(r for r in _replay._RECIPES[sk.softmax].values() if type(r) is _replay._Recipe)
    assert entries and entries[0][3] is recipe.gfast
    if _replay.C_REPLAY:  # the replay in one C call (_clauncher.c's Replay)
        assert type(recipe.gfast).__name__ == "Replay" and type(recipe.fast).__name__ == "Replay"
        assert recipe.gfast.get_device is None  # the current device is not read
        dmodes = _launch.MODE_CHECKS[1]
        assert dmodes not in recipe.gfast.modes and dmodes in recipe.fast.modes
        assert recipe.gfast.fast[0] is not recipe.gfast.slow[0]  # the allocator's own entry
    else:
        assert "get_device" not in recipe.gfast.__code__.co_names
        assert "DMODES" not in recipe.gfast.__code__.co_names
        assert "DMODES" in recipe.fast.__code__.co_names and "F0" in recipe.gfast.__code__.co_names
    before = _replay.STATS["replays"]
    y = wg.softmax(x)
    assert _replay.STATS["replays"] == before + 1 and _equal(y, _normal(lambda: wg.softmax(x)))

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(func)
            return func(*args, **(kwargs or {}))

    seen = Seen()
    with seen:  # the first learns a guard under the mode: it keeps the mode-checking replay
        for _ in range(3):
            y = wg.softmax(x)
    assert seen.ops.count(torch.ops.aten.empty.memory_format) == 3, seen.ops
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        before = _replay.STATS["replays"]
        y = wg.softmax(x)
        assert _replay.STATS["replays"] == before + 1
    s.synchronize()
    assert _equal(y, _normal(lambda: wg.softmax(x)))
    _replay.clear()


def test_the_pad_and_permuted_x_cases_take_those_paths():
    """The replay cases above that exist for the pad path and the tile kernel's permuted x run
    those paths (else their replay tests would pass on another path)."""
    from warpgauge._device import device_info
    from warpgauge.kernels import gemm as kg
    from warpgauge.kernels.int4 import Int4Plan

    for m, n, k in ((1025, 1031, 1033), (1024, 1024, 1028)):
        a = torch.randn(m, k, device=DEV, dtype=BF)
        b = torch.randn(k, n, device=DEV, dtype=BF)
        assert kg._path(a, b, torch.empty(m, n, device=DEV, dtype=BF), "m") == "pad", (m, n, k)
    sms = device_info(torch.device(DEV)).sm_count
    for m in (256, 32):
        plan = Int4Plan.for_shape(m, 14336, 4096, sms, 128)
        assert plan.kernel == "tile" and plan.block_m > 16, (m, plan)
