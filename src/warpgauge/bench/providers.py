"""Operators and the providers that compute them.

An :class:`OpSpec` knows how to make an operator's seeded inputs, its FP64 references, its
analytical work model and the shapes of its outputs. Each :class:`Provider` is a factory: given
the inputs it returns a closure that computes the operator once, so all setup (weight
conversion, module construction) happens in the factory and is never timed. Compilation and
autotuning happen on the closure's first call, which is the gate call.

Families (docs/methodology.md, "Providers"): ``warpgauge`` (this package's kernels), ``pytorch``
(eager PyTorch, cuBLAS, tinygemm), ``compile`` (``torch.compile`` of the eager contract, one
provider per mode), ``peer`` (Liger-Kernel, QuACK, gemlite). "Best PyTorch" is the fastest ok
provider of family pytorch or compile. One provider per operator is the baseline.

Every provider computes the operator's numerical contract (design.md) on the same inputs:

- softmax: FP32 math, one cast to the input dtype.
- add_rms_norm: h = dtype(float32(x) + float32(r)); y = dtype(float32(h) * rsqrt(mean(float32(h)^2)
  + eps) * float32(w)); returns (y, h).
- row_sum: FP32 accumulation, one rounding to the input dtype.  add: FP32 add, one rounding.
- gemm: C = A @ B, FP32 accumulation.
- int4_linear: y = x @ W^T with W the INT4 weight (group 128, BF16 scales). Providers that use a
  dense copy of W in the activation dtype (dense, unfused, tinygemm, gemlite, compile lanes) are
  gated against the reference of that rounded weight (``reference = "rounded_weight"``); the
  warpgauge kernel, which dequantizes in FP32, against the exact weight.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

DTYPE_BY_NAME = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
FAMILIES = ("warpgauge", "pytorch", "compile", "peer")
COMPILE_PROVIDERS = {
    "default": ("compile", "torch.compile"),
    "max-autotune": ("compile_max_autotune", "torch.compile max-autotune"),
    "max-autotune-no-cudagraphs": (
        "compile_max_autotune_no_cudagraphs",
        "torch.compile max-autotune-no-cudagraphs",
    ),
    "reduce-overhead": ("compile_reduce_overhead", "torch.compile reduce-overhead"),
}


@dataclass(frozen=True)
class BuildContext:
    op: str
    dtype: torch.dtype
    shape: Mapping[str, int]
    settings: Mapping[str, Any]
    device: torch.device

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).replace("torch.", "")


@dataclass
class Built:
    """A provider's closure plus what the harness needs to know about it."""

    fn: Callable[[], Any]
    out_buffers: tuple = ()  # tensors the closure writes into (poisoned before the gate call)
    notes: dict = field(default_factory=dict)  # recorded in the provider's ``extra``


def _always(ctx: BuildContext) -> str | None:
    return None


@dataclass(frozen=True)
class Provider:
    name: str
    label: str
    family: str
    build: Callable[[dict, BuildContext], Built]
    baseline: bool = False
    available: Callable[[BuildContext], str | None] = _always
    reference: str = "default"
    graph_safe: bool = True  # False: never captured into our CUDA graph (timed per call)
    precompile: bool = False  # warm the compile caches in a worker process first
    compile_mode: str | None = None
    description: str = ""


@dataclass(frozen=True)
class OpSpec:
    name: str
    make_inputs: Callable[[BuildContext, torch.Generator], dict]
    references: Mapping[str, Callable[[dict, BuildContext], tuple]]
    work: Callable[[BuildContext], tuple[int, int, str]]  # (bytes, flops, model name)
    out_specs: Callable[[BuildContext], list[tuple[tuple[int, ...], torch.dtype]]]
    providers: tuple[Provider, ...]
    # Gate with reference.compare(relative=True): for outputs whose small values matter as much as
    # the peak (probabilities), so that a provider zeroing small entries fails.
    relative_check: bool = False

    def provider(self, name: str) -> Provider:
        for p in self.providers:
            if p.name == name:
                return p
        raise KeyError(f"{self.name} has no provider {name!r}")


