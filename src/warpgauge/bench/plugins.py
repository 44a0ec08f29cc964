"""Provider plug-ins: benchmark your own kernel beside warpgauge and PyTorch.

A plug-in is a function ``register(reg)`` that adds providers to registered operators::

    def register(reg):
        @reg.provider("softmax", "my_softmax", "my Triton softmax")
        def build(inputs, ctx):
            x = inputs["x"]
            return Built(lambda: my_softmax(x))

It is named on the command line (``warpgauge bench --provider package.module:register``) or
published by an installed package in the ``warpgauge.providers`` entry-point group::

    [project.entry-points."warpgauge.providers"]
    mine = "my_package.bench:register"

``warpgauge bench`` resolves the entry points it finds to their ``module:function`` and records
every plug-in in ``config.providers.plugins``, so ``--resume`` and the precompile workers load the
same ones. A plug-in provider is gated like any other (wrong results are never timed); its family
is ``peer`` unless it says otherwise, and it can never be the baseline. ``examples/plugin/``
holds a runnable example.
"""

from __future__ import annotations

import importlib
from importlib import metadata

from .suite import SuiteError

GROUP = "warpgauge.providers"
_loaded: set[str] = set()


def entry_point_specs() -> list[str]:
    """``module:function`` of every installed ``warpgauge.providers`` entry point."""
    try:
        eps = metadata.entry_points(group=GROUP)
    except TypeError:  # pragma: no cover - Python < 3.10
        eps = metadata.entry_points().get(GROUP, [])
    return sorted(ep.value.replace(" ", "") for ep in eps)


def resolve(spec: str):
    """The function named by ``package.module:function``; SuiteError saying what is wrong."""
    module, sep, attr = spec.partition(":")
    if not sep or not module or not attr:
        raise SuiteError(f"--provider {spec!r}: write it as package.module:function")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise SuiteError(f"--provider {spec!r}: cannot import {module}: {e}") from e
    fn = mod
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise SuiteError(f"--provider {spec!r}: {module} has no {attr}")
    if not callable(fn):
        raise SuiteError(f"--provider {spec!r}: {attr} is not callable")
    return fn


def load(specs) -> list[str]:
    """Call every plug-in in ``specs`` once per process; returns the newly loaded ones."""
    from .operators import Registry

    new = []
    for spec in specs or ():
        if spec in _loaded:
            continue
        fn = resolve(spec)
        try:
            fn(Registry(spec))
        except SuiteError:
            raise
        except Exception as e:
            raise SuiteError(
                f"--provider {spec}: registering failed: {type(e).__name__}: {e}"
            ) from e
        _loaded.add(spec)
        new.append(spec)
    return new


def unload_all() -> None:
    """Remove every plug-in provider (tests)."""
    from .operators import operators

    for op in operators().values():
        op.remove_plugins()
    _loaded.clear()
