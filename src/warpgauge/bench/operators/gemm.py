"""``gemm``: C = A @ B, FP16/BF16 operands, FP32 accumulation, one rounding. "MxNxK" (or N^3).

Layout flags after a comma: ``at`` (A is the transpose of a contiguous (K, M) tensor, a stride
swap), ``bt`` (B likewise from (N, K)), ``sliced`` (A and B are column slices of wider tensors,
so their row strides exceed their widths): "4096x4096x4096,at".
"""

from __future__ import annotations

import math

from ._base import Built, GradSpec, Operator, kernel_work, randn, wg, wg_has
from ._shapes import probe_mnk

SLICE_PAD = 64  # extra columns of the tensors that sliced operands are cut from


def gemm_contract(a, b):
    import torch

    return torch.mm(a, b)


def _operand(ctx, g, rows, cols, transposed: bool, sliced: bool, scale: float = 1.0):
    if transposed:
        t = randn(ctx, g, cols, rows + (SLICE_PAD if sliced else 0), scale=scale)
        return t[:, :rows].T if sliced else t.T
    t = randn(ctx, g, rows, cols + (SLICE_PAD if sliced else 0), scale=scale)
    return t[:, :cols] if sliced else t


def _inputs(ctx, g):
    s = ctx.shape
    M, N, K = s["M"], s["N"], s["K"]
    sliced = bool(s.get("sliced", 0))
    a = _operand(ctx, g, M, K, bool(s.get("at", 0)), sliced)
    b = _operand(ctx, g, K, N, bool(s.get("bt", 0)), sliced, scale=1.0 / math.sqrt(K))
    return {"a": a, "b": b}


def _ref(inp, ctx):
    from warpgauge.reference import gemm_ref

    return (gemm_ref(inp["a"], inp["b"]),)


def _grad_ref(inp, grads, ctx, key):
    (dc,) = grads
    a64, b64, dc64 = inp["a"].detach().double(), inp["b"].detach().double(), dc.double()
    return ((dc64 @ b64.T).to(ctx.dtype), (a64.T @ dc64).to(ctx.dtype))


def _train_work(ctx):
    M, N, K, es = ctx.shape["M"], ctx.shape["N"], ctx.shape["K"], ctx.dtype.itemsize
    return 3 * (M * K + K * N + M * N) * es, 6 * M * N * K, "train: C, dA = dC B^T, dB = A^T dC"


def _grad_shapes(ctx):
    M, N, K = ctx.shape["M"], ctx.shape["N"], ctx.shape["K"]
    return [((M, K), ctx.dtype), ((K, N), ctx.dtype)]


OPERATOR = Operator(
    "gemm",
    order=50,
    shape_kind="mnk",
    make_inputs=_inputs,
    references={"default": _ref},
    work=lambda ctx: kernel_work("gemm", ctx.shape["M"], ctx.shape["N"], ctx.shape["K"],
                                 ctx.dtype),  # fmt: skip
    out_specs=lambda ctx: [((ctx.shape["M"], ctx.shape["N"]), ctx.dtype)],
    sample="128x128x128",
    test_shape="16x24x40",
    precompile_weight=8.0,
    grad=GradSpec(("a", "b"), _grad_ref, _train_work, _grad_shapes),
    compile_target=lambda inp, ctx: (gemm_contract, (inp["a"], inp["b"])),
    shapes={
        # square 256..8192; LLM projections with token counts 1..16384; M, N, K not multiples of
        # 16 (each alone and all together); transposed and sliced operands; M from 1 to 64.
        "default": ["256^3", "1024^3", "4096^3", "8192^3", "1x4096x4096", "16x4096x4096",
                    "64x14336x4096", "4096x14336x4096", "16384x4096x4096", "16384x1024x1024",
                    "4095x4096x4096", "4096x4104x4096", "4096x4096x4100", "4095x4095x4095",
                    "127x255x65", "4096x4096x4096,at", "4096x4096x4096,bt",
                    "4096x4096x4096,sliced"],
        "quick": ["127x255x65", "4096^3", "4096x4104x4096", "16x4096x4096"],
        "training": ["127x255x65", "1024^3", "4096^3", "16384x1024x1024", "4095x4104x4100",
                     "16x4096x4096"],
        "training_quick": ["1024^3"],
        "host": ["64^3"],
        "accuracy": ["127x255x65", "512^3", "1024^3", "4096^3", "16384x1024x1024",
                     "4095x4104x4100", "1024x1024x1024,at", "1024x1024x1024,sliced"],
        "accuracy_quick": ["127x255x65"],
        "probe": lambda: probe_mnk(13, [(255, 1024), (1024, 1024), (1024, 65)],
                                   [(65, 128), (513, 1024)]),
    },
)  # fmt: skip


@OPERATOR.provider("warpgauge", "warpgauge gemm", "warpgauge", available=wg_has("gemm"),
                   precompile=True)  # fmt: skip
def _warpgauge(inp, ctx):
    mod, a, b = wg(), inp["a"], inp["b"]
    return Built(lambda: mod.gemm(a, b))


def _cublas_train(inp, ctx):
    a, b = inp["a"], inp["b"]
    return Built(lambda: gemm_contract(a, b))


@OPERATOR.provider("cublas", "torch.mm (cuBLAS)", "pytorch", baseline=True, train=_cublas_train)
def _cublas(inp, ctx):
    import torch

    a, b = inp["a"], inp["b"]
    out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    return Built(lambda: torch.mm(a, b, out=out), out_buffers=(out,))


OPERATOR.compile_lanes()
