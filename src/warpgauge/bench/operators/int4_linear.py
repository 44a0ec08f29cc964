"""``int4_linear``: y = x @ W^T with W an INT4 weight (symmetric, group 128, BF16 scales).
"MxNxK" (x[M,K] @ W[N,K]^T); setting ``group_size``.

Providers that use a dense copy of W in the activation dtype (dense, unfused, tinygemm, gemlite,
compile lanes) are gated against the reference of that rounded weight (``reference =
"rounded_weight"``); the warpgauge kernel, which dequantizes in FP32, against the exact weight.
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
from ._shapes import probe_mnk

ROUNDED = "rounded_weight"


def dense_linear(x, w):
    import torch

    return torch.nn.functional.linear(x, w)


def int4_values(qweight):
    """The signed INT4 values q (int8, (N, K)) of a warpgauge Int4Weight."""
    from warpgauge.quant import unpack_int4

    return unpack_int4(qweight.packed)


def tinygemm_uint8(q):
    """Signed INT4 values ``q`` (N, K) -> tinygemm's input ``uint8 (N, K/2)``: ``u = q + 8``, the
    even-k value in the HIGH nibble (warpgauge packs it in the low nibble)."""
    import torch

    u = (q.to(torch.int16) + 8).to(torch.uint8)
    return ((u[:, 0::2] << 4) | u[:, 1::2]).contiguous()


def tinygemm_scales_and_zeros(scales):
    """warpgauge scales (N, K/group) -> tinygemm's ``(K/group, N, 2)``: [..., 0] scale, [..., 1]
    zero = 0 (tinygemm adds the zero after scaling: ``(u - 8) * scale + zero``)."""
    import torch

    s = scales.T.contiguous()
    return torch.stack([s, torch.zeros_like(s)], dim=-1).contiguous()


def tinygemm_layout(qweight, inner_k_tiles: int | None = None):
    """Convert a warpgauge Int4Weight into the operands of ``torch._weight_int4pack_mm``.

    tinygemm dequantizes ``(u - 8) * scale + zero`` with ``u`` the unsigned nibble and ``zero``
    an additive offset in the scales' dtype (aten/src/ATen/native/cuda/int4mm.cu). warpgauge's
    symmetric ``q * scale`` is therefore ``u = q + 8`` with ``zero = 0``. The CUDA converter takes
    ``uint8 (N, K/2)`` with the even-k value in the high nibble. The gate proves the conversion:
    a wrong nibble order or zero point fails it. Returns (packed, group, scales_and_zeros).
    """
    import torch

    K = qweight.shape[1]
    if inner_k_tiles is None:
        inner_k_tiles = next(t for t in (8, 4, 2) if K % (t * 16) == 0)
    packed = torch.ops.aten._convert_weight_to_int4pack(
        tinygemm_uint8(int4_values(qweight)), inner_k_tiles
    )
    return packed, qweight.group_size, tinygemm_scales_and_zeros(qweight.scales)


def _gs(ctx) -> int:
    return int(ctx.shape.get("group_size", ctx.settings.get("group_size", 128)))


def _inputs(ctx, g):
    from warpgauge.quant import quantize_int4

    M, N, K = ctx.shape["M"], ctx.shape["N"], ctx.shape["K"]
    w = randn(ctx, g, N, K, scale=0.05)
    qweight = quantize_int4(w, _gs(ctx))
    del w
    return {
        "x": randn(ctx, g, M, K),
        "qweight": qweight,
        "w_rounded": qweight.dequantize(ctx.dtype),  # dense copy, rounded once to the dtype
    }


def _ref_exact(inp, ctx):
    import torch

    from warpgauge.reference import int4_linear_ref

    return (int4_linear_ref(inp["x"], inp["qweight"].dequantize(torch.float32)),)


def _ref_rounded(inp, ctx):
    from warpgauge.reference import int4_linear_ref

    return (int4_linear_ref(inp["x"], inp["w_rounded"].float()),)


def _grad_ref(inp, grads, ctx, key):
    import torch

    (dy,) = grads
    if key == ROUNDED:
        w64 = inp["w_rounded"].double()
    else:
        w64 = inp["qweight"].dequantize(torch.float32).double()
    return ((dy.double() @ w64).to(ctx.dtype),)


def _work(ctx):
    M, N, K = ctx.shape["M"], ctx.shape["N"], ctx.shape["K"]
    return kernel_work("int4", M, N, K, _gs(ctx), ctx.dtype)


def _train_work(ctx):
    M, N, K, es = ctx.shape["M"], ctx.shape["N"], ctx.shape["K"], ctx.dtype.itemsize
    w = N * K // 2 + N * (K // _gs(ctx)) * es
    return 2 * w + 2 * (M * K + M * N) * es, 4 * M * N * K, "train: y and dx = dy W (model)"


OPERATOR = Operator(
    "int4_linear",
    order=60,
    shape_kind="int4",
    make_inputs=_inputs,
    references={"default": _ref_exact, ROUNDED: _ref_rounded},
    work=_work,
    out_specs=lambda ctx: [((ctx.shape["M"], ctx.shape["N"]), ctx.dtype)],
    sample="1x4096x4096",
    test_shape="2x64x256",
    settings={"group_size": 128},
    dtypes=("bfloat16",),
    precompile_weight=4.0,
    grad=GradSpec(("x",), _grad_ref, _train_work, lambda ctx: [((ctx.shape["M"], ctx.shape["K"]), ctx.dtype)]),
    compile_target=lambda inp, ctx: (dense_linear, (inp["x"], inp["w_rounded"])),
    compile_reference=ROUNDED,
    shapes={
        # batch 1 / 4 / 16 (decode), 17-256 (Marlin-class prefill), a vocabulary head.
        "default": ["1x4096x4096", "1x8192x8192", "1x14336x4096", "1x4096x14336", "1x28672x8192",
                    "1x128256x4096", "4x4096x4096", "4x28672x8192", "16x4096x4096",
                    "16x28672x8192", "64x4096x4096", "256x14336x4096", "128x8192x8192"],
        "quick": ["1x4096x4096", "16x14336x4096", "1x128256x4096"],
        "training": ["1x4096x4096", "16x14336x4096"],
        "host": ["1x256x256"],
        "accuracy": ["1x4096x4096", "16x4096x4096", "127x4096x4096", "512x4096x14336",
                     "64x14336x4096"],
        "accuracy_quick": ["1x4096x4096"],
        "probe": lambda: probe_mnk(14, [(256, 512), (4096, 4096), (1024, 4096)],
                                   [(1, 16), (17, 1024)]),
    },
)  # fmt: skip


@OPERATOR.provider("warpgauge", "warpgauge int4_linear", "warpgauge", precompile=True,
                   available=wg_has("int4_linear"))  # fmt: skip
def _warpgauge(inp, ctx):
    mod, x, qw = wg(), inp["x"], inp["qweight"]
    return Built(lambda: mod.int4_linear(x, qw))


@OPERATOR.provider("dense", "F.linear, dense dequantized weight", "pytorch", baseline=True,
                   reference=ROUNDED)  # fmt: skip
def _dense(inp, ctx):
    x, w = inp["x"], inp["w_rounded"]
    return Built(lambda: dense_linear(x, w))


@OPERATOR.provider("unfused", "dequantize, then F.linear", "pytorch", reference=ROUNDED)
def _unfused(inp, ctx):
    x, qw, dt = inp["x"], inp["qweight"], ctx.dtype
    return Built(lambda: dense_linear(x, qw.dequantize(dt)))


def _tinygemm_available(ctx):
    import torch

    if ctx.device.type != "cuda":
        return "tinygemm (torch._weight_int4pack_mm) is a CUDA kernel"
    if not hasattr(torch.ops.aten, "_weight_int4pack_mm"):
        return "this torch has no aten._weight_int4pack_mm"
    if ctx.dtype != torch.bfloat16:
        return "tinygemm takes BF16 activations only"
    N, K = ctx.shape["N"], ctx.shape["K"]
    if N % 8 or K % 32:
        return f"tinygemm needs N % 8 == 0 and K % 32 == 0 (N={N}, K={K})"
    return None


@OPERATOR.provider("tinygemm", "torch._weight_int4pack_mm (tinygemm)", "pytorch",
                   available=_tinygemm_available, reference=ROUNDED, train=False,
                   train_reason="tinygemm has no backward")  # fmt: skip
def _tinygemm(inp, ctx):
    import torch

    x = inp["x"]
    packed, group, sz = tinygemm_layout(inp["qweight"])
    mm = torch.ops.aten._weight_int4pack_mm
    return Built(lambda: mm(x, packed, group, sz),
                 notes={"layout": "u = q + 8 (even k high nibble), zero = 0"})  # fmt: skip


OPERATOR.compile_lanes()


def _gemlite_available(ctx):
    import torch

    reason = module_available("gemlite", "gemlite")(ctx)
    if reason:
        return reason
    if ctx.dtype not in (torch.float16, torch.bfloat16):
        return "gemlite takes FP16/BF16 activations"
    if ctx.shape["K"] % 32:
        return f"gemlite needs K % 32 == 0 (K={ctx.shape['K']})"
    return None


@OPERATOR.provider("gemlite", "gemlite A16W4 (group 128)", "peer", available=_gemlite_available,
                   reference=ROUNDED, precompile=True, train=False,
                   train_reason="gemlite's layer has no backward")  # fmt: skip
def _gemlite(inp, ctx):
    import torch

    core = peer_import("gemlite.core")
    qw, x = inp["qweight"], inp["x"]
    N, K = qw.shape
    gdt = {torch.float16: core.DType.FP16, torch.bfloat16: core.DType.BF16}[ctx.dtype]
    layer = core.GemLiteLinearTriton(
        W_nbits=4, group_size=qw.group_size, in_features=K, out_features=N,
        input_dtype=gdt, output_dtype=gdt,
    )  # fmt: skip
    u = (int4_values(qw).to(torch.int16) + 8).to(torch.uint8).contiguous()
    # Integer zero point 8: gemlite computes ((u - 8) * scale) in the scales' dtype.
    layer.pack(u, qw.scales, 8)
    return Built(lambda: layer(x), notes={"W_group_mode": getattr(layer, "W_group_mode", None)})
