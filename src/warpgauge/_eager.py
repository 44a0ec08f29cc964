"""The eager paths of the public functions: direct launches and autograd without the dispatcher.

``ops.py`` routes each public call (``route``): while tracing or compiling, and for tensor
subclasses (fake, functional) and meta tensors, through the registered op; when autograd must
record the call on plain tensors, through the ``torch.autograd.Function`` here, whose forward and
backward call the same launchers directly (the dispatcher's Python custom-op path costs tens of
microseconds per call, per op); otherwise straight to the launcher (``direct``).

Each Function's backward is the registered op's backward (``register_autograd`` in ``ops.py``),
formula for formula: same saved tensors, same kernels. With ``create_graph=True`` (grad mode on in
the backward) it calls the registered backward op instead, which has no derivative of its own,
so a double backward fails the same way on both paths.
"""

from __future__ import annotations

import torch

from ._lazy import LazyModule
from .kernels import _replay, _replay_hit

# The kernel modules import triton (~0.15-0.3 s): imported on the first call, not at import time.
_add = LazyModule("warpgauge.kernels.add")
_gemm = LazyModule("warpgauge.kernels.gemm")
_int4 = LazyModule("warpgauge.kernels.int4")
_rms = LazyModule("warpgauge.kernels.rmsnorm")
_row_sum = LazyModule("warpgauge.kernels.row_sum")
_softmax = LazyModule("warpgauge.kernels.softmax")

DIRECT, GRAD, OP = 0, 1, 2

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_is_compiling = torch.compiler.is_compiling
# vmap/grad transforms wrap plain-looking tensors: their calls take the registered op
_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)

try:  # torch's wrap-triton switch (see _launch): off for eager launches
    from torch._library.triton import wrap_triton_enabled as _wrap_flag
except ImportError:  # pragma: no cover - older/newer torch: fall back to the public switch
    _wrap_flag = None


def route(*tensors) -> int:
    """OP while compiling or under functorch transforms, for tensor subclasses and for meta tensors (the registered op's fake
    implementation gives meta outputs of the right shape and dtype); GRAD when autograd must record
    the call; else DIRECT. A non-tensor argument is DIRECT: the launcher's validation raises the
    clear TypeError (the dispatcher's schema check would raise an unexplained RuntimeError)."""
    if _is_compiling() or _functorch_active():
        return OP
    grad = torch.is_grad_enabled()
    r = DIRECT
    for t in tensors:
        tp = type(t)
        if tp is _Tensor or tp is _Parameter:
            if t.is_meta:
                return OP
            if grad and t.requires_grad:
                r = GRAD
        elif isinstance(t, _Tensor):
            return OP
        else:
            return DIRECT
    return r


def _unwrapped(launcher, *args):
    """Run ``launcher(*args)`` with wrap-triton dispatch off (eager, no tracing)."""
    if _wrap_flag is None:
        from torch._library.triton import set_wrap_triton_enabled

        with set_wrap_triton_enabled(False):
            return launcher(*args)
    prev = getattr(_wrap_flag, "value", True)
    _wrap_flag.value = False
    try:
        return launcher(*args)
    finally:
        _wrap_flag.value = prev


def direct(launcher, *args):
    """The eager call: a replay of an earlier call with the same input signature when there is
    one (``kernels/_replay.py``), else the launcher itself with wrap-triton dispatch off. (The
    autograd Functions' forward and backward: their tensors are plain and grad mode is off.)"""
    hit = _HITS.get(launcher)
    if hit:
        out = hit(args)
        if out is not _MISS and out is not _NEEDS_GRAD:  # (grad mode is off here)
            return out if out is not _REFUSED else _unwrapped(launcher, *args)
    return _general(launcher, args, _signature(args, (tensors := []), False), tensors)


_signature = _replay._signature
_lookup = _replay.lookup
_NEEDS_OP = _replay.NEEDS_OP
_NEEDS_GRAD = _replay.NEEDS_GRAD
_RECIPES = _replay._RECIPES
_HITS = _replay._HITS
_MISS = _replay_hit.MISS
_Recipe = _replay._Recipe
_REFUSED = _replay._REFUSED
_grad_enabled = torch.is_grad_enabled


