"""torch.library registration, autograd and the public functions.

Every operator is a ``torch.library.triton_op`` (``torch.ops.warpgauge.<name>``), so
``torch.compile(fullgraph=True)`` traces into its Triton kernels, and has autograd registered
with ``register_autograd``. The op body allocates its outputs and launches; its fake
implementation is the same body run on fake tensors (triton_op registers it).

Eager calls skip the dispatcher: going through ``torch.ops`` costs ~40 us of host time per call
on the H200 (``anchors-h200.md``), more than many of these kernels take. A public function calls
the launcher directly unless the call is being traced or compiled, an input is a tensor subclass
(fake/functional tensors), or autograd must record the call (grad mode on and an input that
requires grad); then it goes through the registered op.
"""

from __future__ import annotations

import torch
from torch.library import register_autograd, triton_op

from ._checks import check_eps
from .kernels import add as _add
from .kernels import gemm as _gemm
from .kernels import int4 as _int4
from .kernels import rmsnorm as _rms
from .kernels import row_sum as _row_sum
from .kernels import softmax as _softmax
from .quant import Int4Weight

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter

# The launchers launch through ``torch.library.wrap_triton``, which dispatches through a
# higher-order op whenever wrap-triton mode is on, and it is on by default: that is what lets
# torch.compile trace the op bodies, but in plain eager code it costs host time per launch and
# breaks CUDA-graph capture of autotuned kernels (seen on torch 2.11). The eager fast path turns
# it off around the launcher, exactly as triton_op's own eager backend does.
try:
    from torch._library.triton import wrap_triton_enabled as _wrap_flag
except ImportError:  # pragma: no cover - older/newer torch: fall back to the public switch
    _wrap_flag = None


def _direct(launcher, *args):
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


def _use_op(*tensors) -> bool:
    """True when the call must go through the registered op (see module docstring).

    Plain tensors and ``nn.Parameter``s take the direct launcher unless autograd must record the
    call; tensor subclasses (fake, functional) take the op. A non-tensor argument always takes the
    direct launcher, whose validation raises the clear TypeError (the dispatcher's schema check
    would raise an unexplained RuntimeError)."""
    if torch.compiler.is_compiling():
        return True
    grad = torch.is_grad_enabled()
    use = False
    for t in tensors:
        tp = type(t)
        if tp is _Tensor or tp is _Parameter:
            use = use or (grad and t.requires_grad)
        elif isinstance(t, _Tensor):
            use = True
        else:
            return False
    return use


# ------------------------------------------------------------------------------------------ add


@triton_op("warpgauge::add", mutates_args=())
def _add_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return _add.add(x, y)


def _add_bwd(ctx, grad):
    return grad, grad


register_autograd("warpgauge::add", _add_bwd)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x + y`` elementwise (same shape and dtype): FP32 math, one rounding to the dtype."""
    if _use_op(x, y):
        return torch.ops.warpgauge.add(x, y)
    return _direct(_add.add, x, y)


# -------------------------------------------------------------------------------------- row_sum


@triton_op("warpgauge::row_sum", mutates_args=())
def _row_sum_op(x: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    return _row_sum.row_sum(x, out_dtype)


def _row_sum_setup(ctx, inputs, output):
    x, _ = inputs
    ctx.x_shape = x.shape
    ctx.x_dtype = x.dtype


def _row_sum_bwd(ctx, grad):
    return grad.to(ctx.x_dtype).unsqueeze(-1).expand(ctx.x_shape), None


register_autograd("warpgauge::row_sum", _row_sum_bwd, setup_context=_row_sum_setup)


def row_sum(x: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Sum over the last dim with FP32 accumulation; result dtype ``out_dtype`` or ``x.dtype``."""
    _row_sum.check_out_dtype(out_dtype)
    if _use_op(x):
        return torch.ops.warpgauge.row_sum(x, out_dtype)
    return _direct(_row_sum.row_sum, x, out_dtype)


# -------------------------------------------------------------------------------------- softmax


@triton_op("warpgauge::softmax", mutates_args=())
def _softmax_op(x: torch.Tensor) -> torch.Tensor:
    return _softmax.softmax(x)


