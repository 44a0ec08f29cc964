"""Compatibility shim: the providers now live in the operator registry (``bench/operators/``).

Everything the runner, precompile workers, tests and scripts imported from here is re-exported
unchanged: ``OpSpec``, ``Provider``, ``Built``, ``BuildContext``, ``registry``, ``context_for``,
``describe``, the eager contracts and the tinygemm layout helpers. New code imports
``warpgauge.bench.operators``.
"""

from __future__ import annotations

from .operators import (
    COMPILE_PROVIDERS,
    FAMILIES,
    BuildContext,
    Built,
    OpSpec,
    Provider,
    compile_providers,
    context_for,
    describe,
    registry,
)
from .operators.add import add_contract
from .operators.add_rms_norm import add_rms_norm_contract, add_then_rms_norm
from .operators.gemm import gemm_contract
from .operators.int4_linear import (
    dense_linear,
    int4_values,
    tinygemm_layout,
    tinygemm_scales_and_zeros,
    tinygemm_uint8,
)
from .operators.row_sum import row_sum_contract, row_sum_native
from .operators.softmax import softmax_contract, softmax_native

__all__ = [
    "COMPILE_PROVIDERS",
    "FAMILIES",
    "BuildContext",
    "Built",
    "OpSpec",
    "Provider",
    "add_contract",
    "add_rms_norm_contract",
    "add_then_rms_norm",
    "compile_providers",
    "context_for",
    "dense_linear",
    "describe",
    "gemm_contract",
    "int4_values",
    "registry",
    "row_sum_contract",
    "row_sum_native",
    "softmax_contract",
    "softmax_native",
    "tinygemm_layout",
    "tinygemm_scales_and_zeros",
    "tinygemm_uint8",
]


def __getattr__(name: str):
    if name == "DTYPE_BY_NAME":  # a torch table: built on first use, not at import
        import torch

        return {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    raise AttributeError(name)


def _softmax_spec(modes):  # the old per-operator factory name some tests still call
    from .operators import operator

    return operator("softmax").spec(tuple(modes))
