"""``add``: elementwise x + y, FP32 math, one rounding. Shapes are element counts ("257", "16M")."""

from __future__ import annotations

from ._base import Built, GradSpec, Operator, kernel_work, randn, wg, wg_has


def add_contract(x, y):
    return x + y  # half/bfloat16 add computes in FP32 and rounds once


def _inputs(ctx, g):
    n = ctx.shape["numel"]
    return {"x": randn(ctx, g, n), "y": randn(ctx, g, n)}


def _ref(inp, ctx):
    from warpgauge.reference import add_ref

    return (add_ref(inp["x"], inp["y"]),)


def _grad_ref(inp, grads, ctx, key):
    (g,) = grads
    return (g.clone(), g.clone())  # d(x + y)/dx = d(x + y)/dy = 1: the gradient passes through


def _train_work(ctx):
    n, es = ctx.shape["numel"], ctx.dtype.itemsize
    return 3 * n * es, n, "train: read x, y, write out; the gradient passes through (3 n es)"


OPERATOR = Operator(
    "add",
    order=40,
    shape_kind="numel",
    make_inputs=_inputs,
    references={"default": _ref},
    work=lambda ctx: kernel_work("add", ctx.shape["numel"], ctx.dtype),
    out_specs=lambda ctx: [((ctx.shape["numel"],), ctx.dtype)],
    sample="1K",
    test_shape="1000",
    precompile_weight=1.0,
    grad=GradSpec(
        ("x", "y"), _grad_ref, _train_work, lambda ctx: [((ctx.shape["numel"],), ctx.dtype)] * 2
    ),
    compile_target=lambda inp, ctx: (add_contract, (inp["x"], inp["y"])),
    shapes={
        "default": ["257", "1M", "16M", "256M", "3000017"],
        "quick": ["257", "16M"],
        "host": ["4K"],
        "accuracy": ["257", "1M"],
    },
)


@OPERATOR.provider("warpgauge", "warpgauge add", "warpgauge", available=wg_has("add"),
                   precompile=True)  # fmt: skip
def _warpgauge(inp, ctx):
    mod, x, y = wg(), inp["x"], inp["y"]
    return Built(lambda: mod.add(x, y))


def _torch_train(inp, ctx):
    x, y = inp["x"], inp["y"]
    return Built(lambda: add_contract(x, y))


@OPERATOR.provider("torch", "torch.add (out=)", "pytorch", baseline=True, train=_torch_train,
                   description="torch.add(x, y, out=buf): FP32 add, one rounding")  # fmt: skip
def _torch(inp, ctx):
    import torch

    x, y = inp["x"], inp["y"]
    out = torch.empty_like(x)
    return Built(lambda: torch.add(x, y, out=out), out_buffers=(out,))


OPERATOR.compile_lanes()
