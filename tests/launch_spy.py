"""A spy on a kernel module's ``launch``: the names of the kernels it launches, in order."""

from __future__ import annotations


def spy_launches(monkeypatch, module) -> list:
    """Patch ``module.launch`` to record each launched kernel's name (then launch it); returns
    the list it fills, which the caller may ``clear()``."""
    launched = []
    real = module.launch

    def spy(kernel, grid, *args, **meta):
        launched.append(kernel.__name__)
        return real(kernel, grid, *args, **meta)

    monkeypatch.setattr(module, "launch", spy)
    return launched
