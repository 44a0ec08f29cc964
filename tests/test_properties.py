"""Hypothesis property checks over random small shapes (kernels under the interpreter)."""

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import warpgauge as wg
from warpgauge.reference import assert_close, softmax_ref

from .conftest import DEVICE

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
shapes = st.tuples(st.integers(1, 6), st.integers(1, 300))


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 2**31 - 1), scale=st.floats(0.1, 30.0))
def test_softmax_rows_sum_to_one_and_shift_invariant(shape, seed, scale):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=g) * scale).to(DEVICE)
    y = wg.softmax(x)
    assert_close(y, softmax_ref(x), relative=True)
    sums = y.double().sum(-1)
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-5)
    # shift by a per-row constant that is exact in FP32 (a multiple of 1/8 well inside range)
    shift = (torch.randint(-64, 64, (shape[0], 1), generator=g).double() / 8).float().to(DEVICE)
    y2 = wg.softmax(x + shift)
    assert torch.allclose(y2.double(), y.double(), atol=1e-6, rtol=1e-5)


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 2**31 - 1), k=st.integers(-6, 6))
def test_rms_norm_scale_invariant(shape, seed, k):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g).to(DEVICE)
    r = torch.randn(shape, generator=g).to(DEVICE)
    w = torch.randn(shape[-1:], generator=g).to(DEVICE)
    alpha = 2.0**k  # exact scaling: h scales exactly, y must not change (eps negligible)
    y1, h1 = wg.add_rms_norm(x, r, w, eps=1e-30)
    y2, h2 = wg.add_rms_norm(x * alpha, r * alpha, w, eps=1e-30)
    assert torch.equal(h2, h1 * alpha)
    assert torch.allclose(y1, y2, atol=1e-5, rtol=1e-5)
