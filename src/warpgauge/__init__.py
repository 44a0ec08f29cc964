"""warpgauge: Triton GPU kernels whose speed claims come with the evidence."""

from .ops import add, add_rms_norm, gemm, int4_linear, row_sum, softmax
from .quant import Int4Weight, quantize_int4

__all__ = [
    "Int4Weight",
    "add",
    "add_rms_norm",
    "gemm",
    "int4_linear",
    "quantize_int4",
    "row_sum",
    "softmax",
]
__version__ = "0.1.0"
