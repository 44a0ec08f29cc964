"""``add_rms_norm``: residual add + RMSNorm, returns (y, h). "ROWSxWIDTH"; setting ``eps``.

Contract: h = dtype(float32(x) + float32(r)); y = dtype(float32(h) * rsqrt(mean(float32(h)^2) +
eps) * float32(w)).
"""

from __future__ import annotations

from ._base import (
    Built,
    GradSpec,
    Operator,
    kernel_work,
    module_available,
    peer_import,
    randn,
    wg,
    wg_has,
)
from ._shapes import ROW_ACCURACY, probe_rows


def add_rms_norm_contract(x, r, w, eps: float):
    import torch

    h = (x.float() + r.float()).to(x.dtype)
    hf = h.float()
    y = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)
    return y, h


def add_then_rms_norm(x, r, w, eps: float):
    import torch

    h = x + r
    return torch.nn.functional.rms_norm(h, (h.shape[-1],), w, eps), h


def _eps(ctx) -> float:
    return float(ctx.settings.get("eps", 1e-6))


def _inputs(ctx, g):
    import torch

    r, w = ctx.shape["rows"], ctx.shape["width"]
    weight = (1.0 + 0.25 * torch.randn(w, generator=g, device=ctx.device)).to(ctx.dtype)
    return {"x": randn(ctx, g, r, w), "r": randn(ctx, g, r, w), "w": weight}


def _ref(inp, ctx):
    from warpgauge.reference import add_rms_norm_ref

    y, h = add_rms_norm_ref(inp["x"], inp["r"], inp["w"], _eps(ctx))
    return (y, h)


def _grad_ref(inp, grads, ctx, key):
    """FP64 gradients through the contract's rounded h = dtype(x + r), a straight-through for x
    and r (both get the same gradient)."""
    import torch

    dy, dh = grads
    x, r, w = (inp[k].detach() for k in ("x", "r", "w"))
    h64 = (x.float() + r.float()).to(x.dtype).double().requires_grad_()
    w64 = w.double().requires_grad_()
    with torch.enable_grad():
        y64 = h64 * torch.rsqrt(h64.square().mean(-1, keepdim=True) + _eps(ctx)) * w64
        torch.autograd.backward((y64, h64), (dy.double(), dh.double()))
    dx = h64.grad.to(ctx.dtype)
    return (dx, dx.clone(), w64.grad.to(ctx.dtype))


def _train_work(ctx):
    r, w, es = ctx.shape["rows"], ctx.shape["width"], ctx.dtype.itemsize
    # fwd: read x, r, w; write y, h. bwd: read dy, dh, h, w; write dx (= dr), dw.
    return (9 * r * w + 3 * w) * es, 0, "train: fwd 4 r w + w, bwd 5 r w + 2 w elements (model)"


def _grad_shapes(ctx):
    s = (ctx.shape["rows"], ctx.shape["width"])
    return [(s, ctx.dtype), (s, ctx.dtype), ((ctx.shape["width"],), ctx.dtype)]


def _plan_call(inp, ctx, plan):
    from warpgauge.kernels import rmsnorm as k

    x, r, w, e = inp["x"], inp["r"], inp["w"], _eps(ctx)
    return lambda: k.add_rms_norm(x, r, w, e, plan=plan)


def _compile_target(inp, ctx):
    e = _eps(ctx)

    def fused(x, r, w):
        return add_rms_norm_contract(x, r, w, e)

    return fused, (inp["x"], inp["r"], inp["w"])


def _outs(ctx):
    s = (ctx.shape["rows"], ctx.shape["width"])
    return [(s, ctx.dtype), (s, ctx.dtype)]


