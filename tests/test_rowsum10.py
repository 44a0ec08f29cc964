"""row_sum's rowsum10 rule (kernels/row_sum_rule.py) and its evict-first reads.

The interpreter ignores eviction hints; each plan kind is still run both ways against the FP64
reference (outputs start as NaN, conftest) and checked for bit-identical sums (the hint changes
no arithmetic).
"""

from dataclasses import replace

import pytest
import torch

from warpgauge.kernels import row_sum as row_sum_k
from warpgauge.kernels.plans import RowPlan
from warpgauge.reference import assert_close, row_sum_ref

H200_L2 = 60 << 20

# (rows, width, plan): every kernel of row_sum.py; comments say which path.
PLANS = [
    (7, 1001, RowPlan.resident(1001)),  # aligned body + scalar edges
    (5, 1003, RowPlan.resident(1003, rows=2)),  # two rows per program
    (3, 1001, RowPlan("resident", 1024, 4, align=False)),  # scalar path
    (7, 1001, RowPlan("resident", 1024, 4, programs_per_sm=1)),  # persistent tiles
    (4, 1000, RowPlan.looped(128)),  # looped, one program per row, 8 chunks
    (7, 1001, RowPlan.looped(128, programs_per_sm=1)),  # looped, persistent grid, edges
    (2, 1000, RowPlan.split_for(2, 1000, 4, block=64)),  # split + finish
    (3, 1001, RowPlan.coop(128, 1)),  # cooperative chunks, edge on chunk 0
    (3, 131072, RowPlan.looped(8192, 16)),  # the rule's wide looped plan
]


def _rand(shape, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 3.0).to(dtype).to(device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,width,plan", PLANS)
def test_evict_first_reads(rows, width, plan, dtype, device):
    x = _rand((rows, width), dtype, device, seed=70)
    y = row_sum_k.row_sum(x, plan=replace(plan, evict=True))
    assert_close(y, row_sum_ref(x))
    assert torch.equal(y, row_sum_k.row_sum(x, plan=replace(plan, evict=False)))
    y32 = row_sum_k.row_sum(x, torch.float32, plan=replace(plan, evict=True))
    assert_close(y32, row_sum_ref(x, torch.float32))


@pytest.mark.parametrize("rows,width,plan", PLANS[:1] + PLANS[4:8])
def test_evict_first_strided_rows(rows, width, plan, device):
    base = _rand((rows, width + 11), torch.float16, device, seed=71)
    x = base[:, 3 : 3 + width]
    assert_close(row_sum_k.row_sum(x, plan=replace(plan, evict=True)), row_sum_ref(x))


def _rule(rows, width, l2=H200_L2, elem=2, sm=132):
    return RowPlan.for_shape(rows, width, sm, "row_sum", l2, elem)


def test_rule_unchanged_outside_the_looped_range():
    """Only the wide looped range changed (rowsum10); every other cell keeps session 9's plan,
    without the hint."""
    assert _rule(16384, 4096) == RowPlan.resident(4096, num_warps=4)
    assert _rule(8192, 32000) == RowPlan.resident(32000, num_warps=32)
    assert _rule(1024, 151936) == RowPlan.coop(16384, 8)
    assert _rule(100, 65537) == RowPlan.coop(16384, 8)
    assert _rule(4, 32769) == RowPlan.resident(32769, num_warps=32)  # body 32768
    assert _rule(16, 131072).kind == "split"  # 128 chunks < 132 SMs: as before


def test_rule_wide_rows_loop_one_program_per_row():
    looped = RowPlan.looped(8192, 16, evict=True)
    for rows in (27, 32, 64, 128, 263):  # 0.2 to 2 rows per SM on 132 SMs
        for width in (106496, 114688, 122880, 131072):  # whole 8192-element chunks
            assert _rule(rows, width) == looped, (rows, width)
            assert _rule(rows, width, l2=0, elem=4) == looped  # the shape and SMs decide
    for rows, width in ((26, 131072), (264, 131072), (1024, 131072), (100, 65537),
                        (64, 151936), (64, 98304), (128, 262144), (128, 128256),
                        (64, 100003), (64, 98305)):  # fmt: skip
        assert _rule(rows, width).kind != "looped" or _rule(rows, width) != looped, (rows, width)
    assert _rule(2, 131072, sm=4) == looped  # the interpreter's 4 SMs: 0.8 <= 2 < 8


def test_candidates_hold_the_rule_with_the_other_eviction_choice():
    c = RowPlan.candidates(64, 131072, 132, "row_sum", H200_L2, 2)
    assert c[0].evict and replace(c[0], evict=False) in c
    c = RowPlan.candidates(16384, 4096, 132, "row_sum", H200_L2, 2)
    assert not c[0].evict and replace(c[0], evict=True) in c
