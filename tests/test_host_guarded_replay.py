"""The hit's guarded replay (``_replay_hit``, ``_replay._generate``'s ``gfast``), counted on
the CPU with the toy launcher of ``test_replay``: what it skips is implied by the guard that
let the call in, and everything else is checked as the key lookup's replay checks it."""

from __future__ import annotations

import torch

from warpgauge.kernels import _launch, _replay, _replay_hit

from .test_host_path import toy  # noqa: F401  (a fixture)
from .test_replay import _entries, _SeenOps, _x, eager_toy  # noqa: F401  (eager_toy: a fixture)


def test_a_guard_fails_under_a_dispatch_mode():
    """What the guarded replay rests on: a guard built outside any mode rejects its own
    tensors while a dispatch mode is active (and passes again after), and the hit knows it."""
    cls = _replay_hit._guard_type()
    assert cls is not None, "this torch has Dynamo's TensorGuards"
    x = _x(4, 16)
    check = cls(x, dynamic_dims_sizes=None, dynamic_dims_strides=None).check
    with _SeenOps():
        assert check(x) is False
    assert check(x) is True
    assert _replay_hit._guard_sees_modes(cls) is True


def test_the_guarded_replay_is_the_entrys_and_a_mode_still_sees_the_allocation(
    eager_toy,  # noqa: F811
    monkeypatch,
):
    """A guard's entry holds the recipe's guarded replay (no dispatch-stack read): it launches
    on the call's pointers. Under a dispatch mode the guard fails, so the call takes the key
    lookup's replay, which shows the mode its ``aten.empty``; a function mode (which a guard
    does not see) and deterministic algorithms still get ``torch.empty`` on the guarded path."""
    _eager, mod, calls = eager_toy
    monkeypatch.setattr(_launch, "POISON", False)
    _replay.clear()
    for _ in range(3):  # compile, record (no poisoning: the allocator entry), learn a guard
        _eager.eager(mod, "f", (_x(4, 16), _x(4, 16), 0.5))
    (entry,) = _entries(mod.f)
    recipe = next(r for r in _replay._RECIPES[mod.f].values() if type(r) is _replay._Recipe)
    assert entry[3] is recipe.gfast and recipe.gfast is not recipe.fast
    direct = recipe.gfast.__globals__["F0"]
    seen_direct = []
    recipe.gfast.__globals__["F0"] = lambda: seen_direct.append(1) or direct()
    try:
        n, replays = len(calls), _replay.STATS["replays"]
        x = _x(4, 16)
        out = _eager.eager(mod, "f", (x, _x(4, 16), 0.5))
        assert len(calls) == n and _replay.STATS["replays"] == replays + 1
        assert seen_direct == [1], "the guarded replay, through the allocator entry"
        assert mod.toy.compiled[0].launches[-1][9:11] == (x.data_ptr(), out.data_ptr())

        seen = _SeenOps()
        with seen:
            out = _eager.eager(mod, "f", (x, _x(4, 16), 0.5))
        assert seen_direct == [1], "a dispatch mode: not the guarded replay"
        assert seen.ops.count(torch.ops.aten.empty.memory_format) == 1, seen.ops
        assert len(calls) == n and mod.toy.compiled[0].launches[-1][10] == out.data_ptr()

        from torch.overrides import TorchFunctionMode

        class _Fn(TorchFunctionMode):
            def __init__(self):
                super().__init__()
                self.seen = []

            def __torch_function__(self, func, types, args=(), kwargs=None):
                self.seen.append(func)
                return func(*args, **(kwargs or {}))

        fm = _Fn()
        with fm:
            _eager.eager(mod, "f", (x, _x(4, 16), 0.5))
        assert torch.empty in fm.seen and seen_direct == [1], "a function mode sees torch.empty"

        prev = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            out = _eager.eager(mod, "f", (x, _x(4, 16), 0.5))
        finally:
            torch.use_deterministic_algorithms(prev)
        assert seen_direct == [1] and len(calls) == n
        assert torch.isnan(out).all(), "deterministic algorithms: torch.empty's NaN fill"
        _eager.eager(mod, "f", (x, _x(4, 16), 0.5))
        assert seen_direct == [1, 1]
    finally:
        recipe.gfast.__globals__["F0"] = direct