# ------------------------------------------------------------------------------------ contracts
# The eager contracts, written once: eager providers call them, compile lanes compile them.


def add_contract(x, y):
    return x + y  # half/bfloat16 add computes in FP32 and rounds once


def row_sum_contract(x):
    return x.float().sum(-1).to(x.dtype)


def row_sum_native(x, out=None):
    return torch.sum(x, -1, out=out)  # FP32 accumulation for half types, one rounding


def softmax_contract(x):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


def softmax_native(x):
    return torch.softmax(x, dim=-1)  # FP32 math inside the kernel, one rounding on store


def add_rms_norm_contract(x, r, w, eps: float):
    h = (x.float() + r.float()).to(x.dtype)
    hf = h.float()
    y = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)
    return y, h


def add_then_rms_norm(x, r, w, eps: float):
    h = x + r
    return torch.nn.functional.rms_norm(h, (h.shape[-1],), w, eps), h


def gemm_contract(a, b):
    return torch.mm(a, b)


def dense_linear(x, w):
    return torch.nn.functional.linear(x, w)


# ------------------------------------------------------------------------------------ helpers


def _wg():
    import warpgauge

    return warpgauge


def _wg_has(fn_name: str) -> Callable[[BuildContext], str | None]:
    def check(ctx: BuildContext) -> str | None:
        try:
            wg = _wg()
        except Exception as e:  # pragma: no cover - the package itself failed to import
            return f"import warpgauge failed: {type(e).__name__}: {e}"
        if not hasattr(wg, fn_name):
            return f"warpgauge.{fn_name} is not in this build of warpgauge"
        return None

    return check


def _module_available(module: str, pip_name: str) -> Callable[[BuildContext], str | None]:
    def check(ctx: BuildContext) -> str | None:
        if ctx.device.type != "cuda":
            return f"{pip_name} needs a CUDA device"
        try:
            if importlib.util.find_spec(module) is None:
                return f"{pip_name} is not installed (pip install {pip_name})"
        except (ImportError, ValueError) as e:
            return f"{pip_name} cannot be located: {e}"
        return None

    return check


def _import(module: str):
    """Import a peer's module; an import failure is reported as the provider's error."""
    return importlib.import_module(module)


