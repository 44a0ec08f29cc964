"""Hypothesis property checks over random small shapes (kernels under the interpreter)."""

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import warpgauge as wg
from warpgauge.kernels import rmsnorm as rms_k
from warpgauge.kernels import row_sum as row_sum_k
from warpgauge.kernels import softmax as softmax_k
from warpgauge.kernels.plans import RowPlan
from warpgauge.reference import add_rms_norm_ref, assert_close, row_sum_ref, softmax_ref

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


def _plans(rows, width):
    """One plan of each family, with blocks small enough that test rows cross several chunks."""
    return [
        RowPlan.resident(width),
        RowPlan.resident(width, rows=4),
        RowPlan.looped(32),
        RowPlan.looped(64, programs_per_sm=1, evict=True),
        RowPlan.split_for(rows, width, 4, block=32),
        RowPlan.coop(32, 1),
        RowPlan.coop(64, 1, sub=16, stages=2, evict=True),  # looped cooperative chunks
    ]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.tuples(st.integers(1, 9), st.integers(1, 300)),
    seed=st.integers(0, 2**31 - 1),
    masked=st.floats(0.0, 1.0),
    pad=st.integers(0, 9),
)
def test_every_plan_agrees_with_reference(shape, seed, masked, pad):
    """Any plan family, any width, rows strided by ``pad`` extra elements, a -inf prefix of a
    random length in row 0: softmax, add_rms_norm and row_sum match the FP64 references."""
    rows, width = shape
    g = torch.Generator().manual_seed(seed)
    base = (torch.randn((rows, width + pad), generator=g) * 3).to(DEVICE)
    x = base[:, pad:]
    r = torch.randn((rows, width), generator=g).to(DEVICE)
    w = torch.randn((width,), generator=g).to(DEVICE)
    xm = x.clone()
    xm[0, : int(masked * width)] = float("-inf")
    y_ref, h_ref = add_rms_norm_ref(x, r, w, 1e-6)
    for p in _plans(rows, width):
        sm = softmax_k.softmax(xm, plan=p)
        assert not torch.isnan(sm).any()
        assert_close(sm, softmax_ref(xm), msg=str(p), relative=True)
        y, h = rms_k.add_rms_norm(x, r, w, 1e-6, plan=p)
        assert_close(h, h_ref, msg=str(p))
        assert_close(y, y_ref, msg=str(p))
        assert_close(row_sum_k.row_sum(x, plan=p), row_sum_ref(x), msg=str(p))
