"""Modules for models: drop-in replacements that run warpgauge's kernels.

``import warpgauge.nn as wgnn`` and use them where the torch modules would go:

- :class:`RMSNorm` (a ``torch.nn.RMSNorm``; parameter ``weight``): ``forward(x)`` returns ``y``;
  ``forward(x, residual)`` runs the fused residual add + RMSNorm and returns ``(y, h)`` with
  ``h = x + residual`` (the next layer's residual). Trains (dx, dresidual and dweight).
- :class:`Softmax` (``dim=-1`` by default, any dim): trains.
- :class:`Linear` (a ``torch.nn.Linear``; ``weight`` and optional ``bias``) on ``warpgauge.gemm``:
  FP16/BF16 only; trains (dx and dweight through the GEMM's backward; the bias add is PyTorch's).
- :class:`Int4Linear` (``Int4Linear.from_linear(linear, group_size=128)``): a frozen symmetric
  INT4 weight-only linear for decode; gradients flow to the input (and the bias), not the weight.

State dicts: ``RMSNorm`` and ``Linear`` load ``torch.nn.RMSNorm`` / ``torch.nn.Linear`` state
dicts unchanged (same names, shapes and dtypes). ``Int4Linear`` stores buffers ``packed`` (uint8)
and ``scales`` (and ``bias`` if present) instead of ``weight``.
"""

from __future__ import annotations

import torch
from torch import nn

from . import ops
from .quant import Int4Weight, quantize_int4

__all__ = ["RMSNorm", "Softmax", "Linear", "Int4Linear"]


def _zero_residual(x: torch.Tensor) -> torch.Tensor:
    """A residual of zeros that costs one row of memory: a stride-0 view over rows.

    ``float32(x) + 0`` rounds back to ``x`` exactly, so ``h == x`` and ``y`` is plain RMSNorm; the
    kernel reads the same zero row (from L2) for every row instead of a full tensor."""
    z = torch.zeros(x.shape[-1], dtype=x.dtype, device=x.device)
    return z.expand(x.shape)


class RMSNorm(nn.RMSNorm):
    """``torch.nn.RMSNorm(hidden, eps)`` on warpgauge's fused kernel.

    ``forward(x)`` -> ``y``; ``forward(x, residual)`` -> ``(y, h)`` with ``h = x + residual``
    rounded once to ``x.dtype`` and ``y = h * rsqrt(mean(h^2) + eps) * weight`` in FP32 math,
    rounded once (the ``add_rms_norm`` contract). ``x`` may be any shape ``(..., hidden)`` in FP16,
    BF16 or FP32 with a contiguous last dimension. The weight is always present (the affine
    ``elementwise_affine=False`` variant has no kernel; use ``torch.nn.RMSNorm`` for it).
    """

    def __init__(self, hidden: int, eps: float = 1e-6, device=None, dtype=None):
        if not isinstance(hidden, int) or isinstance(hidden, bool) or hidden < 1:
            raise ValueError(f"hidden must be a positive int (the last dimension), got {hidden!r}")
        super().__init__(hidden, eps=eps, elementwise_affine=True, device=device, dtype=dtype)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is None:
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
            if x.dim() == 0:
                raise ValueError("x is 0-D; RMSNorm normalizes over the last dimension (hidden)")
            y, _ = ops.add_rms_norm(x, _zero_residual(x), self.weight, self.eps)
            return y
        return ops.add_rms_norm(x, residual, self.weight, self.eps)


