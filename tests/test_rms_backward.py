"""add_rms_norm backward: the row-group rules (``BwdTune``), the single-group direct dw, the finish
columns, the early-dh option and the kernel counts, against the FP64 reference.

Interpreter runs pretend 4 SMs (``_device.py``). Outputs start NaN-poisoned (conftest), so an
element a path forgets to write fails the check."""

from __future__ import annotations

import pytest
import torch

from warpgauge.kernels import rmsnorm_backward as bwd
from warpgauge.kernels.plans import RowPlan
from warpgauge.reference import assert_close

from .launch_spy import spy_launches

# Tunes each case runs under: the module default (few large groups, one group writes dw itself),
# the old rule (legacy: groups = programs per SM x SMs, 64 finish columns), groups per SM only
# (min_group_elems 0: many groups, the finish kernel), narrow finish programs, early dh.
TUNES = {
    "default": bwd.BwdTune(),
    "legacy": bwd.BwdTune(legacy=True),
    "many-groups": bwd.BwdTune(min_group_elems=0),
    "finish16": bwd.BwdTune(min_group_elems=1024, finish_cols=16),
    "early-dh": bwd.BwdTune(min_group_elems=0, early_dh=True),
}

# (rows, width, plan) -- which branch each reaches (4 pretend SMs):
CASES = [
    (37, 300, None),  # resident prefetch, 37 rows: tiny (2-row steps, 4 groups) by default
    (130, 64, None),  # narrow rows, 130 rows: several groups even by default (8320 elements)
    (9, 1001, RowPlan("resident", 1024, 4, rows=2, programs_per_sm=2)),  # 2 rows/step, odd width
    (8, 9000, None),  # body 16384: no prefetch (early-dh applies), 1 program per SM
    (32, 127, None),  # the rule: tiny, 4-row tiles of 128 in 4 groups, then the finish
    (20, 1025, None),  # the rule: unaligned, launch block 2048 wider than the 1024 body's
    (3, 2000, None),  # 6000 elements past the tiny blocks: one group writes dw itself
    (7, 513, None),  # the rule: unaligned, launch block 1024: 2-row tiles
    (5, 33, RowPlan("resident", 32, 1, rows=4, programs_per_sm=1)),  # rows/step > rows/group
    (6, 1000, RowPlan.looped(128)),  # looped dx + separate dw pass (1 dw group: direct)
    (24, 300, RowPlan.looped(64)),  # separate dw pass with 3 row groups and the finish
    (2, 1000, RowPlan.split_for(2, 1000, 4, block=64)),  # split dx + separate dw pass
]


