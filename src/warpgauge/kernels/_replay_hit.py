"""A launcher's replay hit, unrolled: the signature of ``_replay._signature`` for one argument
pattern, the recipe lookup and the replay, in straight-line code without loops or lists.

``_replay._signature`` walks any arguments: per argument a type dispatch, list appends, a tuple
at the end, routing flags. A launcher is called with the same kinds of arguments every time
(``softmax(x)``: one tensor; ``row_sum(x, out_dtype)``: a tensor and a scalar; ``int4_linear``:
a tensor and an ``Int4Weight``), so once a signature of it is recorded, ``build`` generates a
``hit(args)`` for that pattern (as ``_replay`` generates each recipe's replay and Triton its
binder). It returns the recipe's result, ``REFUSED`` (the recipe refused: the caller runs the
launcher), ``NEEDS_GRAD`` (grad mode on, a tensor requires grad, none is meta, every tensor is
plain: ``_signature`` would say the same, and autograd must record the call), ``[result]`` (the
same, and one of its guards matched: the call replayed for the autograd Function to return, see
``_guarded``) or ``MISS``, which sends the call down the general path unchanged.

A ``hit`` is conservative: it returns a result only where the general path would replay the
same recipe. It misses on another number or kind of arguments, a tensor subclass, a meta or
non-CUDA tensor (unless the ``ANY_DEVICE`` test seam is on, as ``_signature`` reads it), a
gradient-tracking tensor with grad mode on, an Int4Weight whose tensors are not plain, while a
recording runs, and with replay or the cached launch off. Its key is built from the same fields
in the same order as ``_signature``'s, and ``build`` checks that on the call it is built from
(key and tensors equal to ``_signature``'s, else no hit is installed).
"""

from __future__ import annotations

import os

import torch

from ..quant import Int4Weight
from . import _launch, _replay

MISS = object()

# The per-tensor part of the signature, as ``_replay._signature`` builds it (checked by build);
# d_{v} is the tensor's data pointer, read once for the key and the replay.
_TENSOR = "{v}.dtype, {v}.shape, {v}.stride(), {v}.get_device(), d_{v} & 15"


def _pattern(args):
    """Per argument: "T" (plain tensor), "S" (a ``_replay._SCALARS`` value), "Q" (an
    Int4Weight); None when an argument is of another kind (no hit for such calls)."""
    kinds = []
    for a in args:
        ta = type(a)
        if ta is torch.Tensor or ta is torch.nn.Parameter:
            kinds.append("T")
        elif ta in _replay._SCALARS:
            kinds.append("S")
        elif ta is Int4Weight:
            kinds.append("Q")
        else:
            return None
    return kinds


def _source(kinds):
    """The body shared by ``hit`` and ``probe``: checks (``return MISS``), then ``key`` and
    ``tensors`` as ``_replay._signature`` builds them; the index (``split``) where, in ``hit``,
    the guarded fast section (``_guarded``), and the grad routing (``_grad_section``) go; the
    names of the tensors' variables (``d_<name>`` holds each one's data pointer), of the plain
    tensor arguments, and the scalar expressions a guard compares."""
    n = len(kinds)
    names = [f"a{i}" for i in range(n)]
    src = [f"    if len(args) != {n}:", "        return MISS"]
    src.append(f"    {', '.join(names)}{',' if n == 1 else ''} = args")
    parts, tensors, plain, scalars = [], [], [], []
    for i, k in enumerate(kinds):
        a = names[i]
        if k == "T":
            src += [
                f"    t = type({a})",
                "    if t is not T and t is not P:",
                "        return MISS",
            ]
            plain.append(a)
            tensors.append(a)
            parts.append(f"({_TENSOR.format(v=a)})")
        elif k == "S":
            src += [f"    s{i} = type({a})", f"    if s{i} not in SCALARS:", "        return MISS"]
            parts.append(f"(s{i}, {a})")
            scalars.append(f"(s{i}, {a})")
        else:
            src += [
                f"    if type({a}) is not Q:",
                "        return MISS",
                f"    p{i}, q{i} = {a}.packed, {a}.scales",
                f"    if type(p{i}) is not T or type(q{i}) is not T:",
                "        return MISS",
            ]
            tensors += [f"p{i}", f"q{i}"]
            parts.append(
                f"(Q, {_TENSOR.format(v=f'p{i}')}, {_TENSOR.format(v=f'q{i}')}, {a}.group_size)"
            )
            scalars.append(f"{a}.group_size")
    # the hit's guarded section (``_guarded``) and the grad routing (``_grad_section``) go
    # here: types checked, nothing read
    split = len(src)
    for i, k in enumerate(kinds):
        if k == "Q":
            src += [
                f"    if not (p{i}.is_cuda and q{i}.is_cuda or RP.ANY_DEVICE):",
                "        return MISS",
            ]
    for a in plain:  # a CUDA tensor is never meta; others only through the test seam
        src += [
            f"    if not {a}.is_cuda and (not RP.ANY_DEVICE or {a}.is_meta):",
            "        return MISS",
        ]
    src += [f"    d_{t} = {t}.data_ptr()" for t in tensors]
    src.append(f"    key = ({', '.join(parts)},)")
    src.append(f"    tensors = ({', '.join(tensors)}{',' if len(tensors) == 1 else ''})")
    return src, tensors, split, plain, scalars


