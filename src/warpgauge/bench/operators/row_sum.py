"""``row_sum``: the sum of each row, FP32 accumulation, one rounding. Shapes "ROWSxWIDTH"."""

from __future__ import annotations

from ._base import Built, GradSpec, Operator, kernel_work, randn, wg, wg_has
from ._shapes import ROW_ACCURACY


def row_sum_contract(x):
    return x.float().sum(-1).to(x.dtype)


def row_sum_native(x, out=None):
    import torch

    return torch.sum(x, -1, out=out)  # FP32 accumulation for half types, one rounding


def _inputs(ctx, g):
    return {"x": randn(ctx, g, ctx.shape["rows"], ctx.shape["width"])}


def _ref(inp, ctx):
    from warpgauge.reference import row_sum_ref

    return (row_sum_ref(inp["x"], ctx.dtype),)


def _grad_ref(inp, grads, ctx, key):
    (g,) = grads
    return (g.unsqueeze(-1).expand(ctx.shape["rows"], ctx.shape["width"]).contiguous(),)


def _train_work(ctx):
    r, w, es = ctx.shape["rows"], ctx.shape["width"], ctx.dtype.itemsize
    return (2 * r * w + 2 * r) * es, 2 * r * w, "train: read x, write y; broadcast dy to dx"


def _plan_call(inp, ctx, plan):
    from warpgauge.kernels import row_sum as k

    x, dt = inp["x"], ctx.dtype
    return lambda: k.row_sum(x, out_dtype=dt, plan=plan)


OPERATOR = Operator(
    "row_sum",
    order=30,
    shape_kind="rows",
    make_inputs=_inputs,
    references={"default": _ref},
    work=lambda ctx: kernel_work("row_sum", ctx.shape["rows"], ctx.shape["width"], ctx.dtype,
                                 ctx.dtype),  # fmt: skip
    out_specs=lambda ctx: [((ctx.shape["rows"],), ctx.dtype)],
    sample="8x1024",
    test_shape="4x300",
    precompile_weight=1.0,
    grad=GradSpec(("x",), _grad_ref, _train_work, lambda ctx: [((ctx.shape["rows"], ctx.shape["width"]), ctx.dtype)]),
    plan_call=_plan_call,
    compile_target=lambda inp, ctx: (row_sum_contract, (inp["x"],)),
    shapes={
        "default": ["32x127", "512x4097", "4x32769", "16384x4096", "32768x8192", "64x131072",
                    "8192x32000", "100x65537", "1024x151936"],
        "quick": ["512x4097", "16384x4096"],
        "host": ["32x127"],
        "accuracy": ROW_ACCURACY,
    },
)  # fmt: skip


@OPERATOR.provider("warpgauge", "warpgauge row_sum", "warpgauge", available=wg_has("row_sum"),
                   precompile=True)  # fmt: skip
def _warpgauge(inp, ctx):
    mod, x, dt = wg(), inp["x"], ctx.dtype
    return Built(lambda: mod.row_sum(x, out_dtype=dt))


@OPERATOR.provider("torch", "x.float().sum(-1).to(dtype)", "pytorch", baseline=True)
def _torch(inp, ctx):
    x = inp["x"]
    return Built(lambda: row_sum_contract(x))


def _native_train(inp, ctx):
    x = inp["x"]
    return Built(lambda: row_sum_native(x))


@OPERATOR.provider("torch_native", "torch.sum(x, -1, out=)", "pytorch", train=_native_train,
                   description="half-precision sum: FP32 accumulation inside, one rounding")  # fmt: skip
def _native(inp, ctx):
    import torch

    x = inp["x"]
    out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    return Built(lambda: row_sum_native(x, out=out), out_buffers=(out,))


OPERATOR.compile_lanes()
