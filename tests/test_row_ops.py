"""Row operators (softmax, add_rms_norm, row_sum) and add against FP64 references.

Shapes are chosen to reach every plan under the interpreter (which pretends a 4-SM GPU):
resident (one row or several rows per program; the aligned-body path for unaligned rows and the
scalar path), looped (one program per row, or a persistent grid with eviction hints) and split,
forced with small blocks so that narrow test rows still cross several chunks. Outputs start as
NaN (conftest), so an unwritten element fails.
"""

import pytest
import torch

import warpgauge as wg
from warpgauge.kernels import rmsnorm as rms_k
from warpgauge.kernels import row_sum as row_sum_k
from warpgauge.kernels import softmax as softmax_k
from warpgauge.kernels.plans import RESIDENT_MAX, RowPlan
from warpgauge.reference import (
    add_ref,
    add_rms_norm_ref,
    assert_close,
    row_sum_ref,
    softmax_bwd_ref,
    softmax_ref,
)

DTYPES = [torch.float32, torch.float16, torch.bfloat16]

# (rows, width, plan): the plan None means the automatic rule; comments say which branch it hits.
CASES = [
    (3, 1, None),  # resident, width 1
    (5, 127, None),  # resident, odd width below the aligned path's 64 (scalar access)
    (7, 1001, None),  # resident, aligned body of 1000 + scalar edges (rows start unaligned)
    (6, 200, RowPlan.resident(200, rows=4)),  # 4 rows per program, the last program half empty
    (5, 1003, RowPlan.resident(1003, rows=2)),  # several rows per program + aligned path
    (3, 1001, RowPlan("resident", 1024, 4, align=False)),  # scalar path forced
    (7, 1001, RowPlan("resident", 1024, 4, programs_per_sm=1)),  # softmax persistent + prefetch
    (6, 256, RowPlan("resident", 256, 2, programs_per_sm=1)),  # the same (+ add_rms_norm),
    (9, 64, RowPlan("resident", 64, 1, programs_per_sm=2)),  # aligned rows, 8 programs
    (4, 1000, RowPlan.looped(128)),  # looped, one program per row, 8 chunks, ragged tail
    (7, 1001, RowPlan.looped(128, programs_per_sm=1, evict=True)),  # persistent: 4 programs
    (6, 999, RowPlan.looped(64, programs_per_sm=1, lane_stats=True)),  # per-lane softmax stats
    (7, 1003, RowPlan.looped(128, programs_per_sm=1, lane_stats=True, stages=3)),  # pipelined
    (2, 1000, RowPlan.split_for(2, 1000, 4, block=64)),  # split, 4 programs per row
    (1, 777, RowPlan("split", 32, 1, split=7)),  # split, uneven chunks
    (3, RESIDENT_MAX + 1, None),  # automatic split: 3 rows < 4 SMs, width just past resident
    (5, RESIDENT_MAX + 3, None),  # automatic looped: 5 rows >= 4 SMs
    (2, 2 * RESIDENT_MAX + 5, None),  # automatic coop: softmax (2 rows = SM/2), rms, row_sum
    (1, 20001, None),  # automatic, 1 row < SM/2: coop 2048 (softmax, rms), resident row_sum
    (4, 2 * RESIDENT_MAX + 5, None),  # automatic, 4 rows = SM: softmax looped coop (sub)
]


def _rand(shape, dtype, device, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype).to(device)