OPERATOR = Operator(
    "add_rms_norm",
    order=20,
    shape_kind="rows",
    make_inputs=_inputs,
    references={"default": _ref},
    work=lambda ctx: kernel_work("rmsnorm", ctx.shape["rows"], ctx.shape["width"], ctx.dtype),
    out_specs=_outs,
    sample="8x1024",
    test_shape="4x300",
    settings={"eps": 1e-6},
    precompile_weight=2.0,
    grad=GradSpec(("x", "r", "w"), _grad_ref, _train_work, _grad_shapes),
    plan_call=_plan_call,
    compile_target=_compile_target,
    shapes={
        "default": ["32x127", "1x4096", "1024x1024", "4096x2048", "4096x2880", "8192x3584",
                    "16384x4096", "4096x5120", "2048x7168", "32768x8192", "1024x14336",
                    "512x16384", "8x16384", "512x4097", "4x32769", "8192x32000", "100x65537",
                    "64x131072", "4096x131072", "16x262144"],
        "quick": ["32x127", "1024x1024", "16384x4096", "4x32769"],
        "training": ["32x127", "1024x1024", "16384x4096", "8192x5120", "4096x8192",
                     "2048x14336", "512x4097", "4x32769", "64x131072"],
        "training_quick": ["1024x1024", "4096x8192"],
        "host": ["32x127"],
        "accuracy": ROW_ACCURACY,
        "accuracy_quick": ["32x127", "4x32769"],
        "probe": lambda: probe_rows(12),
    },
)  # fmt: skip


@OPERATOR.provider("warpgauge", "warpgauge add_rms_norm", "warpgauge", precompile=True,
                   available=wg_has("add_rms_norm"))  # fmt: skip
def _warpgauge(inp, ctx):
    mod, x, r, w, e = wg(), inp["x"], inp["r"], inp["w"], _eps(ctx)
    return Built(lambda: mod.add_rms_norm(x, r, w, eps=e))


@OPERATOR.provider("torch", "eager composition (FP32)", "pytorch", baseline=True)
def _torch(inp, ctx):
    x, r, w, e = inp["x"], inp["r"], inp["w"], _eps(ctx)
    return Built(lambda: add_rms_norm_contract(x, r, w, e))


def _has_rms_norm(ctx):
    import torch

    if hasattr(torch.nn.functional, "rms_norm"):
        return None
    return "torch.nn.functional.rms_norm needs torch >= 2.4"


@OPERATOR.provider("torch_rms_norm", "x + r, then F.rms_norm", "pytorch", available=_has_rms_norm)
def _rms_norm(inp, ctx):
    x, r, w, e = inp["x"], inp["r"], inp["w"], _eps(ctx)
    return Built(lambda: add_then_rms_norm(x, r, w, e))


OPERATOR.compile_lanes()


@OPERATOR.provider("liger", "Liger-Kernel fused add + RMSNorm", "peer", precompile=True,
                   available=module_available("liger_kernel", "liger-kernel"))  # fmt: skip
def _liger(inp, ctx):
    fn = peer_import("liger_kernel.ops.fused_add_rms_norm").LigerFusedAddRMSNormFunction.apply
    x, r, w, e = inp["x"], inp["r"], inp["w"], _eps(ctx)
    # casting_mode "gemma": h and w in FP32, one cast of y; offset 0; not in place. An
    # autograd.Function: the same closure trains.
    return Built(lambda: tuple(fn(x, r, w, e, 0.0, "gemma", False)),
                 notes={"casting_mode": "gemma", "offset": 0.0})  # fmt: skip


def _quack_train(inp, ctx):
    """QuACK's autograd path: ``rmsnorm(x, w, residual=r, prenorm=True)`` returns (y, h)."""
    fn = peer_import("quack.rmsnorm").rmsnorm
    x, r, w, e = inp["x"], inp["r"], inp["w"], _eps(ctx)
    return Built(lambda: tuple(fn(x, w, residual=r, eps=e, prenorm=True)),
                 notes={"entry": "quack.rmsnorm.rmsnorm(prenorm=True)"})  # fmt: skip


@OPERATOR.provider("quack", "QuACK rmsnorm (residual)", "peer", precompile=True,
                   train=_quack_train, available=module_available("quack", "quack-kernels"))  # fmt: skip
def _quack(inp, ctx):
    fwd = peer_import("quack.rmsnorm").rmsnorm_fwd
    x, r, w, e = inp["x"], inp["r"], inp["w"], _eps(ctx)

    def run():
        out, residual_out, _ = fwd(x, w, residual=r, eps=e)
        return out, residual_out

    return Built(run)