def _rand(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def _ref(dy, dh, h, w, eps=1e-6):
    h64 = h.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    y = h64 * torch.rsqrt(h64.square().mean(-1, keepdim=True) + eps) * w64
    y.backward(dy.double())
    dx = h64.grad + (dh.double() if dh is not None else 0.0)
    return dx.to(h.dtype), w64.grad.to(w.dtype)


def _spy_launches(monkeypatch) -> list:
    """The names of the kernels the backward launches from now on, in order."""
    return spy_launches(monkeypatch, bwd)


@pytest.fixture
def tune(request, monkeypatch):
    monkeypatch.setattr(bwd, "TUNE", TUNES[request.param])
    return TUNES[request.param]


@pytest.mark.parametrize("tune", list(TUNES), indirect=True)
@pytest.mark.parametrize("rows,width,plan", CASES)
def test_backward_every_tune(rows, width, plan, tune):
    if width > 8192 and not (tune.legacy or tune.early_dh):  # interpreter time: 16384 blocks
        pytest.skip("the wide case runs under legacy (several groups) and early-dh only")
    dtype = torch.bfloat16 if width % 2 else torch.float32
    h, dy, dh = (_rand((rows, width), dtype, s) for s in (1, 2, 3))
    w = _rand((width,), dtype, 4)
    for d in (dh, None):
        dx, dw = bwd.add_rms_norm_backward(dy, d, h, w, 1e-6, plan=plan)
        dx_ref, dw_ref = _ref(dy, d, h, w)
        assert_close(dx, dx_ref, msg="dx")
        assert_close(dw, dw_ref, msg="dw")
    again = bwd.add_rms_norm_backward(dy, dh, h, w, 1e-6, plan=plan)[1]
    assert torch.equal(again, bwd.add_rms_norm_backward(dy, dh, h, w, 1e-6, plan=plan)[1])
    dx2, dw2 = bwd.add_rms_norm_backward(dy, dh, h, w, 1e-6, need_dw=False, plan=plan)
    assert dw2 is None
    assert_close(dx2, _ref(dy, dh, h, w)[0], msg="dx without dw")


@pytest.mark.parametrize("tune", ["default", "many-groups"], indirect=True)
def test_strided_inputs_and_empty(tune):
    """Rows that are slices of wider rows (the launcher copies them contiguous) and 0 rows."""
    base = _rand((37, 311), torch.float16, 5)
    h = base[:, 5:305]
    dy = _rand((37, 320), torch.float16, 6)[:, 3:303]
    dh = _rand((37, 300), torch.float16, 7)
    w = _rand((300,), torch.float16, 8)
    dx, dw = bwd.add_rms_norm_backward(dy, dh, h, w, 1e-6)
    dx_ref, dw_ref = _ref(dy, dh, h, w)
    assert_close(dx, dx_ref, msg="dx")
    assert_close(dw, dw_ref, msg="dw")
    e = torch.empty((0, 300), dtype=torch.float16)
    dx, dw = bwd.add_rms_norm_backward(e, None, e, w, 1e-6)
    assert dx.shape == (0, 300) and torch.equal(dw, torch.zeros_like(w))


def test_host_cdiv_and_next_pow2_match_triton():
    import random

    import numpy as np
    import triton

    from warpgauge.kernels._launch import cdiv, next_pow2

    for a in (0, 1, 7, 8, 9, 4095, 4096, 1 << 40):
        for b in (1, 3, 8, 128):
            assert cdiv(a, b) == triton.cdiv(a, b)
    rng = random.Random(7)
    ns = [*range(0, 2049), *(2**k + d for k in range(1, 63) for d in (-1, 0, 1))]
    ns += [rng.randrange(1, 2**63) for _ in range(2000)]
    for n in ns:
        assert next_pow2(n) == triton.next_power_of_2(n), n
    assert next_pow2(np.int64(1000)) == 1024  # not a plain int: Triton's own


def test_row_groups_rule(monkeypatch):
    monkeypatch.setattr(bwd, "TUNE", bwd.BwdTune(min_group_elems=4096, min_rows_per_group=8))
    # groups: at most per_sm * SMs and one per step of rows, >= 4096 elements each, and above
    # one per SM at least 8 rows each; then cdiv again so that no group is empty
    assert bwd.row_groups(1024, 1024, 2, 2, 132) == 128  # 8 rows per group (S1: 8.0 us)
    assert bwd.row_groups(32, 127, 16, 2, 132) == 1  # 4064 elements: one group, dw direct
    assert bwd.row_groups(256, 2048, 1, 4, 132) == 128  # 4096-element groups (S1: 6.70 us)
    assert bwd.row_groups(2048, 2048, 1, 4, 132) == 256  # 8 rows each (S1: 15.9 vs 18.2 at 512)
    assert bwd.row_groups(16384, 2048, 1, 4, 132) == 512  # many rows: 4 per SM (32 rows each)
    assert bwd.row_groups(64, 4096, 1, 2, 132) == 64  # fewer rows than SMs: one row each
    monkeypatch.setattr(bwd, "TUNE", bwd.BwdTune(legacy=True))
    assert bwd.row_groups(1024, 1024, 1, 8, 132) == 1024  # the old rule: one row per group
    assert bwd.row_groups(32, 127, 1, 8, 132) == 32
    for tune in (bwd.BwdTune(), bwd.BwdTune(min_group_elems=0, min_rows_per_group=0)):
        monkeypatch.setattr(bwd, "TUNE", tune)
        for rows in (1, 7, 100, 1000, 5000):  # every group non-empty (cdiv recomputed)
            for per_sm in (1, 3, 8):
                g = bwd.row_groups(rows, 64, 1, per_sm, 4)
                rpp = -(-rows // g)
                assert (g - 1) * rpp < rows <= g * rpp


def test_tiny_plan_rule(monkeypatch):
    # Session 21 (rmsbwd21): rows x launch block <= TINY_ELEMS take one short step per program
    # in many groups (then the finish kernel); the width alone decides the plan's kernel, so the
    # two plans of a width compile once each.
    monkeypatch.setattr(bwd, "TUNE", bwd.BwdTune())
    cpu = torch.device("cpu")
    sm = 4  # the interpreter's SM count
    for rows, width, want in ((32, 127, (4, 2)), (64, 512, (2, 2)), (32, 1024, (2, 4)),
                              (1, 16, (16, 2)), (16, 100, (4, 2))):  # fmt: skip
        p = bwd.bwd_plan(rows, width, cpu)
        assert (p.rows, p.num_warps, p.prefetch) == (*want, True), (rows, width, p)
        assert bwd.is_tiny(rows, p.block)
    assert bwd.row_groups(32, 127, 4, 2, 132, tiny=True) == 8  # 4 rows each: one step
    assert bwd.row_groups(128, 127, 4, 2, 132, tiny=True) == 32
    assert bwd.row_groups(64, 512, 2, 2, 132, tiny=True) == 32
    # past TINY_ELEMS, or blocks above the small tiles: the rule as before
    assert bwd.bwd_plan(257, 127, cpu) == bwd.resident_rule(
        127, RowPlan.for_shape(257, 127, sm, "rms_bwd")
    )
    assert not bwd.is_tiny(33, 1024) and not bwd.is_tiny(8, 4096)
    monkeypatch.setattr(bwd, "TUNE", bwd.BwdTune(legacy=True))
    assert not bwd.is_tiny(32, 128)


@pytest.mark.parametrize("rows,width", [(32, 127), (5, 1000), (64, 512), (3, 17)])
def test_tiny_plan_matches_fp64(rows, width):
    # Several groups of one step each, dw from the partials (outputs NaN-poisoned, module doc)
    h = _rand((rows, width), torch.bfloat16, 11) * 2
    dy = _rand((rows, width), torch.bfloat16, 12)
    dh = _rand((rows, width), torch.bfloat16, 13)
    w = _rand((width,), torch.bfloat16, 14)
    assert bwd.is_tiny(rows, bwd.bwd_plan(rows, width, h.device).block)
    dx, dw = bwd.add_rms_norm_backward(dy, dh, h, w, 1e-6)
    dx_ref, dw_ref = _ref(dy, dh, h, w)
    assert_close(dx, dx_ref, msg="dx")
    assert_close(dw, dw_ref, msg="dw")


@pytest.mark.parametrize("rows,width", [(32, 127), (3, 17), (8, 1000), (7, 513), (60, 100)])
@pytest.mark.parametrize("with_dh", [False, True])
def test_tiny_fused_dw_matches_fp64(rows, width, with_dh, monkeypatch):
    # One launch: dx programs plus a last program that sums dw over every row (one or two
    # steps); outputs NaN-poisoned, and a second call gives the same bits.
    monkeypatch.setattr(bwd, "TUNE", bwd.BwdTune())
    monkeypatch.setattr(bwd, "TINY_FUSED_DW_MAX", 8192)
    h = _rand((rows, width), torch.bfloat16, 21) * 2
    dy = _rand((rows, width), torch.bfloat16, 22)
    dh = _rand((rows, width), torch.bfloat16, 23) if with_dh else None
    w = _rand((width,), torch.bfloat16, 24)
    p = bwd.bwd_plan(rows, width, h.device)
    assert bwd.fused_tiny(rows, width, p, None, True)
    assert bwd.backward_kernels(rows, width, h.device) == 1
    assert not bwd.fused_tiny(rows, width, p, None, False)  # frozen weight: the plain kernel
    launched = _spy_launches(monkeypatch)
    dx, dw = bwd.add_rms_norm_backward(dy, dh, h, w, 1e-6)
    assert launched == ["_rms_bwd_tiny"]
    dx_ref, dw_ref = _ref(dy, dh, h, w)
    assert_close(dx, dx_ref, msg="dx")
    assert_close(dw, dw_ref, msg="dw")
    dx2, dw2 = bwd.add_rms_norm_backward(dy, dh, h, w, 1e-6)
    assert torch.equal(dx, dx2) and torch.equal(dw, dw2)


def test_tiny_fused_dw_bounds(monkeypatch):
    monkeypatch.setattr(bwd, "TUNE", bwd.BwdTune())
    monkeypatch.setattr(bwd, "TINY_FUSED_DW_MAX", 8192)
    cpu = torch.device("cpu")
    for rows, width, want in ((64, 127, True), (65, 127, False), (8, 1024, True), (9, 1024, False),
                              (2, 4096, False)):  # fmt: skip
        p = bwd.bwd_plan(rows, width, cpu)
        assert bwd.fused_tiny(rows, width, p, None, True) is want, (rows, width)
    p = bwd.bwd_plan(32, 127, cpu)
    assert not bwd.fused_tiny(32, 127, p, p, True)  # a forced plan runs as forced
    monkeypatch.setattr(bwd, "TINY_FUSED_DW_MAX", 0)
    assert not bwd.fused_tiny(32, 127, p, None, True)
    # the committed bound (s21f): one dw step, rows x block <= 4096
    monkeypatch.setattr(bwd, "TINY_FUSED_DW_MAX", bwd.TINY_DW_TILE)
    for rows, width, want in ((32, 127, True), (33, 127, False), (4, 1024, True), (8, 1024, False)):
        assert bwd.fused_tiny(rows, width, bwd.bwd_plan(rows, width, cpu), None, True) is want


def test_finish_cols_rule(monkeypatch):
    monkeypatch.setattr(bwd, "TUNE", bwd.BwdTune())
    assert bwd.finish_cols(1024, 132) == 16  # 64 programs, not 16 of 64 columns
    assert bwd.finish_cols(4096, 132) == 16
    assert bwd.finish_cols(5120, 132) == 64  # >= 32 * SMs: 80 programs of 64 columns
    assert bwd.finish_cols(16384, 132) == 64
    assert bwd.finish_cols(100, 4) == 16
    assert bwd.finish_cols(8192, 100) == 64
    monkeypatch.setattr(bwd, "TUNE", bwd.BwdTune(legacy=True))
    assert bwd.finish_cols(1024, 132) == 64


@pytest.mark.parametrize(
    "width,want",
    [
        (127, RowPlan("resident", 128, 4, rows=16, programs_per_sm=2)),  # 2048-element tiles
        (768, RowPlan("resident", 1024, 4, rows=2, programs_per_sm=2)),
        (1024, RowPlan("resident", 1024, 4, rows=2, programs_per_sm=2)),
        (513, RowPlan("resident", 1024, 4, rows=2, programs_per_sm=2)),  # launch block 1024
        (4097, RowPlan("resident", 8192, 16, programs_per_sm=1)),  # launch block 8192
        (8193, RowPlan("resident", 16384, 16, programs_per_sm=1, prefetch=False)),  # no spills
        (4096, None),  # aligned, above the small tiles: the row plans' plan as is
        (14336, None),
    ],
)
def test_resident_rule(width, want, monkeypatch):
    monkeypatch.setattr(bwd, "TUNE", bwd.BwdTune())
    for rows in (64, 300, 4096):  # the width alone decides
        base = RowPlan.for_shape(rows, width, 132, "rms_bwd")
        assert base.kind == "resident"
        assert bwd.resident_rule(width, base) == (want or base)
    monkeypatch.setattr(bwd, "TUNE", bwd.BwdTune(legacy=True))
    assert bwd.bwd_plan(300, width, torch.device("cpu")) == RowPlan.for_shape(
        300, width, 4, "rms_bwd"
    )


SEPARATE_DW = [c for c in CASES if c[2] is not None and c[2].kind != "resident"]


@pytest.mark.parametrize("tune", ["default", "many-groups", "legacy"], indirect=True)
@pytest.mark.parametrize("rows,width,plan", [(3, 64, None), (130, 64, None), *SEPARATE_DW])
def test_kernel_count(rows, width, plan, tune, monkeypatch):
    """backward_kernels says how many launches a backward makes (the sweep reports it)."""
    launched = _spy_launches(monkeypatch)
    h, dy = _rand((rows, width), torch.float32, 9), _rand((rows, width), torch.float32, 10)
    w = _rand((width,), torch.float32, 11)
    for need_dw in (True, False):
        launched.clear()
        bwd.add_rms_norm_backward(dy, None, h, w, 1e-6, need_dw=need_dw, plan=plan)
        assert len(launched) == bwd.backward_kernels(rows, width, h.device, plan, need_dw)
        main = {"resident": 0, "looped": 1, "split": 2}[plan.kind if plan else "resident"]
        # the resident kernel computes dw itself, the split plan's write pass too (folded);
        # the looped plan (and the split plan without the fold) run a dw pass
        kind = plan.kind if plan else "resident"
        dw = int(need_dw and not (kind == "split" and bwd.folds_dw(width)))
        assert ("_rms_dw_finish" in launched) == (len(launched) > max(1, main + dw))
    if tune.legacy or tune.min_group_elems == 0:
        return
    if rows * width <= tune.min_group_elems and plan is None:
        assert launched == ["_rms_bwd_resident"]  # the last call (no dw): one kernel


@pytest.mark.parametrize("fold_per_sm", [1, 8])
@pytest.mark.parametrize(
    "rows,width,block",
    [(13, 3000, 512), (1, 2504, 256), (40, 4104, 512), (6, 1024, 128), (9, 3001, 512)],
)
def test_split_write_with_folded_dw(rows, width, block, fold_per_sm, monkeypatch):
    """The split plan's write pass with dw folded in (``folds_dw``, aligned widths): several
    column blocks (a masked tail), row groups of fewer rows than a step and of several steps
    (``SPLIT_FOLD_PER_SM`` 1: long groups), one group (dw written directly), with and without
    dh; dx and dw against FP64, dw the same bits on a second call, the kernel count right. An
    unaligned width (3001) keeps the separate dw pass."""
    monkeypatch.setattr(bwd, "SPLIT_FOLD_PER_SM", fold_per_sm)
    folded = width % 8 == 0
    assert bwd.folds_dw(width) == folded
    plan = RowPlan.split_for(rows, width, 4, block=block)
    assert plan.kind == "split" and plan.n_chunks(width) > 1
    h, dy, dh = (_rand((rows, width), torch.bfloat16, s) for s in (21, 22, 23))
    w = _rand((width,), torch.bfloat16, 24)
    launched = _spy_launches(monkeypatch)
    for d in (dh, None):
        launched.clear()
        dx, dw = bwd.add_rms_norm_backward(dy, d, h, w, 1e-6, plan=plan)
        assert ("_rms_bwd_split_write_dw" in launched) == folded
        assert ("_rms_dw_partial" in launched) == (not folded)
        assert len(launched) == bwd.backward_kernels(rows, width, h.device, plan)
        dx_ref, dw_ref = _ref(dy, d, h, w)
        assert_close(dx, dx_ref, msg="dx")
        assert_close(dw, dw_ref, msg="dw")
    groups = bwd._fold_groups(rows, width, 4) if folded else bwd._dw_groups(rows, width, 4)
    assert ("_rms_dw_finish" in launched) == (groups > 1)
    again = bwd.add_rms_norm_backward(dy, dh, h, w, 1e-6, plan=plan)[1]
    assert torch.equal(again, bwd.add_rms_norm_backward(dy, dh, h, w, 1e-6, plan=plan)[1])


# Found by mutation testing (session 22): the committed bound, eps, forced plans' groups.
def test_tiny_fused_dw_committed_bound_one_launch(monkeypatch):
    # The module's own TINY_FUSED_DW_MAX (not patched): 32x127 (launch block 128, 4096
    # elements, one dw step) runs as the one fused launch, 33 rows as the tiny plan's kernels.
    monkeypatch.setattr(bwd, "TUNE", bwd.BwdTune())
    cpu = torch.device("cpu")
    assert bwd.backward_kernels(32, 127, cpu) == 1
    assert bwd.backward_kernels(33, 127, cpu) == 2
    h, dy = _rand((32, 127), torch.float32, 31), _rand((32, 127), torch.float32, 32)
    w = _rand((127,), torch.float32, 33)
    launched = _spy_launches(monkeypatch)
    bwd.add_rms_norm_backward(dy, None, h, w, 1e-6)
    assert launched == ["_rms_bwd_tiny"]


@pytest.mark.parametrize("rows,width", [(32, 127), (3, 17)])
def test_tiny_fused_small_h_uses_eps(rows, width, monkeypatch):
    # mean(h^2) ~ eps: the fused kernel's dx programs and its dw program both need eps in rstd.
    monkeypatch.setattr(bwd, "TUNE", bwd.BwdTune())
    h = _rand((rows, width), torch.float32, 41) * 1e-3
    dy = _rand((rows, width), torch.float32, 42)
    w = _rand((width,), torch.float32, 43)
    assert bwd.fused_tiny(rows, width, bwd.bwd_plan(rows, width, h.device), None, True)
    dx, dw = bwd.add_rms_norm_backward(dy, None, h, w, 1e-6)
    dx_ref, dw_ref = _ref(dy, None, h, w, eps=1e-6)
    assert_close(dx, dx_ref, msg="dx")
    assert_close(dw, dw_ref, msg="dw")


def test_forced_plan_groups_ignore_tiny_rule(monkeypatch):
    # A forced resident plan runs as forced: its row groups follow TUNE.min_group_elems even
    # at a tiny shape (TINY_GROUP_ELEMS is the rule's plan only).
    monkeypatch.setattr(bwd, "TUNE", bwd.BwdTune())
    plan = RowPlan("resident", 1024, 4, rows=2, programs_per_sm=2)
    assert bwd.is_tiny(9, plan.resident_block(1001, False))
    assert bwd._groups(9, 1001, plan, 4, plan) == bwd.row_groups(9, 1001, 2, 2, 4) == 2
    rule = bwd.bwd_plan(9, 1001, torch.device("cpu"))
    assert bwd._groups(9, 1001, rule, 4, None) == bwd.row_groups(
        9, 1001, rule.rows, 2, 4, tiny=True
    )
