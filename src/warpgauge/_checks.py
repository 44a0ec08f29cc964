"""Input validation shared by every launcher. Each error names the argument and what would work."""

from __future__ import annotations

import math
import numbers

import torch

from ._device import interpreter_enabled

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
HALF_DTYPES = (torch.float16, torch.bfloat16)


def _dtype_names(dtypes) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def check_tensor(name: str, t, dtypes=FLOAT_DTYPES) -> torch.Tensor:
    """A tensor of an allowed dtype on a device the kernels can run on."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise TypeError(
            f"{name} has dtype {str(t.dtype).replace('torch.', '')}; supported: {_dtype_names(dtypes)}. "
            f"Convert it first, e.g. {name}.to(torch.bfloat16)"
        )
    check_device(name, t)
    return t


def check_device(name: str, t: torch.Tensor) -> None:
    if t.is_cuda:
        return
    if t.device.type == "cpu" and interpreter_enabled():
        check_interpreter_consistent()
        return
    if t.device.type == "cpu":
        raise ValueError(
            f"{name} is a CPU tensor; warpgauge kernels run on a CUDA GPU. Move it with "
            f"{name}.cuda(), or set TRITON_INTERPRET=1 before importing triton to run the kernels "
            "on the CPU through the Triton interpreter (slow; meant for tests)"
        )
    if t.device.type == "meta":
        return
    raise ValueError(f"{name} is on device {t.device}; warpgauge kernels need a CUDA tensor")


_INTERPRETED = False  # set once the kernels are known to be interpreted ones


def check_interpreter_consistent() -> None:
    """TRITON_INTERPRET=1 is set now, but were the kernels built for the interpreter?

    Triton decides when a kernel is defined whether it is compiled or interpreted. warpgauge
    defines its kernels when they are first needed (the first call of an op, or an import of a
    ``warpgauge.kernels`` module), so setting the variable after that leaves compiled kernels
    and no GPU to run them ("0 active drivers" from deep inside Triton). Say so instead."""
    global _INTERPRETED
    if _INTERPRETED:
        return
    from .kernels.add import _add_flat  # any kernel: all are defined the same way

    _INTERPRETED = type(_add_flat).__name__ != "JITFunction"
    if not _INTERPRETED:
        raise RuntimeError(
            "TRITON_INTERPRET=1 was set after warpgauge's kernels were built for a GPU (they are "
            "built when the first warpgauge op runs). Set TRITON_INTERPRET=1 before importing "
            "triton or warpgauge (e.g. in the shell: TRITON_INTERPRET=1 python ...), or move the "
            "tensors to a CUDA GPU"
        )


def check_same_device(pairs) -> None:
    """pairs: sequence of (name, tensor); all must share the first one's device."""
    (n0, t0), *rest = pairs
    for n, t in rest:
        if t.is_cuda and t0.is_cuda and t.get_device() == t0.get_device():
            continue  # the common case, without building two torch.device objects
        if t.device != t0.device:
            raise ValueError(
                f"{n} is on {t.device} but {n0} is on {t0.device}; put both on the same device"
            )


def check_same_dtype(pairs) -> None:
    (n0, t0), *rest = pairs
    for n, t in rest:
        if t.dtype != t0.dtype:
            raise TypeError(
                f"{n} has dtype {str(t.dtype).replace('torch.', '')} but {n0} has "
                f"{str(t0.dtype).replace('torch.', '')}; cast one so that both match"
            )


def check_out_dtype(out_dtype) -> None:
    if out_dtype is not None and out_dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"out_dtype must be one of float16, bfloat16, float32 (or None for x.dtype), got {out_dtype}"
        )


def check_eps(eps) -> float:
    if torch.compiler.is_compiling() or isinstance(eps, torch.SymFloat):
        # Traced (torch.compile, dynamic floats): the value may be symbolic, and a Python check
        # on it would break the graph. The eager call of the same code checked it; a constant
        # eps is checked when the graph's op body runs it at compile time.
        return eps
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps must be a float, got {type(eps).__name__}")
    eps = float(eps)
    if not math.isfinite(eps) or eps <= 0.0:
        raise ValueError(f"eps must be finite and > 0 (e.g. 1e-6), got {eps}")
    return eps


def rows_view(name: str, x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """View ``x`` (N-D, last dim contiguous) as 2-D rows without copying.

    Returns the 2-D view and its row stride. Rows may be strided (a slice of a wider tensor);
    the last dimension must have stride 1, and leading dims must be collapsible into one.
    """
    if x.dim() == 0:
        raise ValueError(f"{name} must have at least one dimension (rows are the last dim)")
    width = x.shape[-1]
    if width == 0:
        raise ValueError(f"{name} has an empty last dimension; rows need at least one element")
    if x.numel() > 0 and width > 1 and x.stride(-1) != 1:
        raise ValueError(
            f"{name} has stride {x.stride(-1)} in its last dimension; the row operators read rows "
            f"as contiguous runs. Pass {name}.contiguous() (this copies)"
        )
    if x.dim() == 2:  # already rows: no view to build (a view costs ~1 us of host time)
        return x, (x.stride(0) if x.shape[0] > 1 else width)
    if x.dim() == 1:
        return x.view(1, width), max(width, 1)
    try:
        x2 = x.view(-1, width)
    except RuntimeError:
        raise ValueError(
            f"{name} with shape {tuple(x.shape)} and strides {tuple(x.stride())} cannot be viewed "
            f"as rows without a copy; pass {name}.contiguous()"
        ) from None
    stride = x2.stride(0) if x2.shape[0] > 1 else max(width, 1)
    return x2, stride