class Softmax(nn.Module):
    """Softmax over ``dim`` (default the last) with warpgauge's kernel: FP32 math, one rounding.

    Any other ``dim`` is moved last (a copy) and back. Rows that are all ``-inf`` give zeros."""

    def __init__(self, dim: int = -1):
        super().__init__()
        if not isinstance(dim, int) or isinstance(dim, bool):
            raise TypeError(f"dim must be an int, got {type(dim).__name__}")
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() == 0:
            raise ValueError("x must have at least one dimension to take a softmax over")
        d = self.dim % x.dim() if -x.dim() <= self.dim < x.dim() else None
        if d is None:
            raise ValueError(f"dim={self.dim} is out of range for a {x.dim()}-D input")
        if d == x.dim() - 1:
            return ops.softmax(x if x.stride(-1) == 1 or x.shape[-1] == 1 else x.contiguous())
        return ops.softmax(x.movedim(d, -1).contiguous()).movedim(-1, d)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Linear(nn.Linear):
    """``torch.nn.Linear`` whose product runs on ``warpgauge.gemm`` (FP16/BF16 weights and inputs).

    ``y = x @ weight.T + bias``: the transposed weight is read through its strides (no copy), the
    product accumulates in FP32 and rounds once; the bias is added by PyTorch afterwards."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"x has shape {tuple(x.shape)}; Linear({self.in_features}, {self.out_features}) "
                f"needs a last dimension of {self.in_features}"
            )
        if self.weight.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(
                f"warpgauge.nn.Linear runs FP16/BF16 GEMMs; the weight is "
                f"{str(self.weight.dtype)[6:]}. Convert the module first, e.g. .to(torch.bfloat16)"
            )
        lead = x.shape[:-1]
        y = ops.gemm(x.reshape(-1, self.in_features), self.weight.t())
        y = y.reshape(*lead, self.out_features)
        return y if self.bias is None else y + self.bias


class Int4Linear(nn.Module):
    """Weight-only INT4 linear for decode: ``y = x @ W.T + bias`` with ``W`` stored as symmetric
    INT4 (one scale per ``group_size`` values along ``in_features``; see ``warpgauge.quant``).

    Build it with :meth:`from_linear`. ``x`` must have the scales' dtype (BF16 for a BF16 or FP32
    linear, FP16 for an FP16 one). The weight is frozen; gradients reach ``x`` and ``bias``."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        group_size: int = 128,
        device=None,
        dtype: torch.dtype = torch.bfloat16,
    ):
        super().__init__()
        if in_features % group_size:
            raise ValueError(
                f"in_features={in_features} is not a multiple of group_size={group_size}; pick a "
                f"group_size that divides {in_features} (e.g. 64 or 32)"
            )
        self.in_features, self.out_features, self.group_size = in_features, out_features, group_size
        self.register_buffer(
            "packed", torch.zeros(out_features, in_features // 2, dtype=torch.uint8, device=device)
        )
        self.register_buffer(
            "scales",
            torch.zeros(out_features, in_features // group_size, dtype=dtype, device=device),
        )
        self.bias = (
            nn.Parameter(torch.zeros(out_features, dtype=dtype, device=device)) if bias else None
        )

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int = 128) -> Int4Linear:
        """Quantize ``linear.weight`` with ``warpgauge.quantize_int4`` (same device)."""
        if not isinstance(linear, nn.Linear):
            raise TypeError(f"linear must be a torch.nn.Linear, got {type(linear).__name__}")
        qw = quantize_int4(linear.weight.detach(), group_size)
        m = cls(
            linear.in_features,
            linear.out_features,
            bias=linear.bias is not None,
            group_size=qw.group_size,
            device=linear.weight.device,
            dtype=qw.scales.dtype,
        )
        m.packed.copy_(qw.packed)
        m.scales.copy_(qw.scales)
        if linear.bias is not None:
            m.bias.data.copy_(linear.bias.detach().to(qw.scales.dtype))
        return m

    @property
    def qweight(self) -> Int4Weight:
        """The buffers as an ``Int4Weight`` (validated once, rebuilt when ``.to()`` replaces them;
        ``load_state_dict`` copies into the same buffers, so the cached one stays right)."""
        qw = self.__dict__.get("_qweight")
        if qw is None or qw.packed is not self.packed or qw.scales is not self.scales:
            qw = Int4Weight(
                self.packed, self.scales, (self.out_features, self.in_features), self.group_size
            )
            self.__dict__["_qweight"] = qw
        return qw

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():  # no Int4Weight (a checked dataclass) inside a graph
            y = torch.ops.warpgauge.int4_linear(x, self.packed, self.scales, self.group_size)
        else:
            y = ops.int4_linear(x, self.qweight)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}, group_size={self.group_size}, "
            f"dtype={str(self.scales.dtype)[6:]}"
        )
