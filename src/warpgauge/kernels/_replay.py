"""Replay of an eager launcher call: the host path of a repeated call, without repeating it.

A launcher (``softmax.softmax``, ``rmsnorm.add_rms_norm``, ...) validates its inputs, picks a plan,
allocates its outputs with ``_launch.empty`` and launches kernels with ``_launch.launch``. For
inputs of the same *signature* (per tensor: dtype, shape, strides, device and the data pointer's
offset from a 16-byte boundary; every other argument by type and value), all of that comes out
the same every time: validation passes, the plan, the output shapes, the kernels, their grids and
every integer and float argument are identical, and only the data pointers differ. So the first
call of a signature is *recorded* and later calls *replay* it: allocate the recorded outputs,
launch the recorded compiled kernels with the new data pointers. That skips argument checks, plan
lookup, Triton's binder and its pointer checks (the pointers are passed as integers: they are the
inputs' and fresh outputs' own, on the recorded device).

A signature is recorded the second time it is seen (a shape that comes once costs no recording),
and a recording is kept only if it is complete and faithful, otherwise the signature is never
replayed and always runs the launcher:

- every launch was a hit of the compiled-kernel cache (a first launch compiles: record again on
  the next call);
- every tensor argument of a launch is an input or an output allocation, or a view starting at
  its first element (launchers pass ``x.view(-1, width)``, ``b.t()``, ``packed.view(int32)``);
- the launcher ran no tensor operation but allocations and views (checked with a dispatch mode
  while recording: a ``zero_()``, a copy from ``.contiguous()`` or an arithmetic fallback
  disqualifies it);
- the result is made of output allocations (or views of them) and ``None``.

A replay is refused (the launcher runs) when the inputs share a data pointer, the current device is
not the recorded one, a launch hook is installed, or a fresh allocation's alignment differs.
"""

from __future__ import annotations

import os
import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from . import _launch

MAX_SIGNATURES = 512  # per launcher; past it new signatures run the launcher (no unbounded growth)

_NEVER = object()  # a signature whose call cannot be replayed
_SEEN = object()  # a signature seen once: recorded when it comes again
_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_SCALARS = (int, float, bool, type(None), torch.dtype)

_aten = torch.ops.aten
_ALLOWED = {
    _aten.empty.memory_format,
    _aten.view.default,
    _aten.view.dtype,
    _aten._unsafe_view.default,
    _aten.t.default,
    _aten.transpose.int,
    _aten.alias.default,
    _aten.as_strided.default,
    _aten._reshape_alias.default,
    _aten.unsqueeze.default,
    _aten.expand.default,
}
if _launch.POISON:  # the test mode fills every allocation with NaN; replay does the same
    _ALLOWED |= {_aten.fill_.Scalar}

# ``WARPGAUGE_REPLAY=0`` (or ``ENABLED = False``) turns replay off; it is also off whenever the
# cached launch path is (``_launch.FAST``), since replay launches cached kernels.
ENABLED = os.environ.get("WARPGAUGE_REPLAY", "1") not in ("", "0")


def device_ok(t) -> bool:
    """Replay needs real GPU tensors (a seam the CPU tests replace)."""
    return t.is_cuda


_RECIPES: dict = {}  # launcher -> {signature: _Recipe | _NEVER}
STATS = {"replays": 0, "recorded": 0, "refused": 0, "never": 0}


def clear() -> None:
    _RECIPES.clear()
    for k in STATS:
        STATS[k] = 0


