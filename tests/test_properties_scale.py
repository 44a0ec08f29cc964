"""Property tests over every operator, forward and backward, against FP64: the CI profile.

Small shapes under the interpreter, forced small-block plans so resident, looped and split are
all reached; strides (row slices, batched views), dtypes, value classes and special values (NaN,
+-inf, huge, tiny, all-equal rows) as drawn by tests/property_cases.py. The same checks run with
>= 500 examples per operator on the GPU (tests/gpu/test_properties_gpu.py).
"""

from __future__ import annotations

import os

import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from . import property_cases as pc
from .conftest import DEVICE

# WARPGAUGE_PROPERTY_EXAMPLES raises the count for a longer local soak (default: fast CI).
CI = settings(
    max_examples=int(os.environ.get("WARPGAUGE_PROPERTY_EXAMPLES", "20")),
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)


@CI
@given(meta=pc.row_case(pc.CI))
def test_add(meta):
    pc.check_add(meta, DEVICE)


@CI
@given(meta=pc.row_case(pc.CI))
def test_row_sum(meta):
    pc.check_row_sum(meta, DEVICE)


# Regression examples first seen on the H200 (round 3): "huge" FP16 values overflow to inf, so
# rows hold inf and the checks must match NaN with NaN.
_HUGE_FP16 = {"rows": 5, "width": 300, "dtype": torch.float16, "layout": "contiguous",
              "kind": "huge", "special": "none", "seed": 5, "plan": None}  # fmt: skip


@CI
@given(meta=pc.row_case(pc.CI), mask=st.sampled_from(("none", "prefix", "full", "both")))
@example(meta=_HUGE_FP16, mask="none")
def test_softmax(meta, mask):
    pc.check_softmax(meta, DEVICE, mask)


@CI
@given(meta=pc.row_case(pc.CI), eps=st.sampled_from((1e-6, 1e-5, 0.1)), with_dh=st.booleans())
@example(meta={**_HUGE_FP16, "rows": 158, "width": 1, "seed": 0}, eps=1e-6, with_dh=False)
def test_add_rms_norm(meta, eps, with_dh):
    pc.check_add_rms_norm(meta, DEVICE, eps, with_dh)


@CI
@given(meta=pc.gemm_case(pc.CI))
def test_gemm(meta):
    pc.check_gemm(meta, DEVICE)


@CI
@given(meta=pc.int4_case(pc.CI))
def test_int4_linear(meta):
    pc.check_int4(meta, DEVICE)


def test_rms_norm_backward_huge_rows_keep_the_projection_term():
    """|h| ~ 1e15: rstd ~ 1e-15 and rstd^3 underflows FP32; dx once lost its second term here."""
    import torch

    from warpgauge.kernels import rmsnorm as rms_k
    from warpgauge.kernels.plans import RowPlan

    g = torch.Generator().manual_seed(0)
    h = (torch.randn(3, 300, generator=g, dtype=torch.float64) * 1e15).float().to(DEVICE)
    w = torch.randn(300, generator=g).to(DEVICE)
    dy = torch.randn(3, 300, generator=g).to(DEVICE)
    h64, w64 = h.double().requires_grad_(True), w.double().requires_grad_(True)
    (h64 * torch.rsqrt(h64.square().mean(-1, keepdim=True) + 1e-6) * w64).backward(dy.double())
    for plan in (None, RowPlan.looped(64), RowPlan("split", 32, 1, split=3)):
        dx, dw = rms_k.add_rms_norm_backward(dy, None, h, w, 1e-6, plan=plan)
        pc.assert_close(dx, h64.grad.float(), msg=f"dx {plan}")
        pc.assert_close(dw, w64.grad.float(), msg=f"dw {plan}")
