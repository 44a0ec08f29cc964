"""The tile kernel of ``kernels/int4_tile.py`` (``Int4Plan(kernel="tile")``, batch >= 2) on small
shapes: the Triton interpreter on the CPU (TRITON_INTERPRET=1, FP16: its BF16 dot is wrong) or a
GPU. FP64 references, NaN-poisoned outputs and scratch, odd N (a wrapped last tile), group counts
that the split does not divide (an empty split), strided x, both reduction forms."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from warpgauge._device import interpreter_enabled
from warpgauge.kernels import int4 as int4_mod
from warpgauge.kernels import int4_tile
from warpgauge.kernels.int4 import Int4Plan, int4_linear
from warpgauge.quant import quantize_int4
from warpgauge.reference import assert_close, int4_linear_ref

DEV = "cpu" if interpreter_enabled() else "cuda"
DT = torch.float16 if interpreter_enabled() else torch.bfloat16
kernels = pytest.mark.skipif(
    not (interpreter_enabled() or torch.cuda.is_available()),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=DEV)


def _case(M, N, K, group, seed=0):
    qw = quantize_int4(rand(N, K, dtype=DT, seed=seed), group)
    return rand(M, K, dtype=DT, seed=seed + 1), qw


@pytest.fixture
def poison(monkeypatch):
    """Every output and split-K scratch buffer the launchers allocate starts as NaN."""

    def nan_alloc(shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(int4_mod, "_alloc", nan_alloc)


TILE = dict(kernel="tile", num_stages=2)
PLANS = [
    # block_m 16: the GEMV form (x split into halves in registers, the weight as the dot's B)
    Int4Plan(block_m=16, block_n=16, split_k=1, num_warps=1, **TILE),
    Int4Plan(block_m=16, block_n=32, split_k=3, num_warps=2, fused=True, **TILE),
    Int4Plan(block_m=16, block_n=16, split_k=2, num_warps=1, mode=1, **TILE),
    # block_m > 16: the large-batch form (x permuted once, the weight as the dot's A)
    Int4Plan(block_m=32, block_n=16, split_k=1, num_warps=2, **TILE),
    Int4Plan(block_m=32, block_n=32, split_k=3, num_warps=2, fused=True, **TILE),
    Int4Plan(block_m=32, block_n=16, split_k=2, num_warps=2, mode=1, **TILE),
    Int4Plan(block_m=32, block_n=16, split_k=3, num_warps=2, mode=1, fused=True, **TILE),
]


def _id(p):
    return f"m{p.block_m}n{p.block_n}s{p.split_k}mode{p.mode}{'f' if p.fused else ''}"


@kernels
@pytest.mark.parametrize("plan", PLANS, ids=_id)
def test_int4_tile_exact(plan, poison):
    # Modes 0 and 1 multiply the exact weight: FP64 reference of the exact dequantized weight.
    # N = 37 (a wrapped last tile), 5 groups of 64 (split 3: 2 + 2 + 1), M = 3 (one tile) and
    # 35 (two tiles of 32, the second wrapped), strided x (stride_xk = 2).
    group, N = 64, 37
    for M in (3, 35):
        x, qw = _case(M, N, 5 * group, group, seed=M)
        w = qw.dequantize(torch.float32)
        assert_close(int4_linear(x, qw, plan=plan), int4_linear_ref(x, w), msg=f"M={M} {plan}")
    xs = _case(4, N, 10 * group, group, seed=9)[0][:, ::2]
    y = int4_linear(xs, qw, plan=plan)
    assert_close(y, int4_linear_ref(xs, w), msg=f"strided {plan}")


@kernels
def test_int4_tile_fused_matches_reduce_kernel(poison):
    # The in-kernel reduction adds the same partials in the same order as the reduction kernel:
    # the same bits; a second call (counters reset by the reducing programs) gives them again.
    x, qw = _case(20, 50, 7 * 32, 32, seed=5)
    fused = Int4Plan(block_m=16, block_n=16, split_k=4, num_warps=1, fused=True, **TILE)
    plain = dataclasses.replace(fused, fused=False)
    y1 = int4_linear(x, qw, plan=fused)
    assert torch.equal(y1, int4_linear(x, qw, plan=plain))
    assert torch.equal(y1, int4_linear(x, qw, plan=fused))
    assert int(int4_tile._counters(x.device, 8).abs().sum()) == 0


@kernels
def test_int4_tile_rounded_weight(poison):
    # Mode 2 multiplies the weight rounded once to x's dtype (dense F.linear's numerics): its
    # reference is that rounded weight in FP64; the exact reference is not what it computes.
    x, qw = _case(33, 21, 3 * 128, 128, seed=7)
    plan = Int4Plan(block_m=32, block_n=16, split_k=1, num_warps=2, mode=2, **TILE)
    w_r = qw.dequantize(DT)
    assert_close(int4_linear(x, qw, plan=plan), int4_linear_ref(x, w_r), msg=f"{plan}")


def test_int4_tile_x_permutation():
    x = torch.arange(2 * 128, dtype=torch.float32).view(2, 128)
    xp = int4_tile.permute_x(x, 64)
    assert xp.is_contiguous()
    assert torch.equal(xp[0, :32], x[0, 0:64:2]) and torch.equal(xp[0, 32:64], x[0, 1:64:2])
    assert torch.equal(xp[1, 64:96], x[1, 64:128:2])
    assert torch.equal(int4_tile.permute_x(x[:, ::1].t().contiguous().t(), 64), xp)


@pytest.mark.parametrize("group", [32, 48, 128])
def test_int4_tile_x_permutation_any_shape_and_strides(group):
    """The Triton permutation against the reshape it replaces: random values, a row count that no
    block divides, K past one block, a column-major and a row-sliced x; the output poisoned
    first (every element must be written), contiguous."""
    g = torch.Generator().manual_seed(group)
    K = group * 23
    base = torch.randn(13, K + 5, generator=g)

    def ref(x):
        return x.unflatten(1, (K // group, group // 2, 2)).transpose(2, 3).reshape(x.shape[0], K)

    for x in (base[:, :K], base[:, :K].t().contiguous().t(), base[1::2, :K]):
        got = int4_tile.permute_x(x, group)
        assert got.is_contiguous() and got.shape == x.shape
        assert torch.equal(got, ref(x)), (group, x.stride())
    assert int4_tile.permute_x(base[:0, :K], group).shape == (0, K)


def test_int4_tile_plan_validation():
    with pytest.raises(ValueError, match="kernel must be"):
        Int4Plan(block_m=16, block_n=16, kernel="x")
    with pytest.raises(ValueError, match="block_m >= 16"):
        Int4Plan(block_m=1, block_n=16, kernel="tile")
    with pytest.raises(ValueError, match="mode must be"):
        Int4Plan(block_m=16, block_n=16, mode=1)
    with pytest.raises(ValueError, match="tma=True"):
        Int4Plan(block_m=16, block_n=16, kernel="tile", tma=True)
    with pytest.raises(ValueError, match="fused=True"):
        Int4Plan(block_m=16, block_n=16, fused=True)


@kernels
def test_int4_tile_group_size_error():
    x, qw = _case(2, 16, 96, 48, seed=1)
    with pytest.raises(ValueError, match="power-of-two group_size"):
        int4_linear(x, qw, plan=Int4Plan(block_m=16, block_n=16, **TILE))


@kernels
@pytest.mark.parametrize("split", [1, 3])
def test_int4_tile_tma(split, poison):
    # x and the packed weight through TMA descriptors (rows past M and N read as zeros): N = 40
    # (a partial last tile of 32 rows), M = 35 (a partial second tile), 5 groups of 64.
    plan = Int4Plan(
        block_m=32, block_n=32, split_k=split, num_warps=2, fused=True, tma=True, **TILE
    )
    x, qw = _case(35, 40, 5 * 64, 64, seed=11)
    w = qw.dequantize(torch.float32)
    assert_close(int4_linear(x, qw, plan=plan), int4_linear_ref(x, w), msg=f"{plan}")


def _fields(p):
    return (p.kernel, p.block_m, p.block_n, p.split_k, p.num_warps, p.fused, p.tma)


@pytest.mark.parametrize(
    "M,N,K,want",
    [
        # batch 2-16 below 2^25 weights: the GEMV form, the mm rule's tile and split, the
        # reduction kernel (results/int4s10-h200/round2: faster than fused with a clean flush)
        (2, 4096, 4096, ("tile", 16, 128, 8, 4, False, False)),
        (16, 4096, 4096, ("tile", 16, 128, 8, 4, False, False)),
        (4, 8192, 8192, ("mm", 16, 256, 8, 4, False, False)),  # larger: the mm kernel
        (16, 14336, 4096, ("mm", 16, 256, 4, 4, False, False)),
        # batch 17-64 on weights >= 2^25: 32 / 64-row tiles, 2 / 3 programs per SM, TMA, the
        # reduction kernel (results/int4b11-h200: faster than fused in all 32 pairs)
        (32, 4096, 4096, ("mm", 32, 128, 4, 4, False, False)),  # small weight: the mm rule
        (32, 14336, 4096, ("tile", 32, 64, 2, 4, False, True)),
        (17, 8192, 8192, ("tile", 32, 64, 4, 4, False, True)),
        (64, 4096, 14336, ("tile", 64, 64, 8, 4, False, True)),
        (33, 14336, 4096, ("tile", 64, 64, 2, 4, False, True)),
        (64, 8192, 8192, ("tile", 64, 64, 4, 4, False, True)),
        # batch 65-256: 128 x 64 tiles without a split when they make >= 3 per SM
        (256, 14336, 4096, ("tile", 128, 64, 1, 4, True, True)),  # 448 tiles
        (65, 28672, 8192, ("tile", 128, 64, 1, 4, True, True)),
        (256, 128256, 4096, ("tile", 128, 64, 1, 4, True, True)),
        (128, 14336, 4096, ("mm", 128, 64, 1, 4, False, False)),  # 224 tiles < 396
        (256, 8192, 8192, ("mm", 128, 64, 1, 4, False, False)),
        (257, 28672, 8192, ("mm", 128, 128, 1, 8, False, False)),  # above 256: not measured
    ],
)
def test_plan_rule_tile_kernel_h200(M, N, K, want):
    # the plans results/int4big-h200/int4big.json measured (the variant named in the comments
    # of kernels/int4_tile.py), on 132 SMs
    assert _fields(Int4Plan.for_shape(M, N, K, 132)) == want


def test_plan_rule_tile_kernel_from_sm_count_and_group_size():
    # the thresholds scale with the device: 224 tiles are >= 3 per SM on 66 SMs
    assert Int4Plan.for_shape(128, 14336, 4096, 66).kernel == "tile"
    assert Int4Plan.for_shape(128, 14336, 4096, 132).kernel == "mm"
    # fewer programs per SM wanted on a smaller device: the split follows
    assert Int4Plan.for_shape(64, 4096, 14336, 66).split_k == 4
    # group sizes the tile kernel cannot run (not a power of two >= 32) keep the mm kernel
    for g in (16, 48):
        assert Int4Plan.for_shape(64, 8192, 8192 // g * g, 132, group_size=g).kernel == "mm"
    # every batch of a bucket shares the plan (a new batch size compiles nothing)
    for lo, hi in ((2, 16), (17, 32), (33, 64), (65, 128), (129, 256)):
        plans = {Int4Plan.for_shape(m, 28672, 8192, 132) for m in (lo, (lo + hi) // 2, hi)}
        assert len(plans) == 1, (lo, hi, plans)


@kernels
def test_int4_tile_default_plans_small(poison, monkeypatch):
    # the default rule's tile-kernel forms on a small weight and a 1-SM device: the GEMV form
    # (a small weight), 32-row and 128 x 64 tiles (every weight counted as large); FP64
    # reference, N = 200 (partial last tiles)
    x, qw = _case(70, 200, 512, 64, seed=21)
    w = qw.dequantize(torch.float32)
    for M, bm in ((3, 16), (20, 32), (70, 128)):
        monkeypatch.setattr(int4_tile, "SMALL_WEIGHT", 1 << 25 if M <= 16 else 0)
        p = Int4Plan.for_shape(M, 200, 512, 1, group_size=64)
        assert (p.kernel, p.block_m, p.tma or bm == 16) == ("tile", bm, True), p
        y = int4_linear(x[:M], qw, plan=p)
        assert_close(y, int4_linear_ref(x[:M], w), msg=f"M={M} {p}")