class _OpsSeen(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.other = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func not in _ALLOWED:
            self.other.append(func)
        return func(*args, **(kwargs or {}))


class _Recording:
    __slots__ = ("allocs", "launches", "complete")

    def __init__(self):
        self.allocs = []  # tensors from _launch.empty, in order
        self.launches = []  # (entry, (g0, g1, g2), args)
        self.complete = True


def _signature(args, tensors):
    """Hashable signature of ``args``; appends their tensors (Int4Weight's included) to
    ``tensors``. None when an argument is of a kind that is never replayed."""
    sig = []
    for a in args:
        ta = type(a)
        if ta is _Tensor or ta is _Parameter:
            if not device_ok(a):
                return None
            tensors.append(a)
            sig.append((a.dtype, a.shape, a.stride(), a.get_device(), a.data_ptr() & 15))
        elif ta in _SCALARS:
            sig.append((ta, a))
        elif hasattr(a, "packed") and hasattr(a, "scales") and hasattr(a, "group_size"):
            inner = _signature((a.packed, a.scales, a.group_size), tensors)  # shape: packed's
            if inner is None:
                return None
            sig.append((ta, inner))
        else:
            return None
    return tuple(sig)


def call(launcher, args, run):
    """``run(launcher, *args)``, or its replay when a recording of this signature exists."""
    tensors = []
    sig = _signature(args, tensors)
    if sig is None or _launch._RECORDING is not None:
        return run(launcher, *args)
    per = _RECIPES.get(launcher)
    if per is None:
        per = _RECIPES[launcher] = {}
    recipe = per.get(sig)
    if recipe is None:  # first sighting: run it and remember (a one-off shape costs no recording)
        if len(per) < MAX_SIGNATURES:
            per[sig] = _SEEN
        return run(launcher, *args)
    if recipe is _SEEN:  # second sighting: record
        return _record(launcher, args, run, tensors, per, sig)
    if recipe is _NEVER:
        return run(launcher, *args)
    out = recipe.run(tensors)
    if out is _REFUSED:
        STATS["refused"] += 1
        return run(launcher, *args)
    STATS["replays"] += 1
    return out


def _record(launcher, args, run, tensors, per, sig):
    rec = _Recording()
    seen = _OpsSeen()
    _launch._RECORDING_THREAD = threading.get_ident()  # other threads' launches are not ours
    _launch._RECORDING = rec
    try:
        with seen:
            out = run(launcher, *args)
    finally:
        _launch._RECORDING = None
    if not rec.complete:
        return out  # a launch compiled or went the normal way: record on a later call
    recipe = _Recipe.build(rec, tensors, out) if not seen.other else None
    if recipe is None:
        per[sig] = _NEVER
        STATS["never"] += 1
    else:
        per[sig] = recipe
        STATS["recorded"] += 1
    return out


_REFUSED = object()
# What a recorded launch may hold as a constant (a signature's own kinds are _SCALARS above).
_ARG_SCALARS = (int, float, bool, str)


class _Recipe:
    __slots__ = ("device", "allocs", "launches", "result", "single", "n_in", "run")

    @classmethod
    def build(cls, rec, tensors, out):
        if not rec.launches:
            return None
        in_ptrs = [t.data_ptr() for t in tensors]
        al_ptrs = [t.data_ptr() for t in rec.allocs]
        every = in_ptrs + al_ptrs
        if len(set(every)) != len(every) or 0 in every or any(p & 15 for p in al_ptrs):
            return None  # aliasing inputs, a null pointer, an odd allocation: never replayed
        where = {p: i for i, p in enumerate(every)}  # inputs first, then allocations
        launches = []
        for entry, (g0, g1, g2), args in rec.launches:
            template = list(args)
            slots = []
            for pos, a in enumerate(args):
                if isinstance(a, _Tensor):
                    src = where.get(a.data_ptr())
                    if src is None:
                        return None  # a tensor the recipe cannot rebuild (a copy, an offset view)
                    slots.append((pos, src))
                    template[pos] = None
                elif a is not None and type(a) not in _ARG_SCALARS:
                    # An object that holds pointers of its own (a TMA TensorDescriptor holds its
                    # base tensor): replaying it would launch on the recorded call's memory.
                    return None
            launches.append((entry.fast, entry.head, g0, g1, g2, tuple(template), tuple(slots)))
        result = _result_plan(out, rec.allocs)
        if result is None:
            return None
        self = cls()
        self.device = _launch._RUNTIME[0]()  # the device the recorded launches ran on
        self.allocs = tuple((tuple(t.shape), t.dtype, t.device) for t in rec.allocs)
        self.launches = tuple(launches)
        self.result = result
        self.single = result[1][1] if result[0] == "single" and result[1][0] == "alloc" else None
        self.n_in = len(tensors)
        self.run = _generate(self)
        return self

    def replay(self, tensors):
        get_device, get_stream, runtime = _launch._RUNTIME
        device = get_device()
        if device != self.device:
            return _REFUSED
        chain = _launch._TYPES[2]
        for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
            if hook is not None and (type(hook) is not chain or hook.calls):
                return _REFUSED  # a profiler's hooks need Triton's launch metadata
        ptrs = [t.data_ptr() for t in tensors]
        if len(ptrs) > 1 and len(set(ptrs)) != len(ptrs):
            return _REFUSED
        if _launch.POISON:
            allocs = [_launch.empty(shape, dtype, dev) for shape, dtype, dev in self.allocs]
        else:
            allocs = [
                torch.empty(shape, dtype=dtype, device=dev) for shape, dtype, dev in self.allocs
            ]
        for a in allocs:
            p = a.data_ptr()
            if p & 15:  # never seen from the caching allocator; the recorded kernels assume it
                return _REFUSED
            ptrs.append(p)
        stream = get_stream(device)
        for fast, head, g0, g1, g2, template, slots in self.launches:
            args = list(template)
            for pos, src in slots:
                args[pos] = ptrs[src]
            fast(g0, g1, g2, stream, *head, *args)
        if self.single is not None:
            return allocs[self.single]
        return _build_result(self.result, allocs)


def _generate(recipe):
    """``recipe.replay`` unrolled into straight-line code for this recipe (no loops, no lists: a
    replay is a few attribute reads, the allocations and the launches). Built with ``exec`` from
    the recipe's own data only, as Triton builds its binder."""
    get_device, get_stream, runtime = _launch._RUNTIME
    ns = {
        "get_device": get_device,
        "get_stream": get_stream,
        "runtime": runtime,
        "chain": _launch._TYPES[2],
        "REFUSED": _REFUSED,
        "DEVICE": recipe.device,
        "EMPTY": _launch.empty if _launch.POISON else torch.empty,
    }
    n_in = recipe.n_in
    src = [
        "def replay(tensors):",
        "    device = get_device()",
        "    if device != DEVICE:",
        "        return REFUSED",
    ]
    for hook in ("launch_enter_hook", "launch_exit_hook"):
        src += [
            f"    h = runtime.{hook}",
            "    if h is not None and (type(h) is not chain or h.calls):",
            "        return REFUSED",
        ]
    ins = [f"i{i}" for i in range(n_in)]
    src += [f"    i{i} = tensors[{i}].data_ptr()" for i in range(n_in)]
    if n_in > 1:
        src.append(f"    if len({{{', '.join(ins)}}}) != {n_in}:")
        src.append("        return REFUSED")
    for j, (shape, dtype, dev) in enumerate(recipe.allocs):
        ns[f"S{j}"], ns[f"D{j}"], ns[f"V{j}"] = shape, dtype, dev
        if _launch.POISON:
            src.append(f"    a{j} = EMPTY(S{j}, D{j}, V{j})")
        else:
            src.append(f"    a{j} = EMPTY(S{j}, dtype=D{j}, device=V{j})")
        src += [f"    p{j} = a{j}.data_ptr()", f"    if p{j} & 15:", "        return REFUSED"]
    src.append("    stream = get_stream(device)")
    names = ins + [f"p{j}" for j in range(len(recipe.allocs))]
    for k, (fast, head, g0, g1, g2, template, slots) in enumerate(recipe.launches):
        ns[f"L{k}"] = fast
        args = [f"{g0}", f"{g1}", f"{g2}", "stream"]
        for h, v in enumerate(head):
            ns[f"H{k}_{h}"] = v
            args.append(f"H{k}_{h}")
        slot_of = dict(slots)
        for pos, v in enumerate(template):
            if pos in slot_of:
                args.append(names[slot_of[pos]])
            elif v is None or type(v) in (int, bool):
                args.append(repr(v))
            else:
                ns[f"C{k}_{pos}"] = v
                args.append(f"C{k}_{pos}")
        src.append(f"    L{k}({', '.join(args)})")

    def expr(p):
        if p[0] == "alloc":
            return f"a{p[1]}"
        if p[0] == "none":
            return "None"
        ns[f"SH{p[1]}"], ns[f"ST{p[1]}"] = p[2], p[3]
        return f"a{p[1]}.as_strided(SH{p[1]}, ST{p[1]})"

    kind, parts = recipe.result
    if kind == "single":
        src.append(f"    return {expr(parts)}")
    else:
        src.append(
            f"    return ({', '.join(expr(p) for p in parts)}{',' if len(parts) == 1 else ''})"
        )
    exec("\n".join(src), ns)  # noqa: S102 - code built above from the recipe's own values
    return ns["replay"]


def _result_plan(out, allocs):
    """How to rebuild ``out`` from fresh allocations: ("alloc", j) | ("view", j, shape, stride) |
    None entries, in a tuple when ``out`` is a tuple. None when ``out`` is anything else."""

    def one(t):
        if t is None:
            return ("none",)
        if not isinstance(t, _Tensor):
            return None
        for j, a in enumerate(allocs):
            if t is a:
                return ("alloc", j)
        for j, a in enumerate(allocs):
            if t.data_ptr() == a.data_ptr() and t.dtype == a.dtype:
                if t.shape == a.shape and t.stride() == a.stride():
                    return ("alloc", j)
                return ("view", j, tuple(t.shape), tuple(t.stride()))
        return None

    if isinstance(out, tuple):
        parts = tuple(one(t) for t in out)
        return None if any(p is None for p in parts) else ("tuple", parts)
    part = one(out)
    return None if part is None else ("single", part)


def _build_result(plan, allocs):
    def one(p):
        if p[0] == "alloc":
            return allocs[p[1]]
        if p[0] == "none":
            return None
        return allocs[p[1]].as_strided(p[2], p[3])

    if plan[0] == "single":
        return one(plan[1])
    return tuple(one(p) for p in plan[1])