def test_plan_rule():
    assert RowPlan.for_shape(10, 127, 132).kind == "resident"
    assert RowPlan.for_shape(10, 8192, 132).kind == "resident"
    # few rows (< SM/2) of bodies within RESIDENT_MAX: cooperative 2048 chunks (softmax with
    # ex2 exps, add_rms_norm), resident row_sum (16 warps below SM rows)
    assert RowPlan.for_shape(4, 32769, 132, "softmax") == RowPlan.coop(2048, 4, fast_exp=True)
    assert RowPlan.for_shape(4, 16385, 132, "rms") == RowPlan.coop(2048, 4)
    assert RowPlan.for_shape(4, 32769, 132, "row_sum") == RowPlan.resident(32769, num_warps=32)
    assert RowPlan.for_shape(99, 16385, 132, "row_sum") == RowPlan.resident(16385, num_warps=16)
    assert RowPlan.for_shape(4096, 16385, 132, "row_sum").num_warps == 8  # many rows: as before
    assert RowPlan.for_shape(4, 16384, 132, "softmax").kind == "resident"  # not past 16384
    assert RowPlan.for_shape(32768, 16384, 132).kind == "resident"
    # softmax's backward beyond the resident range: cooperative (B14), looped chunks of 8192
    # where the rows give at least 2 of them per SM, else register chunks of 4096
    bwd_loop = RowPlan.coop(8192, 4, sub=2048, evict=True)
    assert RowPlan.for_shape(4096, 131072, 132, "softmax_bwd") == bwd_loop
    assert RowPlan.for_shape(64, 131072, 132, "softmax_bwd") == bwd_loop  # 1024 programs
    assert RowPlan.for_shape(16, 65537, 132, "softmax_bwd") == RowPlan.coop(4096, 4)  # 144
    assert RowPlan.for_shape(1, 1048576, 132, "softmax_bwd").kind == "split"  # 256 chunks
    assert RowPlan.for_shape(1, 131072, 132, "softmax_bwd").kind == "split"  # 32 chunks
    assert RowPlan.for_shape(1, 126976, 132, "softmax_bwd") == RowPlan.coop(4096, 4)  # 31
    assert RowPlan.for_shape(64, 20000, 132, "softmax_bwd") == RowPlan.coop(4096, 4)  # few
    assert RowPlan.for_shape(4096, 20000, 132, "softmax_bwd").kind == "resident"
    # resident backward rows that leave part of the block masked: the forward's warps (B14 res)
    for width, warps in ((2880, 4), (5120, 8), (7168, 8), (14336, 8), (4096, 8), (8192, 16),
                         (16384, 16), (4097, 8), (32000, 16), (1000, 4)):  # fmt: skip
        assert RowPlan.for_shape(2048, width, 132, "softmax_bwd").num_warps == warps, width
    # rows of more chunks than the GPU holds keep the split / looped plans
    assert RowPlan.for_shape(2, 2**25, 132, "softmax_bwd").kind == "split"
    assert RowPlan.for_shape(300, 2**25, 132, "softmax_bwd").kind == "looped"
    p = RowPlan.for_shape(4, 131072, 132, "softmax")  # 4 x 32 chunks < 2 per SM: split
    assert p.kind == "split" and p.n_chunks(131072) * p.chunk(131072) >= 131072
    # beyond the resident range: cooperative plans (add_rms_norm always; row_sum with at least
    # one program per SM; softmax with SM/2 to SM rows), looped for many softmax rows
    for rows in (2, 64, 4096):  # 2048/1 chunks (S15) while a row has <= 2 x SM of them
        assert RowPlan.for_shape(rows, 131072, 132, "rms") == RowPlan.coop(2048, 1)
        assert RowPlan.for_shape(rows, 131072, 132).kind in ("split", "looped")  # generic
    assert RowPlan.for_shape(2, 540672, 132, "rms") == RowPlan.coop(2048, 1)  # 264 chunks
    # wider (G16): 4096/2 chunks, the looped chunks once rows x 8192-chunks give 8 per SM
    assert RowPlan.for_shape(2, 540673, 132, "rms") == RowPlan.coop(4096, 2)
    assert RowPlan.for_shape(2, 1048576, 132, "rms") == RowPlan.coop(4096, 2)  # 256 programs
    rms_loop = RowPlan.coop(8192, 2, sub=2048, evict=True)
    assert RowPlan.for_shape(9, 1048576, 132, "rms") == rms_loop  # 1152 >= 8 x 132 programs
    assert RowPlan.for_shape(8, 1048576, 132, "rms") == RowPlan.coop(4096, 2)  # 1024
    assert RowPlan.for_shape(128, 1048576, 132, "rms") == rms_loop
    assert RowPlan.for_shape(16, 262144, 132, "row_sum") == RowPlan.coop(16384, 8)  # 256 chunks
    assert RowPlan.for_shape(2, 1048576, 132, "row_sum").kind == "split"  # 128 < 132 programs
    # softmax beyond the resident range: cooperative 4096 chunks (2 warps: S15) with ex2 exps
    # at any row count (rows9 sweep), except few rows of >= 32 chunks short of 2 programs per
    # SM (split)
    coop_fast = RowPlan.coop(4096, 2, fast_exp=True)
    one_warp = RowPlan.coop(2048, 1, fast_exp=True)  # G16: <= 64 chunks, >= 14 programs per SM
    assert RowPlan.for_shape(128, 50257, 132, "softmax") == one_warp  # 25 x 128 programs
    assert RowPlan.for_shape(74, 50257, 132, "softmax") == one_warp  # 1850 >= 14 x 132
    assert RowPlan.for_shape(74, 50257, 132, "softmax", l2_bytes=60 << 20) == one_warp
    small = RowPlan.coop(2048, 2, fast_exp=True)  # inputs below half of L2, fewer programs
    assert RowPlan.for_shape(72, 50257, 132, "softmax", l2_bytes=60 << 20) == small  # 1800
    assert RowPlan.for_shape(72, 50257, 132, "softmax") == coop_fast  # no L2 size
    assert RowPlan.for_shape(1024, 131072, 132, "softmax", l2_bytes=60 << 20) == one_warp
    assert RowPlan.for_shape(1024, 131073, 132, "softmax", l2_bytes=60 << 20) == coop_fast
    assert RowPlan.for_shape(2, 151936, 132, "softmax").kind == "split"  # 76 programs
    assert RowPlan.for_shape(1, 126976, 132, "softmax") == coop_fast  # 31 chunks
    assert RowPlan.for_shape(1, 131072, 132, "softmax").kind == "split"  # 32 chunks
    assert RowPlan.for_shape(32, 151936, 132, "softmax") == coop_fast  # 1216
    for rows, width in ((512, 262144), (132, 151936)):
        assert RowPlan.for_shape(rows, width, 132, "softmax") == coop_fast  # no L2 size given
    for rows, width in ((4096, 131072), (1023, 65537), (1335, 50257)):
        assert RowPlan.for_shape(rows, width, 132, "softmax") == one_warp  # no L2 size given
    # G16: rows wider than 262144 loop at every row count split does not take, inside L2 too
    loop_fast = RowPlan.coop(8192, 2, sub=2048, evict=True, fast_exp=True)
    for rows in (2, 4, 16, 128):
        assert RowPlan.for_shape(rows, 1048576, 132, "softmax", l2_bytes=60 << 20) == loop_fast
    assert RowPlan.for_shape(1, 1048576, 132, "softmax", l2_bytes=60 << 20).kind == "split"
    assert RowPlan.for_shape(16, 1048576, 132, "softmax") == coop_fast  # no L2 size: as before
    # body 32768: rows with an edge past the body go cooperative at any row count (G16), the
    # others keep the persistent resident plan from SM rows
    assert RowPlan.for_shape(192, 32769, 132, "softmax") == one_warp
    assert RowPlan.for_shape(192, 32000, 132, "softmax").programs_per_sm == 1
    # add_rms_norm resident rows load the weight early from 8192-wide bodies, except with an
    # edge past a 32768 body (G16) and at body 16384 in at most SM/4 rows (P19); narrower
    # bodies in at most 4 x SM rows (P19, P21)
    for rows, width, early in ((128, 8193, True), (4096, 5120, True), (512, 16384, True),
                               (128, 32000, True), (128, 32769, False), (4096, 2880, False),
                               (4096, 4096, False), (528, 4096, True), (529, 4096, False),
                               (1, 127, True), (128, 2880, True), (1024, 1024, False),
                               (34, 16384, True), (33, 16384, False), (8, 12288, False),
                               (1, 8192, True)):  # fmt: skip
        assert RowPlan.for_shape(rows, width, 132, "rms").w_early is early, (rows, width)
        assert not RowPlan.for_shape(rows, width, 132, "softmax").w_early
    assert RowPlan.for_shape(1000, 1 << 23, 132, "softmax").kind == "looped"  # 512 chunks
    # unaligned widths (aligned-body path) take fewer warps at bodies 8192 / 16384
    assert RowPlan.for_shape(8193, 8191, 132, "softmax").num_warps == 4
    assert RowPlan.for_shape(8192, 8192, 132, "softmax").num_warps == 8
    assert RowPlan.for_shape(2047, 16385, 132, "rms").num_warps == 8
    assert RowPlan.for_shape(2048, 16384, 132, "rms").num_warps == 16
    for rows, width in ((2, 1048576), (128, 50257), (4096, 131072)):  # no coop rms backward
        assert RowPlan.for_shape(rows, width, 132, "rms_bwd").kind != "coop"
    coop = RowPlan.coop(4096, 4)
    assert coop.coop_chunks(50257, aligned_path=True) == 13  # body <= 50256 elements
    assert coop.coop_chunks(50256, aligned_path=False) == 13
    assert coop.coop_chunks(4096, aligned_path=False) == 1
    assert RowPlan.for_shape(128, 32769, 132).kind == "resident"  # enough rows: stay resident
    assert RowPlan.for_shape(4096, 4097, 132, "softmax").num_warps == 4
    wide = RowPlan.for_shape(4096, 98304, 132, "softmax", l2_bytes=60 << 20)  # 13x L2
    assert (wide.kind, wide.block, wide.num_warps, wide.sub, wide.evict) == (
        "coop",
        8192,
        2,
        2048,
        True,
    )
    assert RowPlan.for_shape(8192, 8192, 132, "rms_bwd").prefetch
    assert not RowPlan.for_shape(2048, 16384, 132, "rms_bwd").prefetch
    # the resident block covers the aligned body, not the next power of two
    assert RowPlan.resident(4097).block == 4096
    assert RowPlan.resident(4097).resident_block(4097, aligned_path=True) == 4096
    assert RowPlan.resident(4097).resident_block(4097, aligned_path=False) == 8192
    with pytest.raises(ValueError, match="narrower"):
        RowPlan("resident", 1024, 4).resident_block(4097, aligned_path=True)
    for bad in (
        dict(kind="diagonal", block=64, num_warps=1),
        dict(kind="looped", block=100, num_warps=1),
        dict(kind="resident", block=64, num_warps=1, rows=3),
        dict(kind="looped", block=64, num_warps=1, rows=2),
        dict(kind="looped", block=64, num_warps=3),
        dict(kind="looped", block=64, num_warps=1, programs_per_sm=-1),
        dict(kind="looped", block=64, num_warps=1, stages=9),
        dict(kind="looped", block=64, num_warps=1, sub=32),  # sub needs a coop plan
        dict(kind="coop", block=64, num_warps=1, sub=128),  # wider than the chunk
        dict(kind="coop", block=64, num_warps=1, sub=24),
    ):
        with pytest.raises(ValueError):
            RowPlan(**bad)


