"""Softmax backward, cooperative plans (``_softmax_bwd_coop``) against FP64 references.

Under the interpreter programs run one after another, so every program but the last of a row
finds row-mates' slots empty and computes their partial dot products itself (the fallback path);
on the GPU they run together (``tests/gpu/test_rows_gpu.py``). Outputs start as NaN (conftest), so
an element no program writes fails.
"""

import pytest
import torch

from warpgauge.kernels import softmax as softmax_k
from warpgauge.kernels.plans import RowPlan
from warpgauge.reference import assert_close, softmax_bwd_ref

CASES = [
    # registers (no sub): unaligned rows (aligned body + edge on chunk 0), ragged last chunk
    (3, 1001, RowPlan.coop(256, 2)),
    (4, 77, RowPlan.coop(16, 1)),  # 5 chunks of 16, heads of 0-7 elements
    (2, 1000, RowPlan.coop(128, 1)),  # aligned rows, last chunk 104 elements
    (1, 300, RowPlan.coop(512, 4)),  # one chunk wider than the row
    # slices walked twice: ragged last chunk (slices past its end skipped), eviction hints
    (3, 1001, RowPlan.coop(256, 2, sub=64, evict=True)),
    (2, 800, RowPlan.coop(256, 2, sub=64)),  # last chunk 32 elements: one slice
    (5, 999, RowPlan.coop(128, 1, sub=32)),
]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def _inputs(rows, width, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((rows, width), generator=g, dtype=torch.float64) * 3
    y = torch.softmax(x, -1).to(dtype)
    dy = torch.randn((rows, width), generator=g, dtype=torch.float64).to(dtype)
    return y, dy


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width,plan", CASES)
def test_coop_backward_matches_fp64(rows, width, plan, dtype, device):
    y, dy = _inputs(rows, width, dtype)
    y, dy = y.to(device), dy.to(device)
    dx = softmax_k.softmax_backward(y, dy, plan=plan)
    assert dx.dtype == dtype and dx.shape == y.shape
    assert_close(dx, softmax_bwd_ref(y, dy), msg=f"{rows}x{width} {plan}")


@pytest.mark.parametrize("plan", [RowPlan.coop(128, 1), RowPlan.coop(256, 2, sub=64)])
def test_coop_backward_special_rows(plan, device):
    """Masked entries (y = 0 over more than a chunk), an all-masked row (y = 0: dx = 0), a NaN
    in dy (its row's dot is NaN: the whole row is NaN, as in the reference), a strided dy."""
    rows, width = 4, 1001
    x = torch.randn(rows, width, dtype=torch.float64) * 3
    x[0, :400] = float("-inf")
    x[2, ::3] = float("-inf")
    y = torch.softmax(x, -1).to(torch.bfloat16)
    y[1] = 0.0
    dy = torch.randn(rows, 2 * width, dtype=torch.float64).to(torch.bfloat16)[:, ::2]
    dy[3, 500] = float("nan")
    y, dy = y.to(device), dy.to(device)
    dx = softmax_k.softmax_backward(y, dy, plan=plan)
    ref = softmax_bwd_ref(y, dy)
    assert torch.isnan(dx[3]).all() and torch.isnan(ref[3]).all()
    assert torch.equal(dx[1], torch.zeros_like(dx[1]))
    assert_close(dx[:3], ref[:3], msg=str(plan))


@pytest.mark.parametrize("plan", [RowPlan.coop(128, 1), RowPlan.coop(256, 2, sub=64)])
def test_coop_backward_views_with_offsets(plan, device):
    """y and dy as contiguous views that start one element into their storage (their rows start
    at other 16-byte phases than dx's), 3-D inputs."""
    rows, width = 6, 1001
    y, dy = _inputs(rows, width, torch.bfloat16, seed=5)
    ys = torch.empty(rows * width + 1, dtype=torch.bfloat16)
    ys[1:] = y.flatten()
    dys = torch.empty(rows * width + 3, dtype=torch.bfloat16)
    dys[3:] = dy.flatten()
    yv, dyv = ys[1:].view(2, 3, width).to(device), dys[3:].view(2, 3, width).to(device)
    dx = softmax_k.softmax_backward(yv, dyv, plan=plan)
    assert dx.shape == (2, 3, width)
    assert_close(dx.view(rows, width), softmax_bwd_ref(y, dy).to(device), msg=str(plan))


def test_coop_backward_empty_and_persistent_refused(device):
    y = torch.empty(0, 300, device=device)
    assert softmax_k.softmax_backward(y, y, plan=RowPlan.coop(64, 1)).shape == (0, 300)
    x = torch.rand(2, 300, device=device)
    with pytest.raises(ValueError, match="programs_per_sm.*forward-only"):
        softmax_k.softmax_backward(x, x, plan=RowPlan.coop(64, 1, programs_per_sm=2))
