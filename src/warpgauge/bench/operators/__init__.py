"""The operator registry: one module per operator in this package, discovered, never listed.

Each module ``bench/operators/<op>.py`` declares one :class:`Operator` named ``OPERATOR`` (its
reference, work model, providers registered with a decorator, settings and suite shape sets).
Every per-operator table of the harness (suite shape kinds and settings, precompile weights,
``warpgauge providers`` samples, test tables) is derived from :func:`operators`. Adding an
operator end to end is its kernel module, its registration in ``ops.py``, its module here and its
tests.

Provider plug-ins (``--provider package.module:function`` and the ``warpgauge.providers``
entry-point group) add providers to these operators through :class:`Registry`; see
``bench/plugins.py``.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Mapping, Sequence

from ._base import (
    COMPILE_PROVIDERS,
    FAMILIES,
    SHAPE_KINDS,
    BuildContext,
    Built,
    GradSpec,
    Operator,
    OpSpec,
    Provider,
    compile_providers,
    dtype_by_name,
)

__all__ = [
    "COMPILE_PROVIDERS",
    "FAMILIES",
    "SHAPE_KINDS",
    "BuildContext",
    "Built",
    "GradSpec",
    "OpSpec",
    "Operator",
    "Provider",
    "Registry",
    "compile_providers",
    "context_for",
    "describe",
    "dtype_by_name",
    "operator",
    "operators",
    "registry",
]

DEFAULT_COMPILE_MODES = ("default", "max-autotune", "max-autotune-no-cudagraphs")


@functools.cache
def _discover() -> tuple[Operator, ...]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        op = getattr(mod, "OPERATOR", None)
        if not isinstance(op, Operator):
            raise TypeError(f"{mod.__name__} must define OPERATOR = Operator(...)")
        found.append(op)
    names = [o.name for o in found]
    if len(names) != len(set(names)):
        raise ValueError(f"two operator modules declare the same operator: {names}")
    return tuple(sorted(found, key=lambda o: (o.order, o.name)))


def operators() -> dict[str, Operator]:
    """Every registered operator, in registry order."""
    return {o.name: o for o in _discover()}


def operator(name: str) -> Operator:
    ops = operators()
    if name not in ops:
        raise KeyError(f"no operator {name!r}; registered: {', '.join(ops)}")
    return ops[name]


def registry(compile_modes: Sequence[str] = DEFAULT_COMPILE_MODES) -> dict[str, OpSpec]:
    """Every operator's forward spec, with one compile provider per mode in ``compile_modes``."""
    modes = tuple(compile_modes)
    return {name: op.spec(modes) for name, op in operators().items()}


def context_for(
    op: str, dtype_name: str, shape: Mapping[str, int], settings, device
) -> BuildContext:
    import torch

    return BuildContext(
        op, dtype_by_name(dtype_name), dict(shape), dict(settings or {}), torch.device(device)
    )


class Registry:
    """What a provider plug-in function receives: ``register(reg)`` adds providers with
    ``@reg.provider("softmax", "mine", "my softmax")`` (family ``peer`` unless given)."""

    def __init__(self, plugin: str):
        self.plugin = plugin

    @property
    def operators(self) -> dict[str, Operator]:
        return operators()

    def provider(self, op: str, name: str, label: str, family: str = "peer", **kwargs):
        if kwargs.get("baseline"):
            raise ValueError(f"plug-in {self.plugin}: a plug-in provider cannot be the baseline")
        return operator(op).provider(name, label, family, plugin=self.plugin, **kwargs)


def describe(device=None) -> list[dict]:
    """Rows for ``warpgauge providers``: every provider and whether it is usable here."""
    import torch

    from warpgauge.bench.suite import parse_shape

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for name, op in operators().items():
        _, shape = parse_shape(name, op.sample, op.settings)
        ctx = context_for(name, "bfloat16", shape, op.settings, device)
        for p in op.providers(DEFAULT_COMPILE_MODES):
            try:
                reason = p.available(ctx)
            except Exception as e:
                reason = f"{type(e).__name__}: {e}"
            rows.append({
                "op": name, "name": p.name, "label": p.label, "family": p.family,
                "baseline": p.baseline, "available": reason is None, "reason": reason,
            })  # fmt: skip
    return rows
