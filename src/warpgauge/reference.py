"""FP64 references for every operator, and the one tolerance table they are checked with.

References compute in float64 from the same low-precision inputs the kernels see and cast once
to the output dtype. A kernel passes when, elementwise,

    abs(out - ref) <= atol * scale + rtol * abs(ref) + floor

with ``scale = max(abs(ref))`` over the tensor (so ``atol`` is relative to the output's own peak,
and a tensor of tiny values cannot pass trivially) and ``floor`` the dtype's smallest subnormal
(one rounding step at zero). Outputs whose small values matter as much as their peak
(probabilities: softmax) are checked with ``relative=True``, which drops the ``atol`` term: an
element zeroed or badly off fails however small it is. NaN never passes (a NaN where the
reference is finite, or a finite value where the reference is NaN, fails; matching infinities pass).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


# One rounding to the output dtype is half an ulp (fp16: 2**-11, bf16: 2**-8 relative). FP32 math
# inside the kernel can land on the other side of a rounding midpoint from the FP64 reference,
# which is one ulp (fp16: 9.8e-4, bf16: 7.8e-3). The Triton interpreter truncates FP32->BF16
# instead of rounding, also at most one ulp. The rtol values allow two ulps, not more.
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(atol=1e-6, rtol=2e-5),
    torch.float16: Tolerance(atol=1e-4, rtol=2e-3),
    torch.bfloat16: Tolerance(atol=1e-3, rtol=1.6e-2),
}


@dataclass(frozen=True)
class Check:
    ok: bool
    max_abs_err: float
    max_rel_err: float
    worst_ratio: float  # max over elements of err / allowed; <= 1 passes
    n_bad: int
    n_nan: int

    def __str__(self) -> str:
        return (
            f"max_abs_err={self.max_abs_err:.3g} max_rel_err={self.max_rel_err:.3g} "
            f"err/allowed={self.worst_ratio:.3g} bad={self.n_bad} nan_mismatch={self.n_nan}"
        )


COMPARE_CHUNK = 1 << 25  # elements per float64 pass: bounds the memory a large check needs


def compare(
    out: torch.Tensor,
    ref: torch.Tensor,
    dtype: torch.dtype | None = None,
    chunk: int = COMPARE_CHUNK,
    relative: bool = False,
) -> Check:
    """Compare ``out`` with ``ref`` under ``TOLERANCES`` (of ``dtype``, default ``out.dtype``).

    Evaluated in float64 on the output's device (a 5e8-element GPU check stays on the GPU), in
    ``chunk``-element pieces so that memory stays bounded: a first pass finds ``max|ref|`` (the
    ``atol`` scale), a second the errors."""
    if out.shape != ref.shape:
        raise ValueError(f"shape mismatch: out {tuple(out.shape)} vs ref {tuple(ref.shape)}")
    dt = dtype or out.dtype
    tol = TOLERANCES[dt]
    atol = 0.0 if relative else tol.atol
    floor = torch.finfo(dt).smallest_normal * torch.finfo(dt).eps  # smallest subnormal
    o_all = out.detach().reshape(-1)
    r_all = ref.detach().reshape(-1).to(o_all.device)
    n = o_all.numel()
    if n == 0:
        return Check(True, 0.0, 0.0, 0.0, 0, 0)
    f64 = torch.float64
    scale = 0.0
    for i in range(0, n, chunk):
        r = r_all[i : i + chunk].to(f64)
        scale = max(scale, float(torch.where(torch.isfinite(r), r.abs(), 0.0).max()))
    max_abs = max_rel = worst = 0.0
    n_bad = n_nan = 0
    for i in range(0, n, chunk):
        o = o_all[i : i + chunk].to(f64)
        r = r_all[i : i + chunk].to(f64)
        o_nan, r_nan = torch.isnan(o), torch.isnan(r)
        nan_mismatch = o_nan != r_nan
        same_inf = torch.isinf(r) & (o == r)
        finite = ~(o_nan | r_nan) & ~same_inf
        err = torch.where(finite, (o - r).abs(), torch.zeros_like(o))
        err = torch.nan_to_num(err, nan=float("inf"))
        rf = torch.where(torch.isfinite(r), r.abs(), torch.zeros_like(r))
        allowed = atol * scale + tol.rtol * rf + floor
        ratio = torch.where(allowed > 0, err / allowed, torch.where(err > 0, float("inf"), 0.0))
        bad = (ratio > 1.0) | nan_mismatch
        rel = torch.where(rf > 0, err / rf.clamp_min(1e-300), err)
        max_abs = max(max_abs, float(err.max()))
        max_rel = max(max_rel, float(rel.max()))
        worst = max(worst, float(ratio.max()))
        n_bad += int(bad.sum())
        n_nan += int(nan_mismatch.sum())
    return Check(n_bad == 0, max_abs, max_rel, worst, n_bad, n_nan)


def assert_close(
    out: torch.Tensor,
    ref: torch.Tensor,
    dtype: torch.dtype | None = None,
    msg="",
    relative: bool = False,
):
    c = compare(out, ref, dtype, relative=relative)
    assert c.ok, f"{msg} {c}"
    return c


# ---------------------------------------------------------------------------------------------
# References: float64 math on the given inputs, one cast to the output dtype.


def _f64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.float64)


def add_ref(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (_f64(x) + _f64(y)).to(x.dtype)


def row_sum_ref(x: torch.Tensor, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    return _f64(x).sum(-1).to(out_dtype or x.dtype)


def softmax_ref(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim. A row that is entirely -inf gives all zeros (warpgauge's
    documented choice: no probability mass where every logit is masked); a row holding NaN or
    +inf gives NaN where torch.softmax does."""
    x64 = _f64(x)
    m = x64.amax(-1, keepdim=True)
    m = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(x64 - m)
    s = e.sum(-1, keepdim=True)
    y = torch.where(s == 0, torch.zeros_like(e), e / torch.where(s == 0, torch.ones_like(s), s))
    return y.to(x.dtype)


def add_rms_norm_ref(x, residual, weight, eps: float = 1e-6):
    """(y, h): h = dtype(x + r); y = dtype(h * rsqrt(mean(h^2) + eps) * w), math in float64."""
    h = (_f64(x) + _f64(residual)).to(x.dtype)
    h64 = _f64(h)
    rstd = torch.rsqrt(h64.square().mean(-1, keepdim=True) + eps)
    y = (h64 * rstd * _f64(weight)).to(x.dtype)
    return y, h


def gemm_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (_f64(a) @ _f64(b)).to(a.dtype)


def int4_linear_ref(x: torch.Tensor, w_dequant: torch.Tensor) -> torch.Tensor:
    """x @ W.T with W the dequantized weight (exactly representable in its dtype)."""
    return (_f64(x) @ _f64(w_dequant).T).to(x.dtype)


# Backward references (float64 autograd through the forward references' math).


def softmax_bwd_ref(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    y64, dy64 = _f64(y), _f64(dy)
    return (y64 * (dy64 - (y64 * dy64).sum(-1, keepdim=True))).to(dy.dtype)
