"""rows10 plan fields: ``hold_x`` (the register cooperative softmax holds its chunk as loaded and
computes the exps again after the exchange), ``nap`` (nanosleep between polls; the interpreter
never polls) and ``maxnreg`` (a register cap; the interpreter ignores it).

Under the interpreter ``ex2`` runs ``tl.exp2`` and the inline-PTX conversion ``bits_f32_asm``
runs ``bits_f32``; the GPU side is checked by the rows10 sweep's gate (FP64 reference, special
rows at an odd width and on strided rows).
"""

import itertools

import pytest
import torch

from warpgauge.kernels import rmsnorm as rms_k
from warpgauge.kernels import softmax as softmax_k
from warpgauge.kernels.plans import RowPlan
from warpgauge.reference import add_rms_norm_ref, assert_close, softmax_ref

CASES = [
    # unaligned rows: aligned body + edge on chunk 0, 8 chunks of 128, the last ragged
    (3, 1001, RowPlan.coop(128, 1, fast_exp=True, hold_x=True)),
    # aligned rows, 4 chunks of 256, the last ragged (232 elements); a cap and a backoff
    (2, 1000, RowPlan.coop(256, 2, fast_exp=True, hold_x=True, maxnreg=40, nap=200)),
    (4, 77, RowPlan.coop(16, 1, fast_exp=True, hold_x=True)),  # 5 chunks, heads of 0-7
    (2, 1000, RowPlan.coop(256, 2, hold_x=True)),  # tl.exp instead of ex2
]


def _rand(shape, dtype, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("rows,width,plan", CASES)
def test_hold_x_plans(rows, width, plan, dtype, device):
    """FP64 reference on random rows plus a -inf prefix over whole chunks, an all -inf row
    (zeros), a +1000 offset, one large logit. Outputs start NaN (conftest poisoning)."""
    x = _rand((rows + 4, width), dtype, scale=4.0, seed=70)
    x[0, : (3 * width) // 4] = float("-inf")
    x[1, :] = float("-inf")
    x[2] += 1000.0
    x[3, width // 3] = 60.0
    y = softmax_k.softmax(x.to(device), plan=plan)
    assert torch.equal(y[1].float().cpu(), torch.zeros(width))
    assert_close(y, softmax_ref(x).to(device), msg=str(plan), relative=True)


@pytest.mark.parametrize("rows,width,plan", CASES)
def test_hold_x_nan_rows_and_strides(rows, width, plan, device):
    """A NaN or +inf makes its row NaN; strided rows (a slice of wider rows) take the scalar
    path."""
    x = _rand((rows + 2, width), torch.bfloat16, scale=3.0, seed=71)
    x[0, width // 2] = float("nan")
    x[1, : width - 1] = float("-inf")
    x[1, -1] = float("nan")
    x[2, width // 5] = float("inf")
    y = softmax_k.softmax(x.to(device), plan=plan)
    assert torch.isnan(y[:3].float()).all()
    assert_close(y[3:], softmax_ref(x[3:]).to(device), relative=True)
    base = _rand((rows, width + 11), torch.bfloat16, scale=3.0, seed=72)
    xs = base[:, 3 : 3 + width].to(device)
    assert_close(softmax_k.softmax(xs, plan=plan), softmax_ref(xs), relative=True)


def test_rms_coop_maxnreg(device):
    """add_rms_norm's register cooperative plan with a register cap: same results."""
    x = _rand((3, 1001), torch.bfloat16, seed=73).to(device)
    r = _rand((3, 1001), torch.bfloat16, seed=74).to(device)
    w = _rand((1001,), torch.bfloat16, seed=75).to(device)
    y, h = rms_k.add_rms_norm(x, r, w, 1e-6, plan=RowPlan.coop(128, 1, maxnreg=40))
    y_ref, h_ref = add_rms_norm_ref(x, r, w, 1e-6)
    assert_close(h, h_ref)
    assert_close(y, y_ref)


def test_hold_x_fields():
    with pytest.raises(ValueError, match="hold_x"):
        RowPlan.coop(16384, 8, sub=4096, fast_exp=True, hold_x=True)  # register plans only


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rms_rule_coop_2048(dtype, device):
    """The add_rms_norm rule beyond the resident range (2048-wide chunks: 1 warp since S15, 2 in
    R10): an odd width (aligned body + edge on chunk 0, a ragged last chunk) and strided rows,
    against the FP64 reference, for both warp counts."""
    assert RowPlan.for_shape(3, 40001, 132, "rms") == RowPlan.coop(2048, 1)
    x = _rand((3, 40001), dtype, seed=76).to(device)
    r = _rand((3, 40001), dtype, seed=77).to(device)
    w = _rand((40001,), dtype, seed=78).to(device)
    cases = ((x, r), (_rand((3, 40040), dtype, seed=79).to(device)[:, 5:40006], r))
    for (xs, rs), warps in itertools.product(cases, (1, 2)):
        y, h = rms_k.add_rms_norm(xs, rs, w, 1e-6, plan=RowPlan.coop(2048, warps))
        y_ref, h_ref = add_rms_norm_ref(xs, rs, w, 1e-6)
        assert_close(h, h_ref)
        assert_close(y, y_ref)