def _guarded(tensors, scalars):
    """The hit's fast section: for each of the launcher's last used recipes (``ENTRIES``, see
    ``_learn``), one C call checks every tensor's exact type, dispatch keys (device type, meta),
    dtype, device index, sizes, strides and requires_grad against those the recipe was
    recorded for (Dynamo's ``TensorGuards``: 0.33 us for three tensors on the CPU machine,
    against 1.5 us to build and look up their key); the scalars and the pointers' 16-byte
    alignment are compared here. Whatever it does not match goes on to the grad routing and the
    key lookup.

    It comes before the grad routing: a guard fixes every tensor's requires_grad (``rg``: one
    of the plain tensors requires grad), so grad mode is read only for such a call. When
    autograd must record the call (``rg`` and grad mode on), the replay's result is returned in
    a one-element list (the public function hands it to its autograd Function, whose forward
    returns it: grad mode does not change what a replay computes; the guards for such tensors
    are those that the Function forward's own grad-off replays learned), and a refusal returns
    NEEDS_GRAD (the Function's forward then meets the same refusal and runs the launcher)."""
    tup = f"({', '.join(tensors)}{',' if len(tensors) == 1 else ''})"
    sc = f"({', '.join(scalars)}{',' if len(scalars) == 1 else ''})"
    # the pointers' 16-byte alignments packed in one int (4 bits per tensor): compared without
    # building a tuple
    al = " | ".join(f"((d_{t} & 15) << {4 * k})" if k else f"(d_{t} & 15)"
                    for k, t in enumerate(tensors))  # fmt: skip
    ptrs = "".join(f", d_{t}" for t in tensors)
    same_sc = f" and {sc} == sc" if scalars else ""  # (no scalars: every entry's sc is ())
    return (
        [
            "    if LA._RECORDING is None and RP.ENABLED and LA.FAST:",
            "        for check, sc, al, replay, cuda, rg in ENTRIES:",
            f"            if check({', '.join(tensors)}){same_sc} and (cuda or RP.ANY_DEVICE):",
            *[f"                d_{t} = {t}.data_ptr()" for t in tensors],
            f"                if ({al}) == al:",
            f"                    out = replay({tup}{ptrs})",
            "                    if rg and grad_enabled():  # autograd records the call",
            "                        if out is REFUSED:",
            "                            return NEEDS_GRAD",
            "                        STATS['replays'] += 1",
            "                        return [out]",
            "                    if out is REFUSED:",
            "                        STATS['refused'] += 1",
            "                        return REFUSED",
            "                    STATS['replays'] += 1",
            "                    return out",
        ],
        sc,
        al,
    )


