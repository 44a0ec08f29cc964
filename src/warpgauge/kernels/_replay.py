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
  its first element (launchers pass ``x.view(-1, width)``, ``b.t()``, ``packed.view(int32)``),
  or a TMA ``TensorDescriptor`` whose base is one (a replay builds a fresh descriptor with the
  recorded shape, strides and block shape on its own tensor: ``_descriptor``);
- the launcher ran no tensor operation but allocations and views (checked with a dispatch mode
  while recording: a ``zero_()``, a copy from ``.contiguous()`` or an arithmetic fallback
  disqualifies it);
- the result is made of output allocations (or views of them) and ``None``.

A replay is refused (the launcher runs) when the inputs share a data pointer, the current device is
not the recorded one, a launch hook is installed, or a fresh allocation's alignment differs.

``_signature`` is the one signature (the eager entry routes with it too); once a launcher has a
recording, its repeated calls take ``_replay_hit``'s unrolled form of it for their argument
pattern (checked equal to ``_signature``'s when built) and reach ``lookup`` only when that misses.
"""

from __future__ import annotations

import functools
import os
import threading

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..quant import Int4Weight as _Int4Weight
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
    _aten.detach.default,  # packed.view(torch.int32) dispatches it (int4_linear): an alias
    _aten.as_strided.default,
    _aten.slice.Tensor,  # a padded buffer's [:, :C] (gemm's pad and line paths): a view
    _aten._reshape_alias.default,
    _aten.unsqueeze.default,
    _aten.expand.default,
    _aten.zeros.default,  # _launch.zeros (recorded as a zeroed allocation; any other: no source)
}
if _launch.POISON:  # the test mode fills every allocation with NaN; replay does the same
    _ALLOWED |= {_aten.fill_.Scalar}

# ``WARPGAUGE_REPLAY=0`` (or ``ENABLED = False``) turns replay off; it is also off whenever the
# cached launch path is (``_launch.FAST``), since replay launches cached kernels.
ENABLED = os.environ.get("WARPGAUGE_REPLAY", "1") not in ("", "0")
# The replay in one C call (``_clauncher.c``'s Replay) where every launch of a recipe goes through
# warpgauge's C launcher; ``WARPGAUGE_C_REPLAY=0`` keeps the generated Python replay.
C_REPLAY = os.environ.get("WARPGAUGE_C_REPLAY", "1") not in ("", "0")


ANY_DEVICE = False  # a seam: the CPU tests replay CPU tensors (real replays need CUDA tensors)


_RECIPES: dict = {}  # launcher -> {signature: _Recipe | _NEVER}
_HITS: dict = {}  # launcher -> its unrolled hit (``_replay_hit.build``) | False (none for it)
STATS = {"replays": 0, "recorded": 0, "refused": 0, "never": 0}


def clear() -> None:
    _RECIPES.clear()
    _HITS.clear()
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
    __slots__ = ("allocs", "zeroed", "launches", "complete")

    def __init__(self):
        self.allocs = []  # tensors from _launch.empty and _launch.zeros, in order
        self.zeroed = set()  # positions in allocs of _launch.zeros tensors
        self.launches = []  # (entry, (g0, g1, g2), args)
        self.complete = True


NEEDS_OP = object()  # _signature: a meta tensor or a tensor subclass (only the registered op)
NEEDS_GRAD = object()  # _signature: grad on and a plain tensor that requires grad (autograd)


def _signature(args, tensors, grad=False):
    """The replay signature of ``args`` (hashable), appending their tensors (an Int4Weight's
    included) to ``tensors``; the one implementation, which the eager entry (``_eager.eager``)
    also uses to route the call, in the same pass over the arguments.

    Per plain tensor: dtype, shape, strides, device index and the data pointer's offset from a
    16-byte boundary; per ``_SCALARS`` argument: its type and value; an ``Int4Weight``: its two
    tensors' and its group size; another object with ``packed``, ``scales`` and ``group_size``:
    the signature of those. Returns None when an argument is of a kind never replayed (a CPU
    tensor, an unknown object: the launcher runs, and its validation raises where it should),
    ``NEEDS_OP`` for a meta tensor or a tensor subclass among ``args`` (the registered op's fake
    implementation or the subclass handles it), ``NEEDS_GRAD`` when ``grad`` is true and a plain
    tensor requires grad (and none needs the op)."""
    sig = []
    needs_grad = False
    for a in args:
        ta = type(a)
        if ta is _Tensor or ta is _Parameter:
            if grad and a.requires_grad:
                if a.is_meta:
                    return NEEDS_OP
                needs_grad = True
            elif a.is_cuda:  # (never meta: one attribute read less on the common path)
                if sig is not None:
                    tensors.append(a)
                    sig.append((a.dtype, a.shape, a.stride(), a.get_device(), a.data_ptr() & 15))
            elif a.is_meta:
                return NEEDS_OP
            elif sig is not None:
                if ANY_DEVICE:
                    tensors.append(a)
                    sig.append((a.dtype, a.shape, a.stride(), a.get_device(), a.data_ptr() & 15))
                else:
                    sig = None
        elif isinstance(a, _Tensor):
            return NEEDS_OP
        elif sig is None:
            continue
        elif ta in _SCALARS:
            sig.append((ta, a))
        elif ta is _Int4Weight:  # inline: its tensors are part of the signature, never routed
            p, sc = a.packed, a.scales
            if (
                type(p) is _Tensor
                and type(sc) is _Tensor
                and (p.is_cuda and sc.is_cuda or ANY_DEVICE)
            ):
                tensors.append(p)
                tensors.append(sc)
                sig.append((ta, p.dtype, p.shape, p.stride(), p.get_device(), p.data_ptr() & 15,
                            sc.dtype, sc.shape, sc.stride(), sc.get_device(), sc.data_ptr() & 15,
                            a.group_size))  # fmt: skip
            else:
                sig = None
        elif hasattr(a, "packed") and hasattr(a, "scales") and hasattr(a, "group_size"):
            inner = _signature((a.packed, a.scales, a.group_size), tensors)  # shape: packed's
            sig = sig + [(ta, inner)] if type(inner) is tuple else None
        else:
            sig = None
    if needs_grad:
        return NEEDS_GRAD
    return None if sig is None else tuple(sig)


def call(launcher, args, run):
    """``run(launcher, *args)``, or its replay when a recording of this signature exists."""
    tensors = []
    return lookup(launcher, args, run, _signature(args, tensors), tensors)


def lookup(launcher, args, run, sig, tensors):
    """``call`` for a signature already computed by ``_signature`` (anything but a tuple: the
    launcher runs). A hit is tested first: a repeated call costs one dict lookup per level."""
    per = _RECIPES.get(launcher)
    if per is not None and _launch._RECORDING is None:
        recipe = per.get(sig)
        if type(recipe) is _Recipe:
            if ENABLED and _launch.FAST:
                out = recipe.run(tensors)
                if out is not _REFUSED:
                    STATS["replays"] += 1
                    return out
                STATS["refused"] += 1
            return run(launcher, *args)
    if type(sig) is not tuple or _launch._RECORDING is not None or not (ENABLED and _launch.FAST):
        return run(launcher, *args)
    if per is None:
        per = _RECIPES[launcher] = {}
    recipe = per.get(sig)
    if recipe is None:  # first sighting: run it and remember (a one-off shape costs no recording)
        if len(per) < MAX_SIGNATURES:
            per[sig] = _SEEN
        return run(launcher, *args)
    if recipe is _SEEN:  # second sighting: record
        return _record(launcher, args, run, tensors, per, sig)
    return run(launcher, *args)  # _NEVER


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
_FIELD_SCALARS = (int, float, bool, str, type(None))


def _descriptor(a, where):
    """How to rebuild a host tensor descriptor (Triton's ``TensorDescriptor``: ``base`` tensor,
    ``shape``, ``strides``, ``block_shape``, ``padding``) on a replay's own memory: (source slot
    of its base, its type, its other fields). None for any other object, a descriptor whose base
    is not an input or an allocation (or a view at its first element), or one holding anything but
    plain values besides its base.

    The fields are the recorded call's: the launcher builds them from the inputs' shapes and
    strides, the scalar arguments and its plan, all fixed by the signature; only the base pointer
    changes, so each replay launches with a fresh descriptor on its own inputs and outputs (the
    launcher's C wrapper then encodes it, as for any launch)."""
    t = type(a)
    if t.__name__ != "TensorDescriptor" or not t.__module__.startswith("triton."):
        return None
    fields = getattr(a, "__dict__", None)
    base = fields.get("base") if fields is not None else None
    if not isinstance(base, _Tensor):
        return None
    src = where.get(base.data_ptr())
    if src is None:
        return None
    copy = {}
    for k, v in fields.items():
        if k == "base":
            continue
        if isinstance(v, (list, tuple)):
            if not all(type(e) is int for e in v):
                return None
            v = list(v)
        elif type(v) not in _FIELD_SCALARS:
            return None
        copy[k] = v
    return src, t, copy


class _Recipe:
    __slots__ = (
        "device",
        "allocs",
        "zeroed",
        "strides",
        "launches",
        "result",
        "single",
        "n_in",
        "run",
        "fast",
        "gfast",
        "stream",
    )

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
        stream = None  # the stream of a workspace the launches hold (_launch.WORKSPACES)
        for entry, (g0, g1, g2), args in rec.launches:
            template = list(args)
            slots = []  # (position, source): the source's data pointer
            descs = []  # (position, source, type, fields): a fresh descriptor on the source
            for pos, a in enumerate(args):
                if isinstance(a, _Tensor):
                    src = where.get(a.data_ptr())
                    if src is None:
                        ws = _launch.WORKSPACES.get(a.data_ptr())
                        if ws is None or (stream is not None and ws != stream):
                            return None  # a tensor the recipe cannot rebuild (a copy, a view)
                        stream = ws  # a launcher's persistent scratch: a constant pointer
                        template[pos] = a.data_ptr()
                        continue
                    slots.append((pos, src))
                    template[pos] = None
                elif a is None or type(a) in _ARG_SCALARS:
                    continue
                else:
                    d = _descriptor(a, where)
                    if d is None:
                        # An object that holds pointers of its own that the recipe cannot
                        # rebuild: replaying it would launch on the recorded call's memory.
                        return None
                    descs.append((pos, *d))
                    template[pos] = None
            launches.append(
                (entry.fast, entry.head, g0, g1, g2, tuple(template), tuple(slots), tuple(descs))
            )
        result = _result_plan(out, rec.allocs)
        if result is None:
            return None
        self = cls()
        self.device = _launch._RUNTIME[0]()  # the device the recorded launches ran on
        self.stream = stream
        self.allocs = tuple((tuple(t.shape), t.dtype, t.device) for t in rec.allocs)
        self.zeroed = tuple(j in rec.zeroed for j in range(len(rec.allocs)))
        self.strides = tuple(tuple(t.stride()) for t in rec.allocs)
        self.launches = tuple(launches)
        self.result = result
        self.single = result[1][1] if result[0] == "single" and result[1][0] == "alloc" else None
        self.n_in = len(tensors)
        self.fast, self.run, self.gfast = _generate(self)
        return self


def _generate(recipe):
    """The recipe's replay unrolled into straight-line code (no loops, no lists), built with
    ``exec`` from the recipe's own data only, as Triton builds its binder. Returns ``(fast, run,
    gfast)``: ``fast(tensors, i0, i1, ...)`` takes the inputs' data pointers too (the hit has
    read them), ``run(tensors)`` reads them itself, and ``gfast`` is ``fast`` less the
    dispatch-stack read, for a call that passed a guard built outside any dispatch mode (such a
    guard fails under one: ``_replay_hit._learn``). With one CUDA device in the process
    (``_one_device``) neither reads the current device: it cannot differ from the recording's."""
    src, ns = _replay_source(recipe, guarded=False)
    exec("\n".join(src), ns)  # noqa: S102 - code built above from the recipe's own values
    gsrc, gns = _replay_source(recipe, guarded=True)
    exec("\n".join(gsrc), gns)  # noqa: S102 - the same, less the dispatch-stack read
    fast, gfast = ns["replay"], gns["replay"]
    cfast = _c_replay(recipe, ns, guarded=False)
    cgfast = _c_replay(recipe, gns, guarded=True) if cfast is not None else None
    if cfast is not None and cgfast is not None:
        fast, gfast = cfast, cgfast
        ns["replay"] = fast
    n_in = recipe.n_in
    ptrs = "".join(f", tensors[{i}].data_ptr()" for i in range(n_in))
    exec(f"def run(tensors):\n    return replay(tensors{ptrs})", ns)  # noqa: S102
    return fast, ns["run"], gfast


C_REPLAY_FALLBACKS: dict = {}  # why a recipe keeps the Python replay (last reasons, by kind)


def _c_replay(recipe, ns, guarded):
    """The C ``Replay`` doing what the Python replay built from ``ns`` does (same checks, same
    allocators, same launches with the same packed arguments), or None where it cannot: output
    poisoning, a launch not through warpgauge's C launcher, a tensor descriptor, a view in the
    result, launch hooks that are not Triton 3.6's HookChain."""

    def no(why):
        C_REPLAY_FALLBACKS[why] = C_REPLAY_FALLBACKS.get(why, 0) + 1
        return None

    if not C_REPLAY or _launch.POISON:
        return no("off" if not C_REPLAY else "poisoned outputs")
    from . import _clauncher

    mod = _clauncher._STATE.get("module")  # built when a launch took it
    if mod is None or not hasattr(mod, "Replay"):
        return no("no C launcher")
    get_device, get_stream, runtime = _launch._RUNTIME
    chain = _launch._TYPES[2]
    hooks = (
        getattr(runtime, "launch_enter_hook", None),
        getattr(runtime, "launch_exit_hook", None),
    )
    if chain is None or any(type(h) is not chain for h in hooks):
        return no("launch hooks are not a HookChain")
    n_in, n_alloc = recipe.n_in, len(recipe.allocs)
    slow = tuple(ns[f"E{j}"] for j in range(n_alloc))
    direct = [ns.get(f"F{j}") for j in range(n_alloc)]
    if any(f is not None for f in direct):
        fast = tuple(f if f is not None else e for f, e in zip(direct, slow))
        modes = (ns["DET"], ns["FMODES"]) if guarded else (ns["DET"], ns["DMODES"], ns["FMODES"])
    else:
        fast, modes = slow, ()
    launches = []
    for fn, head, g0, g1, g2, template, slots, descs in recipe.launches:
        if fn is not mod.launch or descs or len(head) != 1 or type(head[0]) is not bytes:
            return no("a launch not through the C launcher")
        spec = head[0]
        nargs = _clauncher._HEADER.unpack_from(spec)[5]
        codes = spec[_clauncher._HEADER.size : _clauncher._HEADER.size + nargs].decode("ascii")
        if len(codes) != len(template):
            return no("arguments do not match the spec")
        param = {}
        k = 0
        for pos, c in enumerate(codes):
            if c != "c":
                param[pos] = k
                k += 1
        tpl = list(template)
        for pos, _src in slots:
            if codes[pos] != "p":
                return no("a pointer slot that is not a pointer")
            tpl[pos] = 0
        try:
            packed = mod.pack(spec, *tpl)
        except (TypeError, ValueError, OverflowError):
            return no("a constant the C packing refuses")
        launches.append((spec, g0, g1, g2, packed, tuple(param[p] for p, _ in slots),
                         tuple(s for _, s in slots)))  # fmt: skip
    kind, parts = recipe.result

    def source(part):
        if part[0] == "alloc":
            return n_in + part[1]
        if part[0] == "none":
            return -1
        return None  # a view: the Python replay

    if kind == "single":
        result = source(parts)
        if result is None or result < 0:
            return no("a view or None as the result")
    else:
        result = tuple(source(p) for p in parts)
        if None in result:
            return no("a view in the result")
    one = _one_device(recipe.device)
    try:
        return mod.Replay(n_in, int(recipe.device), None if one else get_device, get_stream,
                          recipe.stream, runtime, hooks, modes, slow, fast, tuple(launches),
                          result, _REFUSED)  # fmt: skip
    except (TypeError, ValueError, OverflowError) as e:  # a recipe outside its limits
        return no(f"not built: {type(e).__name__}: {e}")


def _one_device(device) -> bool:
    """This process sees exactly one CUDA device and ``device`` (a recording's) is it."""
    return bool(device == 0 and torch.cuda.is_available() and torch.cuda.device_count() == 1)


def _replay_source(recipe, guarded):
    """The source lines of ``replay`` (``_generate``) and its namespace."""
    get_device, get_stream, runtime = _launch._RUNTIME
    ns = {
        "get_device": get_device,
        "get_stream": get_stream,
        "runtime": runtime,
        "chain": _launch._TYPES[2],
        "REFUSED": _REFUSED,
        "DEVICE": recipe.device,
        "EMPTY": _launch.empty if _launch.POISON else torch.empty,
        "NEW": object.__new__,
        "DET": _launch.MODE_CHECKS[0],
        "DMODES": _launch.MODE_CHECKS[1],
        "FMODES": _launch.MODE_CHECKS[2],
    }
    n_in = recipe.n_in
    src = [f"def replay(tensors{''.join(f', i{i}' for i in range(n_in))}):"]
    if _one_device(recipe.device):
        src.append("    device = DEVICE")
    else:
        src += ["    device = get_device()", "    if device != DEVICE:", "        return REFUSED"]
    if recipe.stream is not None:  # a workspace serves one stream: refused on any other
        ns["STREAM"] = recipe.stream
        src += ["    if get_stream(device) != STREAM:", "        return REFUSED"]
    for k, hook in enumerate(("launch_enter_hook", "launch_exit_hook")):
        h = getattr(runtime, hook, None)
        if type(h) is ns["chain"]:  # Triton 3.6: a HookChain, empty unless a profiler adds one
            ns[f"HOOK{k}"] = h  # ... or replaces it: either way the replay is refused
            src += [
                f"    if runtime.{hook} is not HOOK{k} or HOOK{k}.calls:",
                "        return REFUSED",
            ]
        else:
            src += [
                f"    h = runtime.{hook}",
                "    if h is not None and (type(h) is not chain or h.calls):",
                "        return REFUSED",
            ]
    ins = [f"i{i}" for i in range(n_in)]
    # i0, i1, ...: the inputs' data pointers, which the unrolled hit read for the signature
    if 1 < n_in <= 4:  # inputs sharing a pointer: pairwise (cheaper than a set up to 6 pairs)
        pairs = [f"{a} == {b}" for k, a in enumerate(ins) for b in ins[k + 1 :]]
        src.append(f"    if {' or '.join(pairs)}:")
        src.append("        return REFUSED")
    elif n_in > 4:
        src.append(f"    if len({{{', '.join(ins)}}}) != {n_in}:")
        src.append("        return REFUSED")
    allocs = recipe.allocs
    zeroed = recipe.zeroed
    direct = [
        None if zero else _launch.direct_empty(shape, strides, dtype, dev, recipe.device)
        for (shape, dtype, dev), strides, zero in zip(allocs, recipe.strides, zeroed)
    ]
    for j, (shape, dtype, dev) in enumerate(allocs):
        if not _launch.POISON or zeroed[j]:
            # torch.empty (torch.zeros for a zeroed allocation) with its sizes (int arguments:
            # parsed faster than a tuple), dtype and device bound once: a partial passes its
            # keywords without building them per call (0.97 against 1.21 us per call on the CPU
            # machine, 1.5 with a tuple of sizes); a 0-d allocation passes its empty tuple
            sizes = tuple(int(d) for d in shape) or ((),)
            new = torch.zeros if zeroed[j] else torch.empty
            ns[f"E{j}"] = functools.partial(new, *sizes, dtype=dtype, device=dev)
        ns[f"F{j}"] = direct[j]
    if _launch.POISON:
        src += [
            f"    a{j} = E{j}()" if zeroed[j] else f"    a{j} = EMPTY(S{j}, D{j}, V{j})"
            for j in range(len(allocs))
        ]
        for j, (shape, dtype, dev) in enumerate(allocs):
            ns[f"S{j}"], ns[f"D{j}"], ns[f"V{j}"] = shape, dtype, dev
    elif any(f is not None for f in direct):
        # The allocator's own entry (``_launch.direct_empty``) where torch.empty's dispatch
        # could not differ from it: not with a dispatch or function mode active (they see and
        # may change torch.empty), nor with deterministic algorithms on (it may then fill).
        modes = "DET() or FMODES()" if guarded else "DET() or DMODES() or FMODES()"
        src.append(f"    if {modes}:")
        src += [f"        a{j} = E{j}()" for j in range(len(allocs))]
        src.append("    else:")
        src += [
            f"        a{j} = {'F' if direct[j] is not None else 'E'}{j}()"
            for j in range(len(allocs))
        ]
    else:
        src += [f"    a{j} = E{j}()" for j in range(len(allocs))]
    for j in range(len(allocs)):
        src += [f"    p{j} = a{j}.data_ptr()", f"    if p{j} & 15:", "        return REFUSED"]
    src.append("    stream = get_stream(device)")
    names = ins + [f"p{j}" for j in range(len(recipe.allocs))]
    objects = [f"tensors[{i}]" for i in range(n_in)] + [f"a{j}" for j in range(len(recipe.allocs))]
    for k, (fast, head, g0, g1, g2, template, slots, descs) in enumerate(recipe.launches):
        ns[f"L{k}"] = fast
        args = [f"{g0}", f"{g1}", f"{g2}", "stream"]
        for h, v in enumerate(head):
            ns[f"H{k}_{h}"] = v
            args.append(f"H{k}_{h}")
        slot_of = dict(slots)
        desc_of = {}
        for pos, source, cls, fields in descs:  # a fresh descriptor on this call's tensor
            name = f"d{k}_{pos}"
            ns[f"T{name}"], ns[f"F{name}"] = cls, fields
            src.append(f"    {name} = NEW(T{name})")
            src.append(f"    {name}.__dict__ = {{**F{name}, 'base': {objects[source]}}}")
            desc_of[pos] = name
        for pos, v in enumerate(template):
            if pos in slot_of:
                args.append(names[slot_of[pos]])
            elif pos in desc_of:
                args.append(desc_of[pos])
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
    return src, ns


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
