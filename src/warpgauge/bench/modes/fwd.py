"""``--mode fwd`` (the default): one forward call per sample, every provider of every operator."""

from __future__ import annotations

from ..operators import Operator, OpSpec


def specs(operators: dict[str, Operator], suite, **_) -> dict[str, OpSpec]:
    return {name: op.spec(suite.compile.modes) for name, op in operators.items()}
