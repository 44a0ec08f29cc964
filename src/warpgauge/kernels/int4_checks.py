"""Argument checks of the INT4 linear (``int4.py``): the packed weight and its scales, the
activations' shape and dtype. Each error names the argument and the fix."""

from __future__ import annotations

import torch

from .._checks import HALF_DTYPES, check_same_device, check_tensor
from ..quant import check_group_size


def _check_weight(packed: torch.Tensor, scales: torch.Tensor, group_size: int) -> tuple[int, int]:
    group_size = check_group_size(group_size)
    if isinstance(packed, torch.Tensor) and packed.dtype != torch.uint8:
        raise TypeError(
            f"packed has dtype {str(packed.dtype).replace('torch.', '')}; INT4 weights are packed "
            "two per uint8 byte (build them with warpgauge.quant.quantize_int4 or pack_int4)"
        )
    check_tensor("packed", packed, (torch.uint8,))
    check_tensor("scales", scales, HALF_DTYPES)
    check_same_device([("packed", packed), ("scales", scales)])
    if packed.dim() != 2 or scales.dim() != 2:
        raise ValueError(
            f"packed and scales must be 2-D, got {tuple(packed.shape)} and {tuple(scales.shape)}"
        )
    n, k = packed.shape[0], packed.shape[1] * 2
    if k % group_size or tuple(scales.shape) != (n, k // group_size):
        raise ValueError(
            f"scales has shape {tuple(scales.shape)}; packed {tuple(packed.shape)} with "
            f"group_size={group_size} needs ({n}, {k // group_size}) and K={k} a multiple of "
            f"{group_size}"
        )
    if not (packed.is_contiguous() and scales.is_contiguous()):
        raise ValueError("packed and scales must be contiguous; pass .contiguous() copies")
    return n, k


def _as_rows(name: str, t: torch.Tensor, width: int, width_name: str) -> torch.Tensor:
    if t.dim() < 1 or t.shape[-1] != width:
        raise ValueError(
            f"{name} has shape {tuple(t.shape)}; its last dimension must be {width_name} = {width}"
        )
    return t.reshape(-1, width)  # a view whenever the leading dims allow it; strides are passed


def _check_act_dtype(name: str, t: torch.Tensor, scales: torch.Tensor) -> None:
    if t.dtype != scales.dtype:
        n = lambda d: str(d).replace("torch.", "")  # noqa: E731
        raise TypeError(
            f"{name} has dtype {n(t.dtype)} but the INT4 weight's scales are {n(scales.dtype)}; "
            f"the kernel computes in the scales' dtype: pass {name}.to(torch.{n(scales.dtype)}) "
            f"or quantize the weight from a {n(t.dtype)} tensor"
        )