def test_aliased_inputs_and_hooks_still_refuse_the_guarded_replay(eager_toy):  # noqa: F811
    """The guard does not compare pointers nor launch hooks: the guarded replay still refuses
    inputs that share memory and an installed hook (the launcher runs)."""
    _eager, mod, calls = eager_toy
    _eager.eager(mod, "f", (_x(4, 16), _x(4, 16), 0.5))
    assert len(_entries(mod.f)) == 1
    x = _x(4, 16)
    n = len(calls)
    _eager.eager(mod, "f", (x, x, 0.5))
    assert len(calls) == n + 1, "aliased inputs: the launcher"
    hooks = _launch._RUNTIME[2]  # the test's runtime (test_host_path's toy fixture)
    hook = lambda metadata: None  # noqa: E731
    hooks.launch_enter_hook.add(hook)
    try:
        _eager.eager(mod, "f", (x, _x(4, 16), 0.5))
    finally:
        hooks.launch_enter_hook.remove(hook)
    assert len(calls) == n + 2, "a launch hook: the launcher"
    _eager.eager(mod, "f", (x, _x(4, 16), 0.5))
    assert len(calls) == n + 2, "no hook: the guarded replay again"


def test_one_device_replays_skip_the_current_device_read(monkeypatch):
    """With one CUDA device the recorded device is the only one: the replay neither reads nor
    compares the current device. With none (this CPU machine) or several it does."""
    want = torch.cuda.is_available() and torch.cuda.device_count() == 1
    assert _replay._one_device(0) is want
    assert _replay._one_device(1) is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert _replay._one_device(0) is True
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert _replay._one_device(0) is False


def test_a_guard_learned_under_a_dispatch_mode_keeps_the_mode_checking_replay(
    eager_toy,  # noqa: F811
    monkeypatch,
):
    """A guard takes the thread's dispatch state when it is built: one learned while a mode is
    active passes under that mode, so its entry keeps ``fast`` (which reads the dispatch stack)
    and every call under the mode still shows the mode its ``aten.empty``."""
    _eager, mod, calls = eager_toy
    monkeypatch.setattr(_launch, "POISON", False)
    _replay.clear()
    for _ in range(2):  # compile, record; no guard learned yet
        _eager.eager(mod, "f", (_x(4, 16), _x(4, 16), 0.5))
    recipe = next(r for r in _replay._RECIPES[mod.f].values() if type(r) is _replay._Recipe)
    n = len(calls)
    seen = _SeenOps()
    with seen:
        for _ in range(3):  # the first learns a guard under the mode, the others pass it
            out = _eager.eager(mod, "f", (_x(4, 16), _x(4, 16), 0.5))
    (entry,) = _entries(mod.f)
    assert entry[3] is recipe.fast
    assert seen.ops.count(torch.ops.aten.empty.memory_format) == 3, seen.ops
    assert len(calls) == n and mod.toy.compiled[0].launches[-1][10] == out.data_ptr()
    out = _eager.eager(mod, "f", (_x(4, 16), _x(4, 16), 0.5))  # outside: a guard of its own
    assert len(_entries(mod.f)) == 2 and _entries(mod.f)[0][3] is recipe.gfast


def test_a_replay_on_another_current_device_is_refused_unless_there_is_only_one(
    eager_toy,  # noqa: F811
    monkeypatch,
):
    """With several devices the replay reads the current device and refuses a call on another
    one than the recording's (the launcher runs); with one device (``_one_device``) there is
    no other, and the replay reads none."""
    _eager, mod, calls = eager_toy
    _, get_stream, hooks = _launch._RUNTIME
    current = [0]
    monkeypatch.setattr(_launch, "_RUNTIME", (lambda: current[0], get_stream, hooks))
    for one in (False, True):
        monkeypatch.setattr(_replay, "_one_device", lambda device, one=one: one)
        _replay.clear()
        current[0] = 0
        for _ in range(3):  # first sighting, recording, a replay that learns a guard
            _eager.eager(mod, "f", (_x(4, 16), _x(4, 16), 0.5))
        recipe = next(r for r in _replay._RECIPES[mod.f].values() if type(r) is _replay._Recipe)
        for fn in (recipe.fast, recipe.gfast):
            assert ("get_device" in fn.__code__.co_names) is not one
        n = len(calls)
        _eager.eager(mod, "f", (_x(4, 16), _x(4, 16), 0.5))
        assert len(calls) == n, "same device: a replay"
        if not one:
            current[0] = 1
            _eager.eager(mod, "f", (_x(4, 16), _x(4, 16), 0.5))
            assert len(calls) == n + 1, "another current device: the launcher"