H200_L2 = 60 * 1024 * 1024  # what the H200 reports (results/20261201-153920-plans provenance)


def test_plan_rule_reads_the_l2_size():
    """Beyond the resident range the softmax and add_rms_norm rules ask how the rows compare
    with the device's L2 (softmax: rows9 sweep; add_rms_norm: G8 grid, docs/plans.md)."""
    coop_loop = RowPlan.coop(8192, 2, sub=2048, evict=True, fast_exp=True)
    coop_fast = RowPlan.coop(4096, 2, fast_exp=True)
    coop_small = RowPlan.coop(2048, 2, fast_exp=True)

    def sm(rows, width, op="softmax", elem=2, l2=H200_L2):
        return RowPlan.for_shape(rows, width, 132, op, l2_bytes=l2, elem_bytes=elem)

    one_warp = RowPlan.coop(2048, 1, fast_exp=True)
    # softmax: the register cooperative plan (ex2 exps) whether or not the input fits L2: one
    # warp's 2048-wide chunks for rows of at most 64 of them giving >= 14 programs per SM
    # (G16), else 2048/2 for inputs below half of L2 (S15) and 4096/2 ...
    for rows, width in ((1024, 151936), (512, 262144)):
        assert sm(rows, width) == sm(rows, width, l2=0) == coop_fast
    for rows, width in ((256, 65537), (8192, 50257), (192, 65536), (64, 131072)):
        assert sm(rows, width) == sm(rows, width, l2=0) == one_warp
    for rows, width in ((32, 65536), (16, 262144), (1, 126976)):  # < 30 MiB, few programs
        assert sm(rows, width) == coop_small and sm(rows, width, l2=0) == coop_fast
    assert sm(8, 1048576, l2=0) == coop_fast  # 512 chunks of 2048 are more than 2 x SM
    # ... the looped cooperative plan past 8x L2 (fp32 doubles the bytes) or for rows wider
    # than 262144 (past L2 until G16, now at any row count split does not take); without an
    # L2 size only the width counts (rows >= SM)
    assert sm(1024, 131072) == one_warp and sm(1024, 131072, elem=4) == coop_loop
    assert sm(4096, 131072) == coop_loop and sm(4096, 131072, l2=0) == one_warp
    assert sm(64, 1048576) == coop_loop and sm(64, 1048576, l2=0) == coop_fast
    assert sm(8, 1048576) == sm(16, 1048576) == coop_loop
    assert sm(132, 1048576, l2=0) == coop_loop
    # the persistent resident plan at body 32768: one program per SM from SM rows
    assert sm(4096, 32000) == sm(132, 32000) == RowPlan("resident", 32768, 32, programs_per_sm=1)
    assert sm(99, 32000) == sm(66, 32769) == coop_small  # SM/2 to SM rows (inputs < L2 / 2)
    assert sm(99, 32000, l2=0) == coop_fast
    # add_rms_norm: 0.6-1 rows per SM whose rows fit 3/4 of L2 loop, one program per row
    looped = RowPlan.looped(16384, 32, programs_per_sm=1, evict=True)
    assert sm(128, 65536, "rms") == looped and sm(96, 151936, "rms") == looped
    rms_coop = RowPlan.coop(2048, 1)
    assert sm(128, 65536, "rms", l2=0) == rms_coop
    for rows, width in ((64, 65536), (128, 262144), (132 * 2, 65536)):
        assert sm(rows, width, "rms") == rms_coop
    # row_sum at body 32768: 32 warps at any row count
    assert sm(4096, 32000, "row_sum").num_warps == sm(1, 32000, "row_sum").num_warps == 32


