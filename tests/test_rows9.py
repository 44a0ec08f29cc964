"""row_sum's persistent tile plan and add_rms_norm's early weight load (``w_early``) against the
FP64 references, under the interpreter's 4-SM GPU.

Outputs start as NaN (conftest), so an element a kernel forgets to write fails. Shapes are chosen
so that each program walks several tiles (rows > programs_per_sm * 4 * rows-per-tile), the last
tile is partly past the end, and both row paths run: the aligned body + scalar edge (contiguous
rows of a width that is not a multiple of 8) and the plain path (aligned widths, strided rows).
"""

import dataclasses

import pytest
import torch

from warpgauge.kernels import rmsnorm as rms_k
from warpgauge.kernels import row_sum as row_sum_k
from warpgauge.kernels.plans import RowPlan
from warpgauge.reference import add_rms_norm_ref, assert_close, row_sum_ref


def _rand(shape, dtype, device, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale + 0.25).to(dtype).to(device)


def _persist(width, warps=1, rows=1, per_sm=1):
    return RowPlan("resident", RowPlan.resident(width).block, warps, rows=rows,
                   programs_per_sm=per_sm)  # fmt: skip


# (rows, width, plan): 4 SMs under the interpreter, so per_sm * 4 programs.
PERSIST = [
    (11, 1001, _persist(1001)),  # aligned body 1000 + edges, 4 programs walk 2-3 tiles each
    (13, 127, _persist(127, rows=2)),  # aligned body 120 + edges, 2-row tiles
    (9, 64, _persist(64, rows=4, per_sm=1)),  # aligned rows, 3 tiles of 4, the last one ragged
    (5, 200, _persist(200, warps=2, rows=2, per_sm=2)),  # more programs than tiles
    (1, 4100, _persist(4100, warps=4)),  # one row: the loop runs once, the prefetch is masked
    (17, 33, _persist(33, rows=2)),  # narrower than the aligned path's 64: scalar access
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,width,plan", PERSIST)
def test_row_sum_persistent(rows, width, plan, dtype, device):
    x = _rand((rows, width), dtype, device, scale=3.0, seed=1)
    assert_close(row_sum_k.row_sum(x, plan=plan), row_sum_ref(x))
    out = row_sum_k.row_sum(x, torch.float32, plan=plan)
    assert out.dtype == torch.float32
    assert_close(out, row_sum_ref(x, torch.float32))


@pytest.mark.parametrize("rows,width,plan", PERSIST[:4])
def test_row_sum_persistent_strided_nan_empty(rows, width, plan, device):
    base = _rand((rows, width + 11), torch.float16, device, scale=3.0, seed=2)
    x = base[:, 3 : 3 + width]  # row stride width + 11, unaligned starts: the scalar path
    assert_close(row_sum_k.row_sum(x, plan=plan), row_sum_ref(x))
    x = _rand((rows, width), torch.bfloat16, device, seed=3)
    x[rows // 2, width // 3] = float("nan")
    y = row_sum_k.row_sum(x, plan=plan).float().cpu()
    assert torch.isnan(y[rows // 2]) and not torch.isnan(y[torch.arange(rows) != rows // 2]).any()
    empty = torch.empty((0, width), dtype=torch.bfloat16, device=device)
    assert row_sum_k.row_sum(empty, plan=plan).shape == (0,)


# add_rms_norm with the weight loaded early, on the plans that read it (resident, cooperative).
W_EARLY = [
    (7, 1001, RowPlan.resident(1001)),  # aligned body + edge
    (5, 1003, RowPlan.resident(1003, rows=2)),  # two rows per program + aligned path
    (3, 256, RowPlan.resident(256)),  # aligned rows: plain path
    (3, 1001, RowPlan.coop(128, 1)),  # 8 chunks, edge on chunk 0 (both exchange paths run)
    (2, 1000, RowPlan.coop(256, 2)),  # aligned rows, 4 chunks, the last ragged
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,width,plan", W_EARLY)
def test_add_rms_norm_w_early(rows, width, plan, dtype, device):
    plan = dataclasses.replace(plan, w_early=True)
    x = _rand((rows, width), dtype, device, seed=4)
    r = _rand((rows, width), dtype, device, seed=5)
    w = _rand((width,), dtype, device, seed=6)
    y, h = rms_k.add_rms_norm(x, r, w, 1e-6, plan=plan)
    y_ref, h_ref = add_rms_norm_ref(x, r, w, 1e-6)
    assert_close(h, h_ref, msg="h")
    assert_close(y, y_ref, msg="y")
    # the same bits as the late load: only the load's position moves
    y0, h0 = rms_k.add_rms_norm(x, r, w, 1e-6, plan=dataclasses.replace(plan, w_early=False))
    assert torch.equal(y, y0) and torch.equal(h, h0)


@pytest.mark.parametrize("rows,width,plan", W_EARLY)
def test_add_rms_norm_w_early_strided_empty(rows, width, plan, device):
    plan = dataclasses.replace(plan, w_early=True)
    x = _rand((rows, width + 11), torch.float16, device, seed=7)[:, 3 : 3 + width]
    r = _rand((rows, width + 5), torch.float16, device, seed=8)[:, 5:]
    w = _rand((width,), torch.float16, device, seed=9)
    y, h = rms_k.add_rms_norm(x, r, w, 1e-6, plan=plan)
    y_ref, h_ref = add_rms_norm_ref(x, r, w, 1e-6)
    assert_close(h, h_ref, msg="h")
    assert_close(y, y_ref, msg="y")
    e = torch.empty((0, width), dtype=torch.float16, device=device)
    y, h = rms_k.add_rms_norm(e, e, w, 1e-6, plan=plan)
    assert y.shape == h.shape == (0, width)


H200_L2 = 60 << 20


def test_row_sum_rule_tiles_of_two_rows_at_body_1024():
    """Many rows of body 1024 (widths 520-1031) go two per program (S9: 74898x896 1.48x,
    16384x896 1.34x); fewer rows, other bodies and the other operators are unchanged."""

    def rule(rows, width, op="row_sum"):
        return RowPlan.for_shape(rows, width, 132, op, H200_L2, 2)

    two = RowPlan("resident", 1024, 4, rows=2)
    assert rule(74898, 896) == rule(16384, 896) == rule(4224, 1024) == rule(5000, 521) == two
    assert rule(4223, 896) == RowPlan("resident", 1024, 2)  # below 32 rows per SM
    assert rule(2048, 896) == RowPlan("resident", 1024, 2)
    assert rule(32768, 2048) == RowPlan("resident", 2048, 2)  # body 2048: one row
    assert rule(16384, 4096) == RowPlan("resident", 4096, 4)
    assert rule(74898, 896, "softmax").rows == rule(74898, 896, "rms").rows == 1


def test_row_sum_rule_path_runs(device):
    """The automatic plan at body 1024 with 2-row tiles (interpreter: 4 SMs, so 128 rows and
    up), an odd row count so the last tile is half empty, aligned and unaligned widths."""
    from warpgauge.kernels._launch import row_plan

    for width in (600, 1001):
        x = _rand((129, width), torch.bfloat16, device, scale=2.0, seed=10)
        assert row_plan(129, width, x.device, None, "row_sum", 2).rows == 2
        assert_close(row_sum_k.row_sum(x), row_sum_ref(x))


def test_candidates_hold_the_new_plans():
    """The plan grid can force the persistent row_sum tiles and add_rms_norm's weight-load twin."""
    rs = RowPlan.candidates(16384, 4096, 132, "row_sum", H200_L2, 2)
    assert RowPlan("resident", 4096, 4, programs_per_sm=8) in rs
    rms = RowPlan.candidates(1, 4096, 132, "rms", H200_L2, 2)
    assert {
        RowPlan.resident(4096),
        dataclasses.replace(RowPlan.resident(4096), w_early=True),
    } <= set(rms)
    coop = RowPlan.candidates(64, 131072, 132, "rms", H200_L2, 2)
    assert dataclasses.replace(coop[0], w_early=True) in coop
