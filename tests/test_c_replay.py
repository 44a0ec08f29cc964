"""The replay in one C call (``_clauncher.c``'s ``Replay``) on the CPU, through its ``dry`` entry
(everything but the driver call): each refusal the Python replay makes (another device, another
stream than a workspace's, a launch hook, inputs sharing a pointer, an allocation off a 16-byte
line), the allocators it picks under a mode, the parameters it would launch with (the recorded
constants packed once, pointer slots filled per call) against the Python reference packing of
the arguments the generated Python replay passes, its results (one allocation, a tuple with
None), its reference counting and its errors. ``tests/gpu/test_host_path_gpu.py`` checks it
launches bit for bit like the Python replay on the H200."""

from __future__ import annotations

import gc
import shutil
import sys
import types

import pytest
import torch

from warpgauge.kernels import _clauncher as cl
from warpgauge.kernels import _launch, _replay

HAS_CC = shutil.which("gcc") is not None or shutil.which("clang") is not None
pytestmark = pytest.mark.skipif(not HAS_CC, reason="no C compiler to build the extension")


@pytest.fixture(scope="module")
def mod():
    m = cl.module()
    if m is None:
        pytest.fail(f"the C launcher did not build: {cl.build_error()}")
    return m


class Chain:
    """Stands in for Triton's HookChain: only ``calls`` is read."""

    def __init__(self):
        self.calls = []


REFUSED = object()
CODES = "ppcilfpd"  # x, y, a constexpr, an i32, an i64, an fp32, out, an fp64


def _spec(codes=CODES, name="k"):
    return cl.spec_bytes(0x1234, 4, 1, 0, False, False, codes, 2, name)


def _args(mod, codes, template, slots):
    """(template bytes, slot params, slot sources) as ``_replay._c_replay`` builds them."""
    param, k = {}, 0
    for pos, c in enumerate(codes):
        if c != "c":
            param[pos], k = k, k + 1
    tpl = list(template)
    for pos, _ in slots:
        tpl[pos] = 0
    return (mod.pack(_spec(codes), *tpl), tuple(param[p] for p, _ in slots),
            tuple(s for _, s in slots))  # fmt: skip


class World:
    """A replay over two inputs and one allocation, with counters on everything it calls."""

    def __init__(self, mod, *, device_check=False, stream_want=None, result=2, n_alloc=1,
                 modes=2, aligned=True):  # fmt: skip
        self.runtime = types.SimpleNamespace(launch_enter_hook=Chain(), launch_exit_hook=Chain())
        self.hooks = (self.runtime.launch_enter_hook, self.runtime.launch_exit_hook)
        self.device, self.stream = 0, 777
        self.mode_on = [False] * modes
        self.made = {"slow": 0, "fast": 0}
        self.kept = []
        self.aligned = aligned

        def alloc(kind):
            def make():
                self.made[kind] += 1
                t = torch.empty(64, dtype=torch.float32)
                if not self.aligned:
                    t = t[1:]  # 4 bytes past the start: off a 16-byte line
                self.kept.append(t)
                return t

            return make

        self.slow = tuple(alloc("slow") for _ in range(n_alloc))
        self.fast = tuple(alloc("fast") for _ in range(n_alloc))
        template = [None, None, 64, 5, 2**40 + 3, 0.5, None, -2.25]
        slots = [(0, 0), (1, 1), (6, 2)]
        tb, sp, ss = _args(mod, CODES, template, slots)
        self.launches = ((_spec(), 3, 2, 1, tb, sp, ss),)
        self.template, self.slots = template, slots
        self.r = mod.Replay(
            2, self.device, (lambda: self.device) if device_check else None,
            lambda d: self.stream, stream_want, self.runtime, self.hooks,
            tuple((lambda i=i: self.mode_on[i]) for i in range(modes)), self.slow, self.fast,
            self.launches, result, REFUSED,
        )  # fmt: skip


def _tensors():
    return torch.randn(64), torch.randn(64)


def test_dry_packs_the_python_replays_arguments(mod):
    w = World(mod)
    x, y = _tensors()
    out, stream, packed = w.r.dry((x, y), x.data_ptr(), y.data_ptr())
    assert stream == 777 and w.made == {"slow": 0, "fast": 1}
    assert out is w.kept[-1] and out.dtype == torch.float32
    args = list(w.template)  # what the generated Python replay passes
    args[0], args[1], args[6] = x.data_ptr(), y.data_ptr(), out.data_ptr()
    assert packed == [cl.pack_reference(CODES, args, 2)]
    again, _, packed2 = w.r.dry((x, y), x.data_ptr(), y.data_ptr())
    assert again is not out and packed2[0] != packed[0]  # a fresh output per call