def test_launchers_pass_the_l2_size_and_element_size(monkeypatch):
    """The rule the launchers use gets the device's L2 size (the interpreter's pretend GPU:
    4 SMs, 4 MiB) and the input's element size (recorded below for an FP32 and a BF16 call)."""
    from warpgauge._device import device_info
    from warpgauge.kernels import _launch
    from warpgauge.kernels import softmax as softmax_mod

    cpu = torch.device("cpu")
    info = device_info(cpu)
    assert info.l2_bytes > 0
    bf16 = _launch.row_plan(16, 100000, cpu, None, "softmax", 2)
    fp32 = _launch.row_plan(16, 100000, cpu, None, "softmax", 4)
    assert bf16 == RowPlan.for_shape(16, 100000, info.sm_count, "softmax", info.l2_bytes, 2)
    assert fp32 == RowPlan.for_shape(16, 100000, info.sm_count, "softmax", info.l2_bytes, 4)
    # 13 looped chunks of 8192 are more than 2 x 4 SMs: no cooperative plan fits this device
    assert fp32 == bf16 == RowPlan.looped(16384, 32, programs_per_sm=2, evict=True, lane_stats=True)
    seen = []
    real = softmax_mod.plan_for
    monkeypatch.setattr(softmax_mod, "plan_for", lambda *a: seen.append(a) or real(*a))
    softmax_mod.softmax(torch.randn(3, 50, dtype=torch.float32))
    softmax_mod.softmax(torch.randn(3, 50, dtype=torch.bfloat16))
    assert [a[-1] for a in seen] == [4, 2]


