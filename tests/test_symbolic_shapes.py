"""The registered ops traced with symbolic (dynamic) shapes on fake tensors, as opcheck's
``test_aot_dispatch_dynamic`` and ``torch.compile(dynamic=True)`` run them. The H200 run of
commit 81d95f5 failed there: a row plan hashed a SymInt width, the GEMM asked a fake tensor for
its data pointer and the INT4 plan cache hashed SymInt shapes. Runs on the CPU (the fake
implementations never launch)."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

import warpgauge as wg


@pytest.fixture
def mode():
    return FakeTensorMode(shape_env=ShapeEnv())


def _sym(mode, t):
    ctx = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * t.dim())
    return mode.from_tensor(t, symbolic_context=ctx)


@pytest.mark.parametrize("width", [127, 4097, 40000])  # resident, wide resident, looped/split
def test_row_ops_trace_with_symbolic_rows_and_width(mode, width):
    x = _sym(mode, torch.randn(8, width))
    w = _sym(mode, torch.randn(width))
    with mode:
        y = torch.ops.warpgauge.softmax(x)
        s = torch.ops.warpgauge.row_sum(x)
        out, h = torch.ops.warpgauge.add_rms_norm(x, x, w, 1e-6)
        dx = torch.ops.warpgauge.softmax_backward(y, y)
    assert y.shape == x.shape and out.shape == x.shape and h.shape == x.shape
    assert s.shape == x.shape[:1] and dx.shape == x.shape
    assert isinstance(y.shape[0], torch.SymInt)  # rows stayed symbolic


@pytest.mark.parametrize("mnk", [(96, 72, 80), (16, 72, 80)])  # tile path, skinny path
def test_gemm_traces_with_symbolic_shapes(mode, mnk):
    m, n, k = mnk
    a = _sym(mode, torch.randn(m, k, dtype=torch.float16))
    b = _sym(mode, torch.randn(k, n, dtype=torch.float16))
    with mode:
        c = torch.ops.warpgauge.gemm(a, b)
        da = torch.ops.warpgauge.gemm_grad_a(c, b)
    assert c.shape == (a.shape[0], b.shape[1]) and da.shape == a.shape


@pytest.mark.parametrize("m", [3, 70])  # the tile kernel's GEMV form (fused split), 128 x 64
def test_int4_linear_traces_with_symbolic_shapes(mode, m, monkeypatch):
    from warpgauge.kernels import int4_tile

    monkeypatch.setattr(int4_tile, "SMALL_WEIGHT", 1 << 25 if m <= 16 else 0)
    monkeypatch.setattr(int4_tile, "TILE_WIDE_TILES_PER_SM", 0)
    monkeypatch.setattr(int4_tile, "_COUNTERS", {})
    q = wg.quantize_int4(torch.randn(64, 1024))  # 8 groups: batch 3 splits (fused) 4 ways
    x = _sym(mode, torch.randn(m, 1024, dtype=torch.bfloat16))
    packed, scales = _sym(mode, q.packed), _sym(mode, q.scales)
    with mode:
        y = torch.ops.warpgauge.int4_linear(x, packed, scales, 128)
    assert y.shape == (x.shape[0], packed.shape[0])
    assert not int4_tile._COUNTERS  # no fake tensor was cached for later real calls


def test_argument_checks_trace_with_dynamic_floats():
    """The public functions' Python checks run under Dynamo with ``fullgraph=True`` and dynamic
    floats (eps arrives symbolic): no import machinery, no ``math.isfinite`` on a traced value."""
    from warpgauge._checks import check_eps, check_out_dtype

    @torch.compile(backend="eager", fullgraph=True, dynamic=True)
    def f(x, eps):
        check_out_dtype(torch.float32)
        return x * check_eps(eps)

    x = torch.randn(3, dtype=torch.float64)
    for eps in (1e-5, 2e-5):
        torch.testing.assert_close(f(x, eps), x * eps)
    with pytest.raises(ValueError, match="eps must be finite"):
        check_eps(-1.0)  # eager: still checked