def test_dry_refuses_what_the_python_replay_refuses(mod):
    x, y = _tensors()
    p = (x.data_ptr(), y.data_ptr())
    w = World(mod, device_check=True, stream_want=777)
    assert w.r.dry((x, y), *p) is not REFUSED
    w.device = 1  # the current device is not the recording's
    assert w.r.dry((x, y), *p) is REFUSED
    w.device, w.stream = 0, 778  # a workspace's stream is not the current one
    assert w.r.dry((x, y), *p) is REFUSED
    w.stream = 777
    assert w.r.dry((x, y), x.data_ptr(), x.data_ptr()) is REFUSED  # inputs share a pointer
    w.runtime.launch_enter_hook = Chain()  # a hook chain replaced
    assert w.r.dry((x, y), *p) is REFUSED
    w.runtime.launch_enter_hook = w.hooks[0]
    w.hooks[1].calls.append(print)  # a hook added to the recorded chain
    assert w.r.dry((x, y), *p) is REFUSED
    w.hooks[1].calls.clear()
    made = dict(w.made)
    assert w.r.dry((x, y), *p) is not REFUSED
    assert w.made["fast"] == made["fast"] + 1
    # no allocation for a call refused before allocating
    w.device = 1
    assert w.r.dry((x, y), *p) is REFUSED and w.made["fast"] == made["fast"] + 1


def test_dry_refuses_a_misaligned_allocation(mod):
    w = World(mod, aligned=False)
    x, y = _tensors()
    assert w.r.dry((x, y), x.data_ptr(), y.data_ptr()) is REFUSED


def test_modes_send_allocations_to_the_slow_allocators(mod):
    w = World(mod, modes=3)
    x, y = _tensors()
    for k in range(3):
        w.mode_on = [False] * 3
        w.mode_on[k] = True
        w.made = {"slow": 0, "fast": 0}
        assert w.r.dry((x, y), x.data_ptr(), y.data_ptr()) is not REFUSED
        assert w.made == {"slow": 1, "fast": 0}, k
    w.mode_on = [False] * 3
    w.made = {"slow": 0, "fast": 0}
    w.r.dry((x, y), x.data_ptr(), y.data_ptr())
    assert w.made == {"slow": 0, "fast": 1}


def test_tuple_results_with_none(mod):
    w = World(mod, n_alloc=2, result=(3, -1, 2))
    x, y = _tensors()
    out, _, _ = w.r.dry((x, y), x.data_ptr(), y.data_ptr())
    assert type(out) is tuple and len(out) == 3 and out[1] is None
    assert out[0] is w.kept[-1] and out[2] is w.kept[-2]


def test_no_reference_leaks(mod):
    w = World(mod)
    x, y = _tensors()
    w.r.dry((x, y), x.data_ptr(), y.data_ptr())
    w.kept.clear()
    out, _, _ = w.r.dry((x, y), x.data_ptr(), y.data_ptr())
    w.kept.clear()
    assert sys.getrefcount(out) == 2  # out and getrefcount's argument: the replay kept none
    w.kept.clear()
    w.aligned = False
    w.r.dry((x, y), x.data_ptr(), y.data_ptr())
    refused = w.kept[-1]
    w.kept.clear()
    assert sys.getrefcount(refused) == 2  # the refused allocation was released
    fresh = World(mod)
    runtime = fresh.runtime
    before = sys.getrefcount(runtime)
    del fresh.r
    gc.collect()
    after = sys.getrefcount(runtime)
    assert after == before - 1  # the replay released what it held


def test_errors_name_what_is_wrong(mod):
    w = World(mod)
    x, y = _tensors()
    with pytest.raises(TypeError, match="2 pointers"):
        w.r.dry((x, y), x.data_ptr())
    with pytest.raises(TypeError):
        w.r((x, y), x.data_ptr(), y.data_ptr(), k=1)
    with pytest.raises(OverflowError):
        w.r.dry((x, y), -1, y.data_ptr())
    spec = _spec()
    tb, sp, ss = _args(mod, CODES, w.template, w.slots)
    base = [2, 0, None, lambda d: 0, None, w.runtime, w.hooks, (), w.slow, w.fast]
    with pytest.raises(ValueError, match="template must be"):
        mod.Replay(*base, ((spec, 1, 1, 1, tb[:-8], sp, ss),), 2, REFUSED)
    with pytest.raises(ValueError, match="slot's source"):
        mod.Replay(*base, ((spec, 1, 1, 1, tb, sp, (0, 1, 9)),), 2, REFUSED)
    with pytest.raises(ValueError, match="slot's parameter"):
        mod.Replay(*base, ((spec, 1, 1, 1, tb, (0, 1, 99), ss),), 2, REFUSED)
    with pytest.raises(ValueError, match="allocation"):
        mod.Replay(*base, ((spec, 1, 1, 1, tb, sp, ss),), 0, REFUSED)  # an input as the result
    with pytest.raises(TypeError, match="spec"):
        mod.Replay(*base, ((b"x", 1, 1, 1, tb, sp, ss),), 2, REFUSED)