@pytest.mark.parametrize("rows,width", [(6, 300), (3, 5000), (40, 5000)])
def test_plan_candidates(rows, width):
    """candidates() starts with the rule, lists each plan once, and every plan covers the row."""
    cands = RowPlan.candidates(rows, width, 4)
    assert cands[0] == RowPlan.for_shape(rows, width, 4)
    assert len(set(cands)) == len(cands) > 3
    kinds = {p.kind for p in cands}
    assert "resident" in kinds
    assert width <= 4096 or "looped" in kinds
    assert width <= 4096 or rows >= 8 or "split" in kinds  # 8 = 2 rows per SM of 4 SMs
    assert {p.programs_per_sm for p in RowPlan.candidates(rows, width, 4, "rms_bwd")} >= {1, 2}
    for p in cands:
        if p.kind == "resident":
            assert p.resident_block(width, aligned_path=width % 8 != 0) >= width // 8 * 8
        if p.kind == "split":
            assert p.n_chunks(width) * p.chunk(width) >= width


def test_every_candidate_plan_runs(device):
    """Each candidate plan of a small cell gives the reference result (softmax, rms, row_sum)."""
    rows, width = 6, 300
    x = _rand((rows, width), torch.float32, device, scale=3.0, seed=30)
    r = _rand((rows, width), torch.float32, x.device, seed=31)
    w = _rand((width,), torch.float32, x.device, seed=32)
    y_ref, h_ref = add_rms_norm_ref(x, r, w, 1e-6)
    for p in RowPlan.candidates(rows, width, 4):
        assert_close(softmax_k.softmax(x, plan=p), softmax_ref(x), msg=str(p), relative=True)
        y, h = rms_k.add_rms_norm(x, r, w, 1e-6, plan=p)
        assert_close(y, y_ref, msg=str(p))
        assert_close(row_sum_k.row_sum(x, plan=p), row_sum_ref(x), msg=str(p))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width,plan", CASES)
def test_softmax(rows, width, plan, dtype, device):
    x = _rand((rows, width), dtype, device, scale=4.0)
    y = softmax_k.softmax(x, plan=plan)
    assert_close(y, softmax_ref(x), msg="softmax", relative=True)
    dy = _rand((rows, width), dtype, device, seed=1)
    assert_close(softmax_k.softmax_backward(y, dy, plan=plan), softmax_bwd_ref(y, dy), msg="bwd")


