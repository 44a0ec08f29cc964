"""What the launch plans need to know about the device, read from the device itself.

Nothing here is keyed by GPU name: SM count, L2 size and shared-memory limit come from
``torch.cuda.get_device_properties``. Under the Triton interpreter (``TRITON_INTERPRET=1``, CPU
tensors) there is no device to ask, so a small pretend GPU is described instead: 4 SMs, so that the
split plans are reachable with test-sized shapes.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch

INTERPRETER_SM_COUNT = 4


def interpreter_enabled() -> bool:
    """True when Triton kernels run through the CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@dataclass(frozen=True)
class DeviceInfo:
    name: str
    sm_count: int
    l2_bytes: int
    max_shared_bytes: int
    interpreter: bool


@functools.cache
def _cuda_info(index: int) -> DeviceInfo:
    p = torch.cuda.get_device_properties(index)
    shared = getattr(p, "shared_memory_per_block_optin", 0) or getattr(
        p, "max_shared_memory_per_block_optin", 48 * 1024
    )
    return DeviceInfo(
        name=p.name,
        sm_count=p.multi_processor_count,
        l2_bytes=int(getattr(p, "L2_cache_size", 0)),
        max_shared_bytes=int(shared),
        interpreter=False,
    )


_INTERPRETER_INFO = DeviceInfo(
    name="triton-interpreter",
    sm_count=INTERPRETER_SM_COUNT,
    l2_bytes=4 * 1024 * 1024,
    max_shared_bytes=228 * 1024,
    interpreter=True,
)


def device_info(device: torch.device) -> DeviceInfo:
    """Properties of ``device`` (a CUDA device, or the interpreter's pretend GPU for CPU tensors)."""
    if device.type == "cuda":
        return _cuda_info(device.index if device.index is not None else torch.cuda.current_device())
    return _INTERPRETER_INFO


@functools.cache
def _sm_limits(index: int) -> tuple[int, int, int, int]:
    """(registers, threads, blocks, shared bytes) one SM of CUDA device ``index`` holds."""
    p = torch.cuda.get_device_properties(index)
    return (
        int(getattr(p, "regs_per_multiprocessor", 0) or 65536),
        int(getattr(p, "max_threads_per_multi_processor", 0) or 2048),
        int(getattr(p, "max_blocks_per_multi_processor", 0) or 32),
        int(getattr(p, "shared_memory_per_multiprocessor", 0) or 228 * 1024),
    )


def resident_per_sm(device: torch.device, regs: int, num_warps: int, shared: int) -> int:
    """Programs of a compiled kernel (``regs`` registers a thread, ``num_warps`` warps,
    ``shared`` bytes of shared memory) that one SM of ``device`` holds at once: the register
    file (allocated per warp in units of 256), the threads, the block slots and the shared
    memory, whichever runs out first (at least 1)."""
    reg_file, threads, blocks, smem = _sm_limits(device.index if device.index is not None else 0)
    per_warp = -(-max(regs, 1) * 32 // 256) * 256
    fit = min((reg_file // per_warp) // num_warps, threads // (32 * num_warps), blocks)
    if shared:
        fit = min(fit, smem // shared)
    return max(fit, 1)
