"""torch.library registration, autograd and the public functions.

Every operator is a ``torch.library.triton_op`` (``torch.ops.warpgauge.<name>``), so
``torch.compile(fullgraph=True)`` traces into its Triton kernels, and has autograd registered
with ``register_autograd``. The op body allocates its outputs and launches; its fake
implementation is the same body run on fake tensors (triton_op registers it).

Eager calls skip the dispatcher: going through ``torch.ops`` costs ~40 us of host time per call
on the H200 (``anchors-h200.md``), more than many of these kernels take. ``_eager.eager`` decides:
while tracing or compiling, for tensor subclasses (fake/functional tensors) and for meta tensors a
public function calls the registered op; when autograd must record the call (grad mode on and an
input that requires grad) it calls the equivalent ``torch.autograd.Function`` in ``_eager.py``,
whose forward and backward launch directly; otherwise it calls the launcher directly (replayed
when an earlier call had the same input signature, ``kernels/_replay.py``).
"""

from __future__ import annotations

import torch
from torch.library import register_autograd, triton_op

from . import _eager
from ._checks import check_eps, check_out_dtype
from ._device import interpreter_enabled
from ._eager import GRAD, OP
from ._eager import eager as _eager_call
from ._lazy import LazyModule, load_kernels
from .quant import Int4Weight

_Tensor = torch.Tensor

# The kernel modules import triton (~0.15-0.3 s): imported on the first call, not at import time.
_add = LazyModule("warpgauge.kernels.add")
_gemm = LazyModule("warpgauge.kernels.gemm")
_int4 = LazyModule("warpgauge.kernels.int4")
_rms = LazyModule("warpgauge.kernels.rmsnorm")
_row_sum = LazyModule("warpgauge.kernels.row_sum")
_softmax = LazyModule("warpgauge.kernels.softmax")


class _LazyKernels:
    """The list of Triton kernels ``triton_op`` finds in an op body, computed when first read.

    ``triton_op`` (torch >= 2.10) parses each op body's source when it registers it, and imports
    ``torch._inductor`` to do so: over a second of ``import warpgauge``. Only AOTAutograd's cache
    reads the result (to hash kernel sources), so registration stores this lazy list instead and
    the parse happens the first time something iterates it."""

    def __init__(self, find, fn):
        self._find, self._fn, self._kernels = find, fn, None

    def _get(self) -> list:
        if self._kernels is None:
            self._kernels = list(self._find(self._fn))
        return self._kernels

    def __iter__(self):
        return iter(self._get())

    def __len__(self):
        return len(self._get())

    def __getitem__(self, i):
        return self._get()[i]


def _defer_kernel_discovery():
    """Make the ``triton_op`` registrations below store :class:`_LazyKernels`; returns the undo."""
    import torch._library.triton as lib

    find = getattr(lib, "get_inner_triton_kernels", None)
    if find is None:  # a torch that does not parse op bodies at registration
        return lambda: None
    lib.get_inner_triton_kernels = lambda fn: _LazyKernels(find, fn)

    def undo():
        lib.get_inner_triton_kernels = find

    return undo


_undo_defer = _defer_kernel_discovery()


# ------------------------------------------------------------------------------------------ add


@triton_op("warpgauge::add", mutates_args=())
def _add_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return _add.add(x, y)


def _add_bwd(ctx, grad):
    return grad, grad


register_autograd("warpgauge::add", _add_bwd)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x + y`` elementwise (same shape and dtype): FP32 math, one rounding to the dtype."""
    r = _eager_call(_add, "add", (x, y))
    if type(r) is _Tensor:  # the launcher's result, replayed or not (one check on that path)
        return r
    if type(r) is list:  # replayed for autograd to record (see _eager.eager)
        return _eager.add_replayed(x, y, r)
    if r is OP:
        return torch.ops.warpgauge.add(x, y)
    return _eager.add_apply(x, y, None) if r is GRAD else r


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
    r = _eager_call(_row_sum, "row_sum", (x, out_dtype))  # the launcher checks out_dtype itself
    if type(r) is _Tensor:  # the launcher's result
        return r
    if type(r) is list:  # replayed for autograd to record: out_dtype passed the launcher's check
        return _eager.row_sum_replayed(x, out_dtype, r)
    if r is OP or r is GRAD:  # (ints: OP and GRAD are never a launcher's result)
        check_out_dtype(out_dtype)
        if r is OP:
            return torch.ops.warpgauge.row_sum(x, out_dtype)
        return _eager.row_sum_apply(x, out_dtype, None)
    return r


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
    r = _eager_call(_softmax, "softmax", (x,))
    if type(r) is _Tensor:  # the launcher's result
        return r
    if type(r) is list:  # replayed for autograd to record (see _eager.eager)
        return _eager.softmax_replayed(x, r)
    if r is OP:
        return torch.ops.warpgauge.softmax(x)
    return _eager.softmax_apply(x, None) if r is GRAD else r


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
    r = _eager_call(_rms, "add_rms_norm", (x, residual, weight, eps))  # the launcher checks eps
    if type(r) is tuple:  # the launcher's result
        return r
    if type(r) is list:  # replayed for autograd to record: eps passed the launcher's check
        eps = eps if type(eps) is float else check_eps(eps)  # (what check_eps returns for it)
        return _eager.add_rms_norm_replayed(x, residual, weight, eps, r)
    if r is OP:
        return torch.ops.warpgauge.add_rms_norm(x, residual, weight, check_eps(eps))
    if r is GRAD:
        return _eager.add_rms_norm_apply(x, residual, weight, check_eps(eps), None)
    return r


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
    r = _eager_call(_gemm, "gemm", (a, b))
    if type(r) is _Tensor:  # the launcher's result
        return r
    if type(r) is list:  # replayed for autograd to record (see _eager.eager)
        return _eager.gemm_replayed(a, b, r)
    if r is OP:
        return torch.ops.warpgauge.gemm(a, b)
    return _eager.gemm_apply(a, b, None) if r is GRAD else r


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
    r = _eager_call(_int4, "int4_linear", (x, qweight))
    if type(r) is _Tensor:  # the launcher's result
        return r
    if type(r) is list:  # replayed for autograd to record (see _eager.eager)
        weight = (qweight.packed, qweight.scales, qweight.group_size, qweight)
        return _eager.int4_linear_replayed(x, weight, r)
    if r is OP:
        return torch.ops.warpgauge.int4_linear(
            x, qweight.packed, qweight.scales, qweight.group_size
        )
    if r is GRAD:
        weight = (qweight.packed, qweight.scales, qweight.group_size, qweight)
        return _eager.int4_linear_apply(x, weight, None)
    return r


_undo_defer()

# Under the interpreter (tests, CPU runs) the kernels are built now, so the mode stays the one
# set at import even if the environment changes later; on a GPU they load on the first call.
if interpreter_enabled():
    load_kernels()
