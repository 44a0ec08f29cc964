"""``softmax`` over the last dimension: FP32 math, one cast to the input dtype. "ROWSxWIDTH"."""

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


def softmax_contract(x):
    import torch

    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def softmax_native(x):
    import torch

    return torch.softmax(x, dim=-1)  # FP32 math inside the kernel, one rounding on store


def _inputs(ctx, g):
    return {"x": randn(ctx, g, ctx.shape["rows"], ctx.shape["width"], scale=2.0)}


def _ref(inp, ctx):
    from warpgauge.reference import softmax_ref

    return (softmax_ref(inp["x"]),)


def _grad_ref(inp, grads, ctx, key):
    import torch

    (dy,) = grads
    y64 = torch.softmax(inp["x"].detach().double(), -1)
    dy64 = dy.double()
    return ((y64 * (dy64 - (y64 * dy64).sum(-1, keepdim=True))).to(ctx.dtype),)


def _train_work(ctx):
    r, w, es = ctx.shape["rows"], ctx.shape["width"], ctx.dtype.itemsize
    return 5 * r * w * es, 0, "train: fwd read x, write y; bwd read y, dy, write dx (5 r w es)"


def _plan_call(inp, ctx, plan):
    from warpgauge.kernels import softmax as k

    x = inp["x"]
    return lambda: k.softmax(x, plan=plan)


OPERATOR = Operator(
    "softmax",
    order=10,
    shape_kind="rows",
    relative_check=True,
    make_inputs=_inputs,
    references={"default": _ref},
    work=lambda ctx: kernel_work("softmax", ctx.shape["rows"], ctx.shape["width"], ctx.dtype),
    out_specs=lambda ctx: [((ctx.shape["rows"], ctx.shape["width"]), ctx.dtype)],
    sample="8x1024",
    test_shape="4x300",
    precompile_weight=2.0,
    grad=GradSpec(("x",), _grad_ref, _train_work, lambda ctx: [((ctx.shape["rows"], ctx.shape["width"]), ctx.dtype)]),
    plan_call=_plan_call,
    compile_target=lambda inp, ctx: (softmax_contract, (inp["x"],)),
    # default: hidden sizes of current LLMs (2048 .. 16384, odd ones such as 2880 and 3584),
    # vocabulary widths of real tokenizers (32000, 50257, 128256, 151936, 262144), widths just past
    # a power of two (4097, 32769, 65537), and row counts from 1 to 32768.
    shapes={
        "default": ["32x127", "1x4096", "1024x1024", "4096x2048", "4096x2880", "8192x3584",
                    "16384x4096", "4096x5120", "2048x7168", "32768x8192", "1024x14336",
                    "512x16384", "8x16384", "512x4097", "4x32769", "8192x32000", "128x50257",
                    "100x65537", "64x128256", "1024x151936", "16x262144", "64x131072",
                    "4096x131072", "2x1048576"],
        "quick": ["1024x1024", "4x32769", "16384x4096", "1024x151936"],
        "training": ["32x127", "1024x1024", "16384x4096", "4096x8192", "2048x14336", "512x4097",
                     "4x32769", "64x131072", "8192x32000", "1024x128256"],
        "training_quick": ["1024x1024", "4x32769"],
        "host": ["32x127"],
        "accuracy": ROW_ACCURACY,
        "accuracy_quick": ["32x127", "4x32769"],
        "probe": lambda: probe_rows(11),
    },
)  # fmt: skip


@OPERATOR.provider("warpgauge", "warpgauge softmax", "warpgauge", available=wg_has("softmax"),
                   precompile=True)  # fmt: skip
def _warpgauge(inp, ctx):
    mod, x = wg(), inp["x"]
    return Built(lambda: mod.softmax(x))


@OPERATOR.provider("torch", "torch.softmax(x.float()).to(dtype)", "pytorch", baseline=True)
def _torch(inp, ctx):
    x = inp["x"]
    return Built(lambda: softmax_contract(x))


@OPERATOR.provider("torch_native", "torch.softmax(x)", "pytorch",
                   description="half-precision softmax: FP32 math inside, one rounding")  # fmt: skip
def _native(inp, ctx):
    x = inp["x"]
    return Built(lambda: softmax_native(x))


OPERATOR.compile_lanes()


@OPERATOR.provider("liger", "Liger-Kernel softmax", "peer", precompile=True,
                   available=module_available("liger_kernel", "liger-kernel"))  # fmt: skip
def _liger(inp, ctx):
    fn = peer_import("liger_kernel.ops.softmax").LigerSoftmaxFunction.apply
    x = inp["x"]
    return Built(lambda: fn(x))


def _quack_train(inp, ctx):
    fn = peer_import("quack.softmax").softmax  # autograd.Function: forward and backward kernels
    x = inp["x"]
    return Built(lambda: fn(x))


@OPERATOR.provider("quack", "QuACK softmax", "peer", precompile=True, train=_quack_train,
                   available=module_available("quack", "quack-kernels"))  # fmt: skip
def _quack(inp, ctx):
    fn = peer_import("quack.softmax").softmax
    x = inp["x"]
    return Built(lambda: fn(x))
