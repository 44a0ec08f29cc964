"""add_rms_norm backward, the cooperative plan (``rmsnorm_backward._rms_bwd_coop``, forced with
``plan=RowPlan.coop(block, warps)``; no rule takes it yet) against FP64 autograd.

Under the interpreter programs run one after another, so a program finds its row-mates' slots
empty and computes their partials itself (the fallback path). Outputs start as NaN (conftest).
"""

import pytest
import torch

from warpgauge.kernels import rmsnorm_backward as bwd
from warpgauge.kernels.plans import RowPlan
from warpgauge.reference import assert_close

CASES = [
    (5, 1000, RowPlan.coop(128, 2)),  # 8 blocks, the last 104 columns; 5 rows: a ragged step
    (1, 300, RowPlan.coop(64, 1)),  # one row: one group, dw written directly
    (9, 257, RowPlan.coop(64, 1)),  # odd width, several groups (the finish kernel)
    (3, 100, RowPlan.coop(256, 2)),  # one block wider than the row
]


def _ref(dy, dh, h, w, eps=1e-6):
    h64 = h.double().requires_grad_()
    w64 = w.double().requires_grad_()
    (h64 * torch.rsqrt(h64.square().mean(-1, keepdim=True) + eps) * w64).backward(dy.double())
    dx = h64.grad + (dh.double() if dh is not None else 0.0)
    return dx.to(h.dtype), w64.grad.to(w.dtype)


def _inputs(rows, width, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    h, dy, dh = (torch.randn((rows, width), generator=g).to(dtype).to(device) for _ in range(3))
    w = (1 + 0.2 * torch.randn(width, generator=g)).to(dtype).to(device)
    return h, dy, dh, w


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_dh", [True, False])
@pytest.mark.parametrize("rows,width,plan", CASES)
def test_coop_backward_matches_fp64(rows, width, plan, with_dh, dtype, device):
    h, dy, dh, w = _inputs(rows, width, dtype, device)
    dh = dh if with_dh else None
    dx, dw = bwd.add_rms_norm_backward(dy, dh, h, w, 1e-6, plan=plan)
    dx_ref, dw_ref = _ref(dy, dh, h, w)
    assert_close(dx, dx_ref, msg=f"dx {rows}x{width} {plan}")
    assert_close(dw, dw_ref, msg=f"dw {rows}x{width} {plan}")


def test_coop_backward_groups_frozen_weight_and_special_rows(device, monkeypatch):
    """Several row groups (COOP_BWD_PER_SM set so 7 rows make 4 groups of 2), a frozen weight (no
    dw work), a zero row (rstd = 1/sqrt(eps), dx finite), a strided dy; deterministic."""
    monkeypatch.setattr(bwd, "COOP_BWD_PER_SM", 5)
    rows, width = 7, 515
    h, dy, dh, w = _inputs(rows, width, torch.float32, device, seed=3)
    h[2] = 0.0
    dy_s = torch.randn(rows, 2 * width, dtype=torch.float32).to(device)[:, ::2]
    plan = RowPlan.coop(128, 2)
    assert bwd._coop_groups(rows, -(-width // 128), 4) == 4
    dx, dw = bwd.add_rms_norm_backward(dy_s, None, h, w, 1e-6, plan=plan)
    dx_ref, dw_ref = _ref(dy_s, None, h, w)
    assert_close(dx, dx_ref, msg="dx")
    assert_close(dw, dw_ref, msg="dw")
    dx2, dw2 = bwd.add_rms_norm_backward(dy_s, None, h, w, 1e-6, plan=plan)
    assert torch.equal(dx, dx2) and torch.equal(dw, dw2)
    dx3, dw3 = bwd.add_rms_norm_backward(dy_s, None, h, w, 1e-6, need_dw=False, plan=plan)
    assert dw3 is None and torch.equal(dx3, dx)


def test_coop_backward_refuses_sub_and_persistent(device):
    x = torch.rand(2, 300, device=device)
    w = torch.rand(300, device=device)
    for p in (RowPlan.coop(128, 2, sub=32), RowPlan.coop(128, 2, programs_per_sm=2)):
        with pytest.raises(ValueError, match="neither sub"):
            bwd.add_rms_norm_backward(x, None, x, w, 1e-6, plan=p)