def _compile_available(ctx: BuildContext) -> str | None:
    if ctx.device.type != "cuda":
        return "torch.compile lanes are measured on a CUDA device only"
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed (Inductor's GPU backend needs it)"
    return None


def _compile(fn: Callable, mode: str) -> Callable:
    kwargs: dict[str, Any] = {"fullgraph": True, "dynamic": False}
    if mode != "default":
        kwargs["mode"] = mode
    return torch.compile(fn, **kwargs)


def compile_providers(target: Callable[[dict, BuildContext], tuple[Callable, tuple]], modes,
                      reference: str = "default") -> tuple[Provider, ...]:  # fmt: skip
    """One provider per torch.compile mode, each compiling the same eager contract.

    ``target(inputs, ctx)`` returns (function to compile, its arguments). Shapes are static
    (``dynamic=False``): each shape gets the kernel a user compiling for that shape would get.
    The ``max-autotune`` mode wraps its result in Inductor's own CUDA graphs, which cannot be
    nested inside ours, so that lane is timed per call (``graph_safe=False``).
    """
    out = []
    for mode in modes:
        name, label = COMPILE_PROVIDERS[mode]

        def build(inputs, ctx, _mode=mode):
            fn, args = target(inputs, ctx)
            compiled = _compile(fn, _mode)
            return Built(lambda: compiled(*args), notes={"compile_mode": _mode})

        out.append(
            Provider(
                name=name,
                label=label,
                family="compile",
                build=build,
                available=_compile_available,
                reference=reference,
                graph_safe=mode not in ("max-autotune", "reduce-overhead"),
                precompile=True,
                compile_mode=mode,
                description=f"torch.compile(mode={mode!r}, fullgraph=True, dynamic=False) of the eager contract",
            )
        )
    return tuple(out)


def _randn(ctx: BuildContext, g: torch.Generator, *shape, scale: float = 1.0) -> torch.Tensor:
    t = torch.randn(*shape, generator=g, device=ctx.device, dtype=torch.float32)
    if scale != 1.0:
        t.mul_(scale)
    return t.to(ctx.dtype)


def _work(module: str, *args) -> tuple[int, int, str]:
    mod = importlib.import_module(f"warpgauge.kernels.{module}")
    w = mod.work(*args)
    return int(w.bytes), int(w.flops), f"warpgauge.kernels.{module}.work"


# ------------------------------------------------------------------------------------ add


def _add_spec(modes) -> OpSpec:
    def inputs(ctx, g):
        n = ctx.shape["numel"]
        return {"x": _randn(ctx, g, n), "y": _randn(ctx, g, n)}

    def ref(inp, ctx):
        from warpgauge.reference import add_ref

        return (add_ref(inp["x"], inp["y"]),)

    def build_wg(inp, ctx):
        wg, x, y = _wg(), inp["x"], inp["y"]
        return Built(lambda: wg.add(x, y))

    def build_torch(inp, ctx):
        x, y = inp["x"], inp["y"]
        out = torch.empty_like(x)
        return Built(lambda: torch.add(x, y, out=out), out_buffers=(out,))

    return OpSpec(
        name="add",
        make_inputs=inputs,
        references={"default": ref},
        work=lambda ctx: _work("add", ctx.shape["numel"], ctx.dtype),
        out_specs=lambda ctx: [((ctx.shape["numel"],), ctx.dtype)],
        providers=(
            Provider("warpgauge", "warpgauge add", "warpgauge", build_wg,
                     available=_wg_has("add"), precompile=True),
            Provider("torch", "torch.add (out=)", "pytorch", build_torch, baseline=True,
                     description="torch.add(x, y, out=buf): FP32 add, one rounding"),
            *compile_providers(lambda inp, ctx: (add_contract, (inp["x"], inp["y"])), modes),
        ),
    )  # fmt: skip


# ------------------------------------------------------------------------------------ row_sum


def _row_sum_spec(modes) -> OpSpec:
    def inputs(ctx, g):
        return {"x": _randn(ctx, g, ctx.shape["rows"], ctx.shape["width"])}

    def ref(inp, ctx):
        from warpgauge.reference import row_sum_ref

        return (row_sum_ref(inp["x"], ctx.dtype),)

    def build_wg(inp, ctx):
        wg, x = _wg(), inp["x"]
        return Built(lambda: wg.row_sum(x, out_dtype=ctx.dtype))

    def build_contract(inp, ctx):
        x = inp["x"]
        return Built(lambda: row_sum_contract(x))

    def build_native(inp, ctx):
        x = inp["x"]
        out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
        return Built(lambda: row_sum_native(x, out=out), out_buffers=(out,))

    return OpSpec(
        name="row_sum",
        make_inputs=inputs,
        references={"default": ref},
        work=lambda ctx: _work("row_sum", ctx.shape["rows"], ctx.shape["width"], ctx.dtype, ctx.dtype),
        out_specs=lambda ctx: [((ctx.shape["rows"],), ctx.dtype)],
        providers=(
            Provider("warpgauge", "warpgauge row_sum", "warpgauge", build_wg,
                     available=_wg_has("row_sum"), precompile=True),
            Provider("torch", "x.float().sum(-1).to(dtype)", "pytorch", build_contract, baseline=True),
            Provider("torch_native", "torch.sum(x, -1, out=)", "pytorch", build_native,
                     description="half-precision sum: FP32 accumulation inside, one rounding"),
            *compile_providers(lambda inp, ctx: (row_sum_contract, (inp["x"],)), modes),
        ),
    )  # fmt: skip


# ------------------------------------------------------------------------------------ softmax


def _softmax_spec(modes) -> OpSpec:
    def inputs(ctx, g):
        return {"x": _randn(ctx, g, ctx.shape["rows"], ctx.shape["width"], scale=2.0)}

    def ref(inp, ctx):
        from warpgauge.reference import softmax_ref

        return (softmax_ref(inp["x"]),)

    def build_wg(inp, ctx):
        wg, x = _wg(), inp["x"]
        return Built(lambda: wg.softmax(x))

    def build_contract(inp, ctx):
        x = inp["x"]
        return Built(lambda: softmax_contract(x))

    def build_native(inp, ctx):
        x = inp["x"]
        return Built(lambda: softmax_native(x))

    def build_liger(inp, ctx):
        fn = _import("liger_kernel.ops.softmax").LigerSoftmaxFunction.apply
        x = inp["x"]
        return Built(lambda: fn(x))

    def build_quack(inp, ctx):
        fn = _import("quack.softmax").softmax
        x = inp["x"]
        return Built(lambda: fn(x))

    rows_out = lambda ctx: [((ctx.shape["rows"], ctx.shape["width"]), ctx.dtype)]  # noqa: E731
    return OpSpec(
        name="softmax",
        relative_check=True,
        make_inputs=inputs,
        references={"default": ref},
        work=lambda ctx: _work("softmax", ctx.shape["rows"], ctx.shape["width"], ctx.dtype),
        out_specs=rows_out,
        providers=(
            Provider("warpgauge", "warpgauge softmax", "warpgauge", build_wg,
                     available=_wg_has("softmax"), precompile=True),
            Provider("torch", "torch.softmax(x.float()).to(dtype)", "pytorch", build_contract,
                     baseline=True),
            Provider("torch_native", "torch.softmax(x)", "pytorch", build_native,
                     description="half-precision softmax: FP32 math inside, one rounding"),
            *compile_providers(lambda inp, ctx: (softmax_contract, (inp["x"],)), modes),
            Provider("liger", "Liger-Kernel softmax", "peer", build_liger,
                     available=_module_available("liger_kernel", "liger-kernel"), precompile=True),
            Provider("quack", "QuACK softmax", "peer", build_quack,
                     available=_module_available("quack", "quack-kernels"), precompile=True),
        ),
    )  # fmt: skip


# ------------------------------------------------------------------------------------ add_rms_norm


def _rmsnorm_spec(modes) -> OpSpec:
    def inputs(ctx, g):
        r, w = ctx.shape["rows"], ctx.shape["width"]
        weight = (1.0 + 0.25 * torch.randn(w, generator=g, device=ctx.device)).to(ctx.dtype)
        return {"x": _randn(ctx, g, r, w), "r": _randn(ctx, g, r, w), "w": weight}

    def eps(ctx) -> float:
        return float(ctx.settings.get("eps", 1e-6))

    def ref(inp, ctx):
        from warpgauge.reference import add_rms_norm_ref

        y, h = add_rms_norm_ref(inp["x"], inp["r"], inp["w"], eps(ctx))
        return (y, h)

    def build_wg(inp, ctx):
        wg, x, r, w, e = _wg(), inp["x"], inp["r"], inp["w"], eps(ctx)
        return Built(lambda: wg.add_rms_norm(x, r, w, eps=e))

    def build_contract(inp, ctx):
        x, r, w, e = inp["x"], inp["r"], inp["w"], eps(ctx)
        return Built(lambda: add_rms_norm_contract(x, r, w, e))

    def build_rms_norm(inp, ctx):
        x, r, w, e = inp["x"], inp["r"], inp["w"], eps(ctx)
        return Built(lambda: add_then_rms_norm(x, r, w, e))

    def build_liger(inp, ctx):
        fn = _import("liger_kernel.ops.fused_add_rms_norm").LigerFusedAddRMSNormFunction.apply
        x, r, w, e = inp["x"], inp["r"], inp["w"], eps(ctx)
        # casting_mode "gemma": h and w in FP32, one cast of y; offset 0; not in place.
        return Built(lambda: tuple(fn(x, r, w, e, 0.0, "gemma", False)),
                     notes={"casting_mode": "gemma", "offset": 0.0})  # fmt: skip

    def build_quack(inp, ctx):
        fwd = _import("quack.rmsnorm").rmsnorm_fwd
        x, r, w, e = inp["x"], inp["r"], inp["w"], eps(ctx)

        def run():
            out, residual_out, _ = fwd(x, w, residual=r, eps=e)
            return out, residual_out

        return Built(run)

    def compile_target(inp, ctx):
        e = eps(ctx)

        def fused(x, r, w):
            return add_rms_norm_contract(x, r, w, e)

        return fused, (inp["x"], inp["r"], inp["w"])

    def outs(ctx):
        s = (ctx.shape["rows"], ctx.shape["width"])
        return [(s, ctx.dtype), (s, ctx.dtype)]

    return OpSpec(
        name="add_rms_norm",
        make_inputs=inputs,
        references={"default": ref},
        work=lambda ctx: _work("rmsnorm", ctx.shape["rows"], ctx.shape["width"], ctx.dtype),
        out_specs=outs,
        providers=(
            Provider("warpgauge", "warpgauge add_rms_norm", "warpgauge", build_wg,
                     available=_wg_has("add_rms_norm"), precompile=True),
            Provider("torch", "eager composition (FP32)", "pytorch", build_contract, baseline=True),
            Provider("torch_rms_norm", "x + r, then F.rms_norm", "pytorch", build_rms_norm,
                     available=lambda ctx: None if hasattr(torch.nn.functional, "rms_norm")
                     else "torch.nn.functional.rms_norm needs torch >= 2.4"),
            *compile_providers(compile_target, modes),
            Provider("liger", "Liger-Kernel fused add + RMSNorm", "peer", build_liger,
                     available=_module_available("liger_kernel", "liger-kernel"), precompile=True),
            Provider("quack", "QuACK rmsnorm (residual)", "peer", build_quack,
                     available=_module_available("quack", "quack-kernels"), precompile=True),
        ),
    )  # fmt: skip


# ------------------------------------------------------------------------------------ gemm


def _gemm_spec(modes) -> OpSpec:
    def inputs(ctx, g):
        M, N, K = ctx.shape["M"], ctx.shape["N"], ctx.shape["K"]
        return {"a": _randn(ctx, g, M, K), "b": _randn(ctx, g, K, N)}

    def ref(inp, ctx):
        from warpgauge.reference import gemm_ref

        return (gemm_ref(inp["a"], inp["b"]),)

    def build_wg(inp, ctx):
        wg, a, b = _wg(), inp["a"], inp["b"]
        return Built(lambda: wg.gemm(a, b))

    def build_cublas(inp, ctx):
        a, b = inp["a"], inp["b"]
        out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
        return Built(lambda: torch.mm(a, b, out=out), out_buffers=(out,))

    return OpSpec(
        name="gemm",
        make_inputs=inputs,
        references={"default": ref},
        work=lambda ctx: _work("gemm", ctx.shape["M"], ctx.shape["N"], ctx.shape["K"], ctx.dtype),
        out_specs=lambda ctx: [((ctx.shape["M"], ctx.shape["N"]), ctx.dtype)],
        providers=(
            Provider("warpgauge", "warpgauge gemm", "warpgauge", build_wg,
                     available=_wg_has("gemm"), precompile=True),
            Provider("cublas", "torch.mm (cuBLAS)", "pytorch", build_cublas, baseline=True),
            *compile_providers(lambda inp, ctx: (gemm_contract, (inp["a"], inp["b"])), modes),
        ),
    )  # fmt: skip


# ------------------------------------------------------------------------------------ int4_linear


def int4_values(qweight) -> torch.Tensor:
    """The signed INT4 values q (int8, (N, K)) of a warpgauge Int4Weight."""
    from warpgauge.quant import unpack_int4

    return unpack_int4(qweight.packed)


def tinygemm_uint8(q: torch.Tensor) -> torch.Tensor:
    """Signed INT4 values ``q`` (N, K) -> tinygemm's input ``uint8 (N, K/2)``: ``u = q + 8``, the
    even-k value in the HIGH nibble (warpgauge packs it in the low nibble)."""
    u = (q.to(torch.int16) + 8).to(torch.uint8)
    return ((u[:, 0::2] << 4) | u[:, 1::2]).contiguous()


def tinygemm_scales_and_zeros(scales: torch.Tensor) -> torch.Tensor:
    """warpgauge scales (N, K/group) -> tinygemm's ``(K/group, N, 2)``: [..., 0] scale, [..., 1]
    zero = 0 (tinygemm adds the zero after scaling: ``(u - 8) * scale + zero``)."""
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
    K = qweight.shape[1]
    if inner_k_tiles is None:
        inner_k_tiles = next(t for t in (8, 4, 2) if K % (t * 16) == 0)
    packed = torch.ops.aten._convert_weight_to_int4pack(
        tinygemm_uint8(int4_values(qweight)), inner_k_tiles
    )
    return packed, qweight.group_size, tinygemm_scales_and_zeros(qweight.scales)


def _int4_spec(modes) -> OpSpec:
    def inputs(ctx, g):
        M, N, K = ctx.shape["M"], ctx.shape["N"], ctx.shape["K"]
        gs = ctx.shape.get("group_size", ctx.settings.get("group_size", 128))
        from warpgauge.quant import quantize_int4

        w = _randn(ctx, g, N, K, scale=0.05)
        qweight = quantize_int4(w, gs)
        del w
        return {
            "x": _randn(ctx, g, M, K),
            "qweight": qweight,
            "w_rounded": qweight.dequantize(ctx.dtype),  # dense copy, rounded once to the dtype
        }

    def ref_exact(inp, ctx):
        from warpgauge.reference import int4_linear_ref

        return (int4_linear_ref(inp["x"], inp["qweight"].dequantize(torch.float32)),)

    def ref_rounded(inp, ctx):
        from warpgauge.reference import int4_linear_ref

        return (int4_linear_ref(inp["x"], inp["w_rounded"].float()),)

    def work(ctx):
        M, N, K = ctx.shape["M"], ctx.shape["N"], ctx.shape["K"]
        gs = ctx.shape.get("group_size", 128)
        try:
            return _work("int4", M, N, K, gs, ctx.dtype)
        except (ImportError, AttributeError):
            # Fallback until warpgauge.kernels.int4 exists: x, packed weight, scales, output.
            es = torch.empty((), dtype=ctx.dtype).element_size()
            b = M * K * es + N * K // 2 + N * (K // gs) * es + M * N * es
            return b, 2 * M * N * K, "bench fallback (x + N*K/2 + scales + y)"

    def build_wg(inp, ctx):
        wg, x, qw = _wg(), inp["x"], inp["qweight"]
        return Built(lambda: wg.int4_linear(x, qw))

    def build_dense(inp, ctx):
        x, w = inp["x"], inp["w_rounded"]
        return Built(lambda: dense_linear(x, w))

    def build_unfused(inp, ctx):
        x, qw = inp["x"], inp["qweight"]
        return Built(lambda: dense_linear(x, qw.dequantize(ctx.dtype)))

    def tinygemm_available(ctx):
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

    def build_tinygemm(inp, ctx):
        x = inp["x"]
        packed, group, sz = tinygemm_layout(inp["qweight"])
        mm = torch.ops.aten._weight_int4pack_mm
        return Built(lambda: mm(x, packed, group, sz),
                     notes={"layout": "u = q + 8 (even k high nibble), zero = 0"})  # fmt: skip

    def gemlite_available(ctx):
        reason = _module_available("gemlite", "gemlite")(ctx)
        if reason:
            return reason
        if ctx.dtype not in (torch.float16, torch.bfloat16):
            return "gemlite takes FP16/BF16 activations"
        if ctx.shape["K"] % 32:
            return f"gemlite needs K % 32 == 0 (K={ctx.shape['K']})"
        return None

    def build_gemlite(inp, ctx):
        core = _import("gemlite.core")
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

    rounded = "rounded_weight"
    return OpSpec(
        name="int4_linear",
        make_inputs=inputs,
        references={"default": ref_exact, rounded: ref_rounded},
        work=work,
        out_specs=lambda ctx: [((ctx.shape["M"], ctx.shape["N"]), ctx.dtype)],
        providers=(
            Provider("warpgauge", "warpgauge int4_linear", "warpgauge", build_wg,
                     available=_wg_has("int4_linear"), precompile=True),
            Provider("dense", "F.linear, dense dequantized weight", "pytorch", build_dense,
                     baseline=True, reference=rounded),
            Provider("unfused", "dequantize, then F.linear", "pytorch", build_unfused,
                     reference=rounded),
            Provider("tinygemm", "torch._weight_int4pack_mm (tinygemm)", "pytorch", build_tinygemm,
                     available=tinygemm_available, reference=rounded),
            *compile_providers(
                lambda inp, ctx: (dense_linear, (inp["x"], inp["w_rounded"])), modes, rounded
            ),
            Provider("gemlite", "gemlite A16W4 (group 128)", "peer", build_gemlite,
                     available=gemlite_available, reference=rounded, precompile=True),
        ),
    )  # fmt: skip


# ------------------------------------------------------------------------------------ registry


def registry(
    compile_modes=("default", "max-autotune", "max-autotune-no-cudagraphs"),
) -> dict[str, OpSpec]:
    """Every operator's spec, with one compile provider per mode in ``compile_modes``."""
    modes = tuple(compile_modes)
    return {
        "add": _add_spec(modes),
        "row_sum": _row_sum_spec(modes),
        "softmax": _softmax_spec(modes),
        "add_rms_norm": _rmsnorm_spec(modes),
        "gemm": _gemm_spec(modes),
        "int4_linear": _int4_spec(modes),
    }


def context_for(
    op: str, dtype_name: str, shape: Mapping[str, int], settings, device
) -> BuildContext:
    return BuildContext(
        op, DTYPE_BY_NAME[dtype_name], dict(shape), dict(settings or {}), torch.device(device)
    )


def describe(device=None) -> list[dict]:
    """Rows for ``warpgauge providers``: every provider and whether it is usable here."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    samples = {
        "add": ("bfloat16", {"numel": 1024}),
        "row_sum": ("bfloat16", {"rows": 8, "width": 1024}),
        "softmax": ("bfloat16", {"rows": 8, "width": 1024}),
        "add_rms_norm": ("bfloat16", {"rows": 8, "width": 1024}),
        "gemm": ("bfloat16", {"M": 128, "N": 128, "K": 128}),
        "int4_linear": ("bfloat16", {"M": 1, "N": 4096, "K": 4096, "group_size": 128}),
    }
    rows = []
    for op, spec in registry().items():
        dt, shape = samples[op]
        ctx = context_for(op, dt, shape, {}, device)
        for p in spec.providers:
            try:
                reason = p.available(ctx)
            except Exception as e:
                reason = f"{type(e).__name__}: {e}"
            rows.append({
                "op": op, "name": p.name, "label": p.label, "family": p.family,
                "baseline": p.baseline, "available": reason is None, "reason": reason,
            })  # fmt: skip
    return rows