def eager(module, name, args):
    """A public call's eager entry, for the launcher ``module.name`` (read only on the eager
    path: under Dynamo, a first read of a lazy kernel module would import it inside the traced
    function).

    Returns OP or GRAD (the caller takes the registered op or the autograd Function, as for
    ``route``), a one-element list (autograd must record the call, and the hit has replayed
    it: the caller hands the list to its Function's ``*_replayed`` apply, whose forward
    returns the result; launchers never return lists), else the launcher's result: replayed
    when a recording of this signature exists.
    A repeated call is the launcher's unrolled hit (``kernels/_replay_hit.py``: signature,
    lookup and replay in one straight-line function); anything it does not take (a first
    call, other kinds of arguments, a tensor that needs autograd or the registered op) goes
    through ``_replay._signature``, which routes the tensors and builds the signature in one
    pass, and ``_replay.lookup``. A non-tensor where a tensor belongs gets no signature: the
    launcher's validation then raises its TypeError."""
    if _is_compiling() or _functorch_active():
        return OP
    launcher = getattr(module, name)
    hit = _HITS.get(launcher)
    if hit:
        out = hit(args)
        if out is not _MISS:
            if out is _NEEDS_GRAD:
                return GRAD
            return out if out is not _REFUSED else _unwrapped(launcher, *args)
    tensors = []
    sig = _signature(args, tensors, _grad_enabled())
    if sig is _NEEDS_GRAD:
        return GRAD
    if sig is _NEEDS_OP:
        return OP
    return _general(launcher, args, sig, tensors)


def _general(launcher, args, sig, tensors):
    """``_replay.lookup`` (replay, first sighting, recording, refusal), then the launcher's
    unrolled hit once a recording of one of its signatures exists."""
    out = _lookup(launcher, args, _unwrapped, sig, tensors)
    if launcher not in _HITS and type(sig) is tuple:
        per = _RECIPES.get(launcher)
        if per is not None and type(per.get(sig)) is _Recipe:
            _HITS[launcher] = _replay_hit.build(launcher, args, sig, tensors) or False
    return out


def _backward(op, launcher, *args):
    if torch.is_grad_enabled():  # create_graph=True: the registered op, as register_autograd does
        return op(*args)
    for a in args:
        if isinstance(a, _Tensor) and type(a) is not _Tensor and type(a) is not _Parameter:
            return op(*args)
    return direct(launcher, *args)


def _ops():
    return torch.ops.warpgauge


_base_apply = torch._C._FunctionBase.__dict__["apply"]
_unwrap_if_dead = getattr(getattr(torch._C, "_functorch", None), "unwrap_if_dead", None)
_unwrap = _unwrap_if_dead or (lambda t: t)


def fast_apply(cls, n_args: int):
    """``cls.apply`` for ``n_args`` positional arguments without ``Function.apply``'s Python
    layer (~5 us of host time per call on this project's CPU machine): the C++
    ``_FunctionBase.apply`` bound to ``cls``, after the one thing that layer does for
    ``forward(ctx, ...)``-style Functions outside functorch transforms (which ``eager`` sends to
    the registered op): unwrapping dead functorch wrappers. ``cls.apply`` itself when this torch
    lacks either piece."""
    try:
        bound = _base_apply.__get__(None, cls)
    except (AttributeError, TypeError):  # pragma: no cover - another torch
        return cls.apply
    if _unwrap_if_dead is None:  # pragma: no cover
        return cls.apply
    names = [f"a{i}" for i in range(n_args)]
    body = ", ".join(f"(U({n}) if isinstance({n}, T) else {n})" for n in names)
    ns = {"B": bound, "U": _unwrap_if_dead, "T": _Tensor}
    exec(f"def apply({', '.join(names)}):\n    return B({body})", ns)  # noqa: S102
    return ns["apply"]


# Functions in the ``forward(ctx, ...)`` style: ``apply`` costs ~7 us of host time against ~18 us
# for the ``setup_context`` style (measured on this project's CPU machine), and functorch
# transforms, which need ``setup_context``, never reach them (``route`` sends those to the op).


# Each Function takes one argument more than its op: ``out``, None or the one-element list of
# the forward's result that the launcher's unrolled hit replayed for this call
# (``_replay_hit._grad_section``: the public function got it from ``eager``), which the forward
# then returns instead of looking the recipe up a second time (``direct``). Its backward returns
# None for it.


class Add(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y, out):
        return out[0] if out is not None else direct(_add.add, x, y)

    @staticmethod
    def backward(ctx, grad):
        return grad, grad, None


class RowSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, out_dtype, out):
        ctx.x_meta = (x.shape, x.dtype)  # one attribute: the registered op's x_shape, x_dtype
        return out[0] if out is not None else direct(_row_sum.row_sum, x, out_dtype)

    @staticmethod
    def backward(ctx, grad):
        shape, dtype = ctx.x_meta
        return grad.to(dtype).unsqueeze(-1).expand(shape), None, None


class Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, out):
        y = out[0] if out is not None else direct(_softmax.softmax, x)
        ctx.to_save = (y,)  # what ctx.save_for_backward(y) does, without its Python frame
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return _backward(_ops().softmax_backward, _softmax.softmax_backward, y, grad), None


class AddRmsNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, weight, eps, out):
        y, h = out[0] if out is not None else direct(_rms.add_rms_norm, x, residual, weight, eps)
        ctx.eps = eps
        ctx.to_save = (h, weight)  # ctx.save_for_backward(h, weight)
        # as register_autograd: an unused output's grad is None (ctx.set_materialize_grads(False))
        ctx.materialize_grads = False
        return y, h

    @staticmethod
    def backward(ctx, dy, dh):
        h, weight = ctx.saved_tensors
        if dy is None:
            dy = torch.zeros_like(h)
        need_dw = ctx.needs_input_grad[2]
        if torch.is_grad_enabled():  # create_graph=True: the registered op, as register_autograd
            dx, dw = _ops().add_rms_norm_backward(dy, dh, h, weight, ctx.eps)
        else:  # a frozen weight costs no dw work
            dx, dw = direct(_rms.add_rms_norm_backward, dy, dh, h, weight, ctx.eps, True, need_dw)
        return dx, dx, dw if need_dw else None, None, None


class Gemm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, out):
        ctx.to_save = (a, b)  # ctx.save_for_backward(a, b)
        return out[0] if out is not None else direct(_gemm.gemm, a, b)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        ops = _ops()
        need_a, need_b = ctx.needs_input_grad[:2]
        da = _backward(ops.gemm_grad_a, _gemm.gemm_grad_a, grad, b) if need_a else None
        db = _backward(ops.gemm_grad_b, _gemm.gemm_grad_b, grad, a) if need_b else None
        return da, db, None


class Int4Linear(torch.autograd.Function):
    """``apply(x, (packed, scales, group_size, qweight), out)``: the frozen weight as one
    non-tensor argument (gradients flow to ``x`` only), so ``apply`` unpacks one tensor input,
    not three arguments (-0.3 us per call on the CPU machine). ``packed`` and ``scales`` are
    saved as the registered op saves them (``save_for_backward``: version-checked, seen by
    saved-tensor hooks). The forward runs the public launcher ``int4_linear(x, qweight)``, the
    one whose hit the public call tries (so its replay there learns the guard that lets the
    next such call's hit replay it for autograd), unless unwrapping changed a tensor."""

    @staticmethod
    def forward(ctx, x, weight, out):
        packed, scales, group_size, qweight = weight
        p, s = _unwrap(packed), _unwrap(scales)  # dead functorch wrappers, as apply unwraps
        ctx.group_size = group_size
        ctx.to_save = (p, s)  # ctx.save_for_backward(packed, scales)
        if out is not None:
            return out[0]
        if p is packed and s is scales:
            return direct(_int4.int4_linear, x, qweight)
        return direct(_int4.int4_linear_packed, x, p, s, group_size)

    @staticmethod
    def backward(ctx, grad):
        packed, scales = ctx.saved_tensors
        dx = _backward(
            _ops().int4_linear_grad_input,
            _int4.int4_linear_grad_input_packed,
            grad,
            packed,
            scales,
            ctx.group_size,
        )
        return dx, None, None


def replayed_apply(cls):
    """``cls.apply`` for a call whose forward the launcher's hit has replayed (``eager``
    returned ``[out]``): the C++ ``_FunctionBase.apply`` bound to ``cls``, without
    ``fast_apply``'s unwrapping (every tensor of such a call passed a replay guard, which
    compares its dispatch keys: no functorch wrapper, dead or alive, gets there)."""
    try:
        return _base_apply.__get__(None, cls)
    except (AttributeError, TypeError):  # pragma: no cover - another torch
        return cls.apply


add_apply, add_replayed = fast_apply(Add, 3), replayed_apply(Add)
row_sum_apply, row_sum_replayed = fast_apply(RowSum, 3), replayed_apply(RowSum)
softmax_apply, softmax_replayed = fast_apply(Softmax, 2), replayed_apply(Softmax)
add_rms_norm_apply = fast_apply(AddRmsNorm, 5)
add_rms_norm_replayed = replayed_apply(AddRmsNorm)
gemm_apply, gemm_replayed = fast_apply(Gemm, 3), replayed_apply(Gemm)
int4_linear_apply = fast_apply(Int4Linear, 3)
int4_linear_replayed = replayed_apply(Int4Linear)