def _grad_section(plain):
    """As ``_signature``: with grad mode on, a call where a plain tensor requires grad (and none
    is meta: those go to the registered op) is recorded by autograd: NEEDS_GRAD (in ``hit``,
    after its guards: no key lookup for such a call, since a dead functorch wrapper, which the
    guards reject, has no data pointer to read; ``fast_apply`` unwraps it)."""
    if not plain:
        return []
    return [
        "    if grad_enabled():",
        f"        if {' or '.join(f'{a}.requires_grad' for a in plain)}:",
        f"            if {' or '.join(f'{a}.is_meta' for a in plain)}:",
        "                return MISS",
        "            return NEEDS_GRAD",
    ]


MAX_ENTRIES = 4  # recipes a hit checks by guard before the key lookup (most recent first)
# With all entries in use, a key-lookup replay replaces the oldest only every EVICT_EVERY-th
# time: a launcher cycling through more signatures than entries keeps most of them guarded
# instead of evicting the one it needs next on every call; a new phase takes over in a few
# dozen calls.
EVICT_EVERY = 16


def _guard_type():
    """Dynamo's C ``TensorGuards`` when this torch has it and this process sees at most one
    GPU (a guard built here compares device indices too, but with one GPU a CUDA tensor's
    index is always 0: nothing rests on that), else None (no guarded section: the key lookup
    alone, as before)."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    cls = getattr(guards, "TensorGuards", None)
    if cls is None or not hasattr(cls, "check"):
        return None
    if torch.cuda.is_available() and torch.cuda.device_count() > 1:
        return None
    return cls


_MODES_SEEN: dict = {}
_DISPATCH_STACK_LEN = getattr(torch._C, "_len_torch_dispatch_stack", None)


def _guard_sees_modes(cls) -> bool:
    """A guard of ``cls`` built outside any dispatch mode fails while one is active (tried once
    per class, outside any mode: a guard checked inside a do-nothing mode), so a call that
    passed such a guard has no dispatch mode to show its allocations to."""
    seen = _MODES_SEEN.get(cls)
    if seen is None:
        from torch.utils._python_dispatch import TorchDispatchMode

        class _Nothing(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                return func(*args, **(kwargs or {}))

        try:
            with torch._C.DisableTorchFunction():  # (a function mode does not see the probe)
                t = torch.empty(2)
                check = cls(t, dynamic_dims_sizes=None, dynamic_dims_strides=None).check
                with _Nothing():
                    seen = check(t) is False
        except (TypeError, RuntimeError, SystemError):  # pragma: no cover - another torch
            seen = False
        _MODES_SEEN[cls] = seen
    return seen


def _learn(entries, guards, state, key, tensors, sc, al, recipe, rg):
    """After a key lookup found ``recipe``: put a guard that passes on this call's tensors
    first in ``entries``. A key can have several (the key does not hold what else a guard
    compares: requires_grad, a Parameter's type, inference mode's dispatch keys), built once
    each, a few per key. ``state[0]`` counts key-lookup replays while the entries are full."""
    if len(entries) >= MAX_ENTRIES:
        state[0] += 1
        if state[0] % EVICT_EVERY:
            return
    per = guards.get(key)
    e = None
    if per is not None:
        for cand in per:
            if cand[0](*tensors) and cand[2] == al:
                e = cand
                break
    if e is None:
        cls = _guard_type()
        if cls is None or len(guards) >= _replay.MAX_SIGNATURES or (per and len(per) >= 4):
            return
        try:
            check = cls(*tensors, dynamic_dims_sizes=None, dynamic_dims_strides=None).check
        except (TypeError, RuntimeError, SystemError):  # another torch's TensorGuards
            return
        if not check(*tensors):  # pragma: no cover - a guard that rejects its own tensors
            return
        # The recipe's guarded replay (``_replay._generate``: no dispatch-stack read) for a
        # guard built outside any dispatch mode, when this torch's guards fail under one. A
        # guard takes the thread's dispatch state as it is when built: one built under a mode
        # passes under that mode, so it keeps the replay that reads the dispatch stack.
        no_mode = _DISPATCH_STACK_LEN is not None and _DISPATCH_STACK_LEN() == 0
        replay = recipe.gfast if no_mode and _guard_sees_modes(cls) else recipe.fast
        e = (check, sc, al, replay, all(t.is_cuda for t in tensors), bool(rg))
        guards.setdefault(key, []).append(e)
    if e in entries:
        entries.remove(e)
    entries.insert(0, e)
    del entries[MAX_ENTRIES:]


def build(launcher, args, sig, tensors):
    """``hit(args)`` for calls of ``launcher`` with arguments of the kinds of ``args`` (a call
    whose signature ``sig`` has a recipe), or None when ``args`` hold another kind of argument
    or the unrolled signature differs from ``_signature``'s on this call."""
    kinds = _pattern(args)
    if kinds is None or not kinds:
        return None
    body, tensor_names, split, plain, scalars = _source(kinds)
    guarded, sc, al = _guarded(tensor_names, scalars)
    ns = {
        "MISS": MISS,
        "NEEDS_GRAD": _replay.NEEDS_GRAD,
        "T": torch.Tensor,
        "P": torch.nn.Parameter,
        "Q": Int4Weight,
        "SCALARS": frozenset(_replay._SCALARS),
        "RP": _replay,
        "LA": _launch,
        "grad_enabled": torch.is_grad_enabled,
        "PER": _replay._RECIPES[launcher],
        "Recipe": _replay._Recipe,
        "REFUSED": _replay._REFUSED,
        "STATS": _replay.STATS,
        "ENTRIES": [],
        "GUARDS": {},
        "STATE": [0],
        "LEARN": _learn,
    }
    head, tail = body[:split], body[split:]
    probe = ["def probe(args):", *head, *_grad_section(plain), *tail, "    return key, tensors"]
    hit = ["def hit(args):", *head, *guarded, *_grad_section(plain), *tail]
    # ``slow``: the same less the guarded section, for the C hit's every other call
    slow = ["def slow(args):", *head, *_grad_section(plain), *tail]
    rg = " or ".join(f"{a}.requires_grad" for a in plain) or "False"
    lookup = [
        "    if LA._RECORDING is not None or not (RP.ENABLED and LA.FAST):",
        "        return MISS",
        "    recipe = PER.get(key)",
        "    if type(recipe) is not Recipe:",
        "        return MISS",
        f"    out = recipe.fast(tensors{''.join(f', d_{t}' for t in tensor_names)})",
        "    if out is REFUSED:",
        "        STATS['refused'] += 1",
        "        return REFUSED",
        "    STATS['replays'] += 1",
        f"    LEARN(ENTRIES, GUARDS, STATE, key, tensors, {sc}, ({al}), recipe, {rg})",
        "    return out",
    ]
    hit += lookup
    slow += lookup
    exec("\n".join(probe + hit + slow), ns)  # noqa: S102 - built above from the argument kinds only
    got = ns["probe"](args)
    if got is MISS or got is _replay.NEEDS_GRAD or got[0] != sig or list(got[1]) != list(tensors):
        return None
    if any(a is not b for a, b in zip(got[1], tensors)):
        return None
    return _c_hit(kinds, ns) or ns["hit"]


C_HIT = os.environ.get("WARPGAUGE_C_HIT", "1") not in ("", "0")


def _c_hit(kinds, ns):
    """The guarded section in C (``_clauncher.c``'s Hit: the same checks, the same entries list,
    ``slow`` for everything else), or None (``WARPGAUGE_C_HIT=0``, or the extension not built:
    no C compiler, another Python): then the generated Python ``hit``."""
    if not C_HIT or _guard_type() is None:
        return None
    from . import _clauncher

    mod = _clauncher.module()
    if mod is None or not hasattr(mod, "Hit"):
        return None
    return mod.Hit("".join(kinds), ns["ENTRIES"], ns["slow"], _launch, _replay,
                   torch.is_grad_enabled, ns["STATS"], torch.Tensor, torch.nn.Parameter,
                   Int4Weight, ns["SCALARS"], MISS, _replay._REFUSED, _replay.NEEDS_GRAD)  # fmt: skip


def namespace(hit) -> dict:
    """The generated hit's globals (``ENTRIES``, ``GUARDS``, ``STATE``, ...), for a Python hit
    or a C one (whose ``slow`` shares them)."""
    return getattr(hit, "slow", hit).__globals__
