"""Modules imported on first attribute access (keeps ``import triton`` out of ``import warpgauge``)."""

from __future__ import annotations

import importlib

# Imported together, so that every kernel is built in the same mode: Triton decides at a
# kernel's definition whether it is compiled or interpreted (TRITON_INTERPRET).
KERNEL_MODULES = tuple(
    f"warpgauge.kernels.{m}" for m in ("add", "gemm", "int4", "rmsnorm", "row_sum", "softmax")
)


class LazyModule:
    """Stands in for a module until an attribute is read; then imports it (and the rest of its
    group) and keeps each attribute it hands out in its own ``__dict__``, so later reads are
    plain attribute lookups."""

    def __init__(self, name: str, group: tuple[str, ...] = KERNEL_MODULES):
        object.__setattr__(self, "_lazy_name", name)
        object.__setattr__(self, "_lazy_group", group)

    def __getattr__(self, attr):
        for name in self._lazy_group:
            importlib.import_module(name)  # a no-op once imported
        value = getattr(importlib.import_module(self._lazy_name), attr)
        object.__setattr__(self, attr, value)
        return value

    def __repr__(self):
        return f"<lazy module {self._lazy_name}>"


def load_kernels() -> None:
    for name in KERNEL_MODULES:
        importlib.import_module(name)