def test_c_replay_of_a_recipe_matches_the_generated_python_replay(mod, monkeypatch):
    """``_replay._c_replay`` on a recipe whose launches go through the C launcher: the C replay
    packs exactly the arguments the generated Python replay passes to the launcher (the Python
    one's launcher is swapped for a recorder here), with the same allocators and mode checks."""
    monkeypatch.setattr(_launch, "POISON", False)
    chain = type("HookChain", (), {"__init__": lambda self: setattr(self, "calls", [])})
    runtime = types.SimpleNamespace(launch_enter_hook=chain(), launch_exit_hook=chain())
    monkeypatch.setattr(_launch, "_RUNTIME", (lambda: 0, lambda d: 4242, runtime))
    monkeypatch.setattr(_launch, "_TYPES", (None, None, chain))
    codes = "pcpilpgf"
    spec = _spec(codes, "mine")
    template = (None, 16, None, 7, 123456789012, None, 1.5, 0.1)
    slots = ((0, 0), (2, 1), (5, 2))
    recipe = types.SimpleNamespace(
        device=0, stream=None, n_in=2, allocs=(((8,), torch.float32, torch.device("cpu")),),
        strides=((1,),), zeroed=(False,), result=("single", ("alloc", 0)),
        launches=((mod.launch, (spec,), 5, 1, 1, template, slots, ()),),
    )  # fmt: skip
    src, ns = _replay._replay_source(recipe, guarded=True)
    seen = []
    ns["L0"] = lambda *a: seen.append(a)
    exec("\n".join(src), ns)  # noqa: S102 - the module's own generated source
    monkeypatch.setattr(_replay, "_one_device", lambda d: False)  # several GPUs: device read
    assert _replay._c_replay(recipe, ns, guarded=True).get_device is _launch._RUNTIME[0]
    monkeypatch.setattr(_replay, "_one_device", lambda d: True)  # one GPU: never read
    r = _replay._c_replay(recipe, ns, guarded=True)
    assert type(r).__name__ == "Replay" and r.get_device is None
    assert r.modes == (ns["DET"], ns["FMODES"])
    x, y = torch.randn(8), torch.randn(8)
    out_py = ns["replay"]((x, y), x.data_ptr(), y.data_ptr())
    ((g0, g1, g2, stream, spec_seen, *args),) = seen
    assert (g0, g1, g2, stream, spec_seen) == (5, 1, 1, 4242, spec)
    out_c, stream_c, packed = r.dry((x, y), x.data_ptr(), y.data_ptr())
    assert stream_c == 4242 and out_c.shape == out_py.shape and out_c.dtype == out_py.dtype
    args[5] = out_c.data_ptr()  # the C call's own allocation
    assert packed == [cl.pack_reference(codes, args, 2)]
    # what the C replay does not take: a view as the result, a launch not through it
    recipe.result = ("single", ("view", 0, (2, 4), (4, 1)))
    assert _replay._c_replay(recipe, ns, guarded=True) is None
    recipe.result = ("single", ("alloc", 0))
    recipe.launches = ((print, (spec,), 5, 1, 1, template, slots, ()),)
    assert _replay._c_replay(recipe, ns, guarded=True) is None
    # a recipe the C object refuses to build (an input as the result): the Python replay
    recipe.launches = ((mod.launch, (spec,), 5, 1, 1, template, slots, ()),)
    recipe.result = ("single", ("alloc", -1))
    assert _replay._c_replay(recipe, ns, guarded=True) is None
    assert any(k.startswith("not built: ValueError") for k in _replay.C_REPLAY_FALLBACKS)
    recipe.result = ("single", ("alloc", 0))
    monkeypatch.setattr(_replay, "C_REPLAY", False)
    assert _replay._c_replay(recipe, ns, guarded=True) is None