@pytest.mark.parametrize("rows,width,plan", CASES)
def test_softmax_masked_rows(rows, width, plan, device):
    """-inf prefixes longer than a chunk (so whole lanes/chunks see only -inf), a row that is all
    -inf (documented result: zeros), and scattered -inf."""
    x = _rand((rows + 2, width), torch.float32, device, scale=3.0)
    x[0, : max(1, (3 * width) // 4)] = float("-inf")
    x[1, :] = float("-inf")
    x[2, ::3] = float("-inf")
    y = softmax_k.softmax(x, plan=plan)
    assert not torch.isnan(y).any()
    assert torch.equal(y[1].cpu(), torch.zeros(width))
    assert_close(y, softmax_ref(x), relative=True)


@pytest.mark.parametrize("rows,width,plan", CASES)
def test_softmax_nan_and_inf_propagate(rows, width, plan, device):
    """A NaN or +inf logit makes its whole row NaN (as torch.softmax does), on every plan; it is
    never hidden behind valid-looking zeros. Other rows are untouched."""
    x = _rand((rows + 2, width), torch.float32, device, seed=20)
    x[0, width // 2] = float("nan")
    x[1, (width - 1) // 3] = float("inf")
    y = softmax_k.softmax(x, plan=plan)
    assert torch.isnan(y[:2]).all()
    assert_close(y[2:], softmax_ref(x[2:]), relative=True)
    assert torch.equal(torch.isnan(softmax_ref(x)), torch.isnan(torch.softmax(x.double(), -1)))


def test_softmax_check_catches_zeroed_small_probabilities(device):
    """The softmax check is relative: zeroing the smallest probabilities must fail it."""
    x = _rand((3, 2000), torch.bfloat16, device, seed=21, scale=3.0)
    y = softmax_k.softmax(x)
    ref = softmax_ref(x)
    assert_close(y, ref, relative=True)
    bad = torch.where(ref.float() < 1e-4, torch.zeros_like(y), y)
    with pytest.raises(AssertionError):
        assert_close(bad, ref, relative=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width,plan", CASES)
def test_add_rms_norm(rows, width, plan, dtype, device):
    x = _rand((rows, width), dtype, device, seed=2)
    r = _rand((rows, width), dtype, device, seed=3)
    w = _rand((width,), dtype, device, seed=4)
    y, h = rms_k.add_rms_norm(x, r, w, 1e-6, plan=plan)
    y_ref, h_ref = add_rms_norm_ref(x, r, w, 1e-6)
    assert_close(h, h_ref, msg="h")
    assert_close(y, y_ref, msg="y")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width,plan", CASES)
def test_row_sum(rows, width, plan, dtype, device):
    x = _rand((rows, width), dtype, device, seed=5)
    assert_close(row_sum_k.row_sum(x, plan=plan), row_sum_ref(x))
    out = row_sum_k.row_sum(x, torch.float32, plan=plan)
    assert out.dtype == torch.float32
    assert_close(out, row_sum_ref(x, torch.float32))


# Cooperative split plans (forward only): one program per chunk of a row, the chunk kept in
# registers, the row's statistics exchanged through zeroed int64 slots. The interpreter runs
# programs one after another, so a row's first programs always time out (spin 0) and compute the
# missing statistics themselves, while its last program finds every slot published: both paths
# run in each case.
COOP_CASES = [
    (3, 1001, RowPlan.coop(128, 1)),  # unaligned rows: aligned body in 8 chunks, edge on chunk 0
    (2, 1000, RowPlan.coop(256, 2)),  # aligned rows (no edge), 4 chunks, the last one ragged
    (4, 77, RowPlan.coop(16, 1)),  # 5 chunks of 16, heads of 0-7 elements
    (2, 64, RowPlan.coop(64, 1)),  # one chunk per row: nothing to wait for
    # sub: chunks walked in slices twice (softmax_coop.py, rmsnorm_coop.py; row_sum ignores it)
    (3, 1001, RowPlan.coop(256, 2, sub=64, stages=2, evict=True)),  # 4 chunks, edge on chunk 0
    (2, 1000, RowPlan.coop(128, 1, sub=32)),  # aligned rows, 8 chunks, the last one ragged
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows,width,plan", COOP_CASES)
def test_coop_forward(rows, width, plan, dtype, device):
    x = _rand((rows + 2, width), dtype, device, scale=4.0, seed=50)
    x[0, : (3 * width) // 4] = float("-inf")  # whole chunks of -inf
    x[1, :] = float("-inf")  # documented result: zeros
    y = softmax_k.softmax(x, plan=plan)
    assert torch.equal(y[1].float().cpu(), torch.zeros(width))
    assert_close(y, softmax_ref(x), msg="softmax", relative=True)
    x[2, width // 2] = float("nan")
    assert torch.isnan(softmax_k.softmax(x, plan=plan)[2]).all()
    x[0, -1] = float("nan")  # a NaN row whose other chunks are all -inf: NaN everywhere too
    assert torch.isnan(softmax_k.softmax(x, plan=plan)[0]).all()
    x = _rand((rows, width), dtype, device, seed=51)
    r = _rand((rows, width), dtype, device, seed=52)
    w = _rand((width,), dtype, device, seed=53)
    y, h = rms_k.add_rms_norm(x, r, w, 1e-6, plan=plan)
    y_ref, h_ref = add_rms_norm_ref(x, r, w, 1e-6)
    assert_close(h, h_ref, msg="h")
    assert_close(y, y_ref, msg="y")
    assert_close(row_sum_k.row_sum(x, plan=plan), row_sum_ref(x), msg="row_sum")
    out = row_sum_k.row_sum(x, torch.float32, plan=plan)
    assert_close(out, row_sum_ref(x, torch.float32), msg="row_sum fp32")


@pytest.mark.parametrize("rows,width,plan", COOP_CASES[:3] + COOP_CASES[4:])
def test_coop_strided_rows(rows, width, plan, device):
    """Rows that are a slice of wider rows: the cooperative kernels' unaligned (scalar) path."""
    base = _rand((rows, width + 11), torch.float16, device, scale=3.0, seed=54)
    x = base[:, 3 : 3 + width]
    r = _rand((rows, width + 5), torch.float16, device, seed=55)[:, 5:]
    w = _rand((width,), torch.float16, device, seed=56)
    assert_close(softmax_k.softmax(x, plan=plan), softmax_ref(x), relative=True)
    y, h = rms_k.add_rms_norm(x, r, w, 1e-6, plan=plan)
    y_ref, h_ref = add_rms_norm_ref(x, r, w, 1e-6)
    assert_close(h, h_ref, msg="h")
    assert_close(y, y_ref, msg="y")
    assert_close(row_sum_k.row_sum(x, plan=plan), row_sum_ref(x))


def test_coop_plan_is_forward_only_for_rms(device):
    """add_rms_norm's backward has no cooperative kernel (softmax's has one:
    tests/test_softmax_bwd_coop.py)."""
    x = _rand((2, 300), torch.float32, device)
    with pytest.raises(ValueError, match="forward"):
        rms_k.add_rms_norm_backward(x, None, x, x[0].contiguous(), 1e-6, plan=RowPlan.coop(64, 1))


@pytest.mark.parametrize("sm", [132, 78, 16])
def test_coop_rule_only_where_a_row_fits_the_gpu(sm):
    """A cooperative row waits for all its programs: the rule keeps rows of more chunks than
    COOP_MAX_CHUNKS_PER_SM * SMs off the coop plan (65 x 2**25 on the H200 ran for minutes)."""
    from warpgauge.kernels import plans

    limit = plans.COOP_MAX_CHUNKS_PER_SM * sm
    seen = set()
    for op in ("softmax", "rms", "row_sum"):
        for rows in (1, sm // 2, sm - 1, 4 * sm, 64 * sm):
            for width in (50257, 139264, 262144, 1048576, 2**22, 2**25):
                p = RowPlan.for_shape(rows, width, sm, op)
                if p.kind == "coop":
                    seen.add((op, width))
                    assert -(-width // p.block) <= limit, (op, rows, width, sm, p)
    if sm == 132:  # the H200's wide rows keep their coop plans
        assert {("softmax", 1048576), ("rms", 1048576), ("row_sum", 1048576)} <= seen
        assert not any(w == 2**25 for _, w in seen)


@pytest.mark.parametrize("dtype", DTYPES)
def test_public_api_nd_strided_empty(dtype, device):
    base = _rand((2, 3, 200), dtype, device, seed=6)
    x = base[..., 7:134]  # strided rows: width 127 inside rows of 200, unaligned start
    r = _rand((2, 3, 127), dtype, device, seed=7)
    w = _rand((127,), dtype, device, seed=8)
    assert_close(wg.softmax(x), softmax_ref(x), relative=True)
    assert_close(wg.row_sum(x), row_sum_ref(x))
    y, h = wg.add_rms_norm(x, r, w)
    y_ref, h_ref = add_rms_norm_ref(x, r, w, 1e-6)
    assert_close(y, y_ref)
    assert_close(h, h_ref)
    assert_close(wg.add(x, r), add_ref(x, r))
    assert wg.softmax(x).shape == x.shape and wg.row_sum(x).shape == x.shape[:-1]
    empty = torch.empty((0, 5, 33), dtype=dtype, device=device)
    assert wg.softmax(empty).shape == (0, 5, 33)
    assert wg.row_sum(empty).shape == (0, 5)
    ye, he = wg.add_rms_norm(empty, empty, torch.ones(33, dtype=dtype, device=device))
    assert ye.shape == he.shape == empty.shape
    assert wg.add(empty, empty).shape == empty.shape
    v = _rand((131,), dtype, device, seed=9)  # 1-D: one row
    assert_close(wg.softmax(v), softmax_ref(v), relative=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 257, 4096 * 3 + 5])
def test_add(n, dtype, device):
    x = _rand((n,), dtype, device, seed=10)
    y = _rand((n,), dtype, device, seed=11)
    assert_close(wg.add(x, y), add_ref(x, y))


def test_poisoning_is_active(device):
    """The harness that makes unwritten outputs fail must itself be on."""
    from warpgauge.kernels._launch import empty

    t = empty((4,), torch.float16, device)
    assert torch.isnan(t).all()
    with pytest.raises(AssertionError):
        assert_close(t, torch.ones(4, dtype=torch.float16))


def test_rms_backward_deterministic(device):
    rows, width = 37, 300
    dy = _rand((rows, width), torch.float32, device, seed=12)
    h = _rand((rows, width), torch.float32, device, seed=13)
    w = _rand((width,), torch.float32, device, seed=14)
    a = rms_k.add_rms_norm_backward(dy, None, h, w, 1e-6)
    b = rms_k.add_rms_norm_backward(dy, None, h, w, 1e-6)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def _rms_bwd_ref(dy, dh, h, w, eps):
    """FP64 autograd through y = h * rsqrt(mean(h^2) + eps) * w; dx includes dh."""
    h64 = h.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    y = h64 * torch.rsqrt(h64.square().mean(-1, keepdim=True) + eps) * w64
    y.backward(dy.double())
    dx = h64.grad + (dh.double() if dh is not None else 0.0)
    return dx.to(h.dtype), w64.grad.to(w.dtype)


# Backward plans: the CASES without the two widest (test_autograd covers those through autograd),
# plus row groups: one group per SM (4 groups for 37 rows) and 2 rows per step.
BWD_CASES = [c for c in CASES if c[1] < RESIDENT_MAX] + [
    (37, 300, RowPlan("resident", 512, 4, programs_per_sm=1)),
    (37, 301, RowPlan("resident", 512, 4, rows=2, programs_per_sm=2)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width,plan", BWD_CASES)
def test_add_rms_norm_backward(rows, width, plan, dtype, device):
    width = max(width, 3)  # width 1: dx is pure cancellation noise, nothing to compare
    h = _rand((rows, width), dtype, device, seed=40)
    dy = _rand((rows, width), dtype, device, seed=41)
    dh = _rand((rows, width), dtype, device, seed=42)
    w = _rand((width,), dtype, device, seed=43)
    for d in (None, dh):
        dx, dw = rms_k.add_rms_norm_backward(dy, d, h, w, 1e-6, plan=plan)
        dx_ref, dw_ref = _rms_bwd_ref(dy, d, h, w, 1e-6)
        assert_close(dx, dx_ref, msg="dx")
        assert_close(dw, dw_ref, msg="dw")
    dx2, dw2 = rms_k.add_rms_norm_backward(dy, None, h, w, 1e-6, need_dw=False, plan=plan)
    assert dw2 is None
    assert_close(dx2, _rms_bwd_ref(dy, None, h, w, 1e-6)[0], msg="dx without dw")


@pytest.mark.parametrize("rows,width,plan", CASES[:10])
def test_strided_rows(rows, width, plan, device):
    """Rows that are a slice of wider rows (stride != width, unaligned start): every plan."""
    dtype = torch.float16
    base = _rand((rows, width + 11), dtype, device, scale=3.0, seed=44)
    x = base[:, 3 : 3 + width]
    rbase = _rand((rows, width + 5), dtype, device, seed=45)
    r = rbase[:, 5:]
    w = _rand((width,), dtype, device, seed=46)
    assert_close(softmax_k.softmax(x, plan=plan), softmax_ref(x), relative=True)
    y, h = rms_k.add_rms_norm(x, r, w, 1e-6, plan=plan)
    y_ref, h_ref = add_rms_norm_ref(x, r, w, 1e-6)
    assert_close(h, h_ref, msg="h")
    assert_close(y, y_ref, msg="y")
    assert_close(row_sum_k.row_sum(x, plan=plan), row_sum_ref(x))


@pytest.mark.parametrize("rows", [6, 300])  # one launch (tiny: dx and dw programs); several groups
def test_frozen_weight_skips_dw(rows, device, monkeypatch):
    """weight.requires_grad=False: autograd launches no dw work (no partials, no finish)."""
    from warpgauge.kernels import rmsnorm_backward as bwd_k

    launched = []
    real = bwd_k.launch

    def spy(kernel, grid, *args, **meta):
        launched.append((getattr(kernel, "__name__", str(kernel)), meta.get("HAS_DW")))
        return real(kernel, grid, *args, **meta)

    monkeypatch.setattr(bwd_k, "launch", spy)
    x = _rand((rows, 64), torch.float32, device, seed=47).requires_grad_()
    r = _rand((rows, 64), torch.float32, device, seed=48).requires_grad_()
    for frozen in (True, False):
        w = _rand((64,), torch.float32, device, seed=49).requires_grad_(not frozen)
        launched.clear()
        y, h = wg.add_rms_norm(x, r, w)
        (y.sum() + h.sum()).backward()
        fused = not frozen and bwd_k.fused_tiny(rows, 64, bwd_k.bwd_plan(rows, 64, x.device),
                                                None, True)  # fmt: skip
        assert launched[0] == (("_rms_bwd_tiny", None) if fused else
                               ("_rms_bwd_resident", not frozen))  # fmt: skip
        assert len(launched) == bwd_k.backward_kernels(rows, 64, x.device, need_dw=not frozen)
        assert (("_rms_dw_finish", None) in launched) is (not frozen and rows == 300)
        assert (w.grad is None) is frozen
