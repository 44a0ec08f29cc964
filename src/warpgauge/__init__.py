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


def __getattr__(name: str):
    """Lazy attributes, so ``import warpgauge`` pays for neither: ``load_run`` (a run as a
    pandas DataFrame, ``warpgauge.export.load_frame``) and ``__version__`` (pyproject.toml's)."""
    if name == "load_run":
        from .export import load_frame

        return load_frame
    if name == "__version__":
        from ._version import version

        return version()
    raise AttributeError(f"module 'warpgauge' has no attribute {name!r}")