@triton_op("warpgauge::softmax_backward", mutates_args=())
def _softmax_bwd_op(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    return _softmax.softmax_backward(y, dy)


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_bwd(ctx, grad):
    (y,) = ctx.saved_tensors
    return torch.ops.warpgauge.softmax_backward(y, grad)


register_autograd("warpgauge::softmax", _softmax_bwd, setup_context=_softmax_setup)


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim: FP32 math, one cast to ``x.dtype``. Rows that are entirely
    ``-inf`` give all zeros; rows with ``-inf`` entries are handled on every plan."""
    if _use_op(x):
        return torch.ops.warpgauge.softmax(x)
    return _direct(_softmax.softmax, x)


# ---------------------------------------------------------------------------------- add_rms_norm


@triton_op("warpgauge::add_rms_norm", mutates_args=())
def _rms_op(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return _rms.add_rms_norm(x, residual, weight, eps)


@triton_op("warpgauge::add_rms_norm_backward", mutates_args=())
def _rms_bwd_op(
    dy: torch.Tensor,
    dh: torch.Tensor | None,
    h: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    need_dw: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    dx, dw = _rms.add_rms_norm_backward(dy, dh, h, weight, eps, need_dw=need_dw)
    return dx, dw if need_dw else weight.new_empty((0,))  # frozen weight: no dw work at all


def _rms_setup(ctx, inputs, output):
    _, _, weight, eps = inputs
    ctx.eps = eps
    ctx.save_for_backward(output[1], weight)


def _rms_bwd(ctx, dy, dh):
    h, weight = ctx.saved_tensors
    if dy is None:
        dy = torch.zeros_like(h)
    need_dw = ctx.needs_input_grad[2]
    dx, dw = torch.ops.warpgauge.add_rms_norm_backward(dy, dh, h, weight, ctx.eps, need_dw)
    return dx, dx, dw if need_dw else None, None


register_autograd("warpgauge::add_rms_norm", _rms_bwd, setup_context=_rms_setup)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused residual add + RMSNorm. ``h = x + residual`` in FP32, rounded once to ``x.dtype``;
    ``y = h * rsqrt(mean(h^2) + eps) * weight`` with FP32 math. Returns ``(y, h)``: ``h`` is the
    next layer's residual."""
    eps = check_eps(eps)
    if _use_op(x, residual, weight):
        return torch.ops.warpgauge.add_rms_norm(x, residual, weight, eps)
    return _direct(_rms.add_rms_norm, x, residual, weight, eps)


# ----------------------------------------------------------------------------------------- gemm


@triton_op("warpgauge::gemm", mutates_args=())
def _gemm_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _gemm.gemm(a, b)


@triton_op("warpgauge::gemm_grad_a", mutates_args=())
def _gemm_grad_a_op(grad: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _gemm.gemm_grad_a(grad, b)


@triton_op("warpgauge::gemm_grad_b", mutates_args=())
def _gemm_grad_b_op(grad: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    return _gemm.gemm_grad_b(grad, a)


def _gemm_setup(ctx, inputs, output):
    a, b = inputs
    ctx.save_for_backward(a, b)


def _gemm_bwd(ctx, grad):
    a, b = ctx.saved_tensors
    # dA = dC @ B^T and dB = A^T @ dC: the same strided kernel reads the transposed operands in
    # place (stride swaps, no copies); only the gradients autograd asks for are computed.
    da = torch.ops.warpgauge.gemm_grad_a(grad, b) if ctx.needs_input_grad[0] else None
    db = torch.ops.warpgauge.gemm_grad_b(grad, a) if ctx.needs_input_grad[1] else None
    return da, db


register_autograd("warpgauge::gemm", _gemm_bwd, setup_context=_gemm_setup)


def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` for 2-D FP16/BF16 operands: FP32 accumulation, one rounding; any M, N, K >= 1 and
    any strides (a transposed view is read through its strides, never copied)."""
    if _use_op(a, b):
        return torch.ops.warpgauge.gemm(a, b)
    return _direct(_gemm.gemm, a, b)


# ----------------------------------------------------------------------------------- int4_linear


@triton_op("warpgauge::int4_linear", mutates_args=())
def _int4_op(
    x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group_size: int
) -> torch.Tensor:
    return _int4.int4_linear_packed(x, packed, scales, group_size)


@triton_op("warpgauge::int4_linear_grad_input", mutates_args=())
def _int4_grad_op(
    grad: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group_size: int
) -> torch.Tensor:
    return _int4.int4_linear_grad_input_packed(grad, packed, scales, group_size)


def _int4_setup(ctx, inputs, output):
    _, packed, scales, group_size = inputs
    ctx.group_size = group_size
    ctx.save_for_backward(packed, scales)


def _int4_bwd(ctx, grad):
    packed, scales = ctx.saved_tensors
    dx = torch.ops.warpgauge.int4_linear_grad_input(grad, packed, scales, ctx.group_size)
    return dx, None, None, None


register_autograd("warpgauge::int4_linear", _int4_bwd, setup_context=_int4_setup)


def int4_linear(x: torch.Tensor, qweight: Int4Weight) -> torch.Tensor:
    """``x @ W.T`` (like ``F.linear``) with ``W`` stored as symmetric INT4 (``quantize_int4``).
    Gradients flow to ``x`` only (the quantized weight is frozen)."""
    if not isinstance(qweight, Int4Weight):
        raise TypeError(
            "qweight must be a warpgauge.Int4Weight from warpgauge.quantize_int4(weight), "
            f"got {type(qweight).__name__}"
        )
    if _use_op(x):
        return torch.ops.warpgauge.int4_linear(
            x, qweight.packed, qweight.scales, qweight.group_size
        )
    return _direct(_int4.int4_linear, x, qweight)
