"""Small launch helpers shared by the kernel modules."""

from __future__ import annotations

import os

import torch
from torch.library import wrap_triton

from .._device import device_info
from .plans import RowPlan

__all__ = ["launch", "wrap_triton", "row_plan", "empty", "empty_rows_like", "compiled_variants"]

# Tests set WARPGAUGE_POISON_OUTPUTS=1 so that every output and scratch buffer the launchers
# allocate starts as NaN: an element a kernel forgets to write then fails the reference check.
# Read once at import; costs nothing per call when off.
POISON = os.environ.get("WARPGAUGE_POISON_OUTPUTS", "0") not in ("", "0")


def empty(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    t = torch.empty(shape, dtype=dtype, device=device)
    if POISON:
        t.fill_(float("nan") if dtype.is_floating_point else 0x5A)
    return t


def row_plan(rows: int, width: int, device: torch.device, plan: RowPlan | None) -> RowPlan:
    if plan is not None:
        return plan
    return RowPlan.for_shape(rows, width, device_info(device).sm_count)


def empty_rows_like(x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A contiguous output with ``x``'s shape (never ``x``'s strides: rows may be a slice)."""
    return empty(x.shape, dtype or x.dtype, x.device)


def compiled_variants(kernel) -> int:
    """How many compiled versions of a @triton.jit (or autotuned) kernel are cached in this
    process, over all devices. Tests use it to show that new row counts reuse compiled kernels."""
    fn = getattr(kernel, "fn", kernel)  # Autotuner -> JITFunction
    caches = getattr(fn, "device_caches", None)
    if caches is None:
        return 0
    return sum(len(entry[0]) for entry in caches.values())


def launch(kernel, grid, *args, **meta) -> None:
    """Launch a @triton.jit (or autotuned) ``kernel`` over ``grid``: the one place every launcher
    goes through, so the launch path (and its host cost) is decided here, not in each module."""
    wrap_triton(kernel)[grid](*args, **meta)
