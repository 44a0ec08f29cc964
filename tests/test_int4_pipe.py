"""The pipelined GEMV loops of ``kernels/int4_gemv.py`` (``Int4Plan(pipeline=S)``, batch 1 on
CUDA cores and the tensor-core GEMV with several groups per step), on small shapes: the Triton
interpreter on the CPU (TRITON_INTERPRET=1) or a GPU. FP64 references, NaN-poisoned outputs,
odd N, group counts that no step or split divides, strided x."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from warpgauge._device import interpreter_enabled
from warpgauge.kernels import int4 as int4_mod
from warpgauge.kernels.int4 import Int4Plan, int4_linear
from warpgauge.quant import quantize_int4
from warpgauge.reference import assert_close, int4_linear_ref

DEV = "cpu" if interpreter_enabled() else "cuda"
DTYPES = [torch.float16, torch.bfloat16]
kernels = pytest.mark.skipif(
    not (interpreter_enabled() or torch.cuda.is_available()),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=DEV)


def _case(M, N, K, group, dtype, seed=0):
    qw = quantize_int4(rand(N, K, dtype=dtype, seed=seed), group)
    return rand(M, K, dtype=dtype, seed=seed + 1), qw, qw.dequantize(torch.float32)


@pytest.fixture
def poison(monkeypatch):
    """Every output and split-K scratch buffer the launchers allocate starts as NaN."""

    def nan_alloc(shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(int4_mod, "_alloc", nan_alloc)


PIPELINED = [
    Int4Plan(block_m=1, block_n=16, groups_per_iter=1, split_k=1, num_warps=1, pipeline=3),
    Int4Plan(block_m=1, block_n=32, groups_per_iter=2, split_k=2, num_warps=2, pipeline=2),
    Int4Plan(block_m=1, block_n=16, groups_per_iter=4, split_k=3, num_warps=2, pipeline=4),
]


@kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group", [64, 96])  # 96: 12 words per group, padded to 16 lanes
@pytest.mark.parametrize(
    "plan", PIPELINED, ids=lambda p: f"s{p.split_k}-g{p.groups_per_iter}-st{p.pipeline}"
)
@pytest.mark.parametrize("fold", [False, True], ids=["exact", "fold"])
def test_int4_pipelined_fma_gemv(plan, group, dtype, fold, poison, monkeypatch):
    # The FMA GEMV with Triton's pipelined loop (int4_gemv.py): odd N (a wrapped last tile),
    # 5 groups (not a multiple of the 2- and 4-group steps; split 3 leaves a split empty),
    # M = 1 and M = 3 (one program per row), contiguous and strided x; FMA_FOLD: the
    # folded decode (``_fma_step_fold``), whose correction a wrong constant or nibble fails.
    monkeypatch.setattr(int4_mod, "FMA_FOLD", fold)
    N, K = 21, 5 * group
    for M in (1, 3):
        x, qw, w_exact = _case(M, N, K, group, dtype, seed=M + group)
        y = int4_linear(x, qw, plan=plan)
        assert_close(y, int4_linear_ref(x, w_exact), msg=f"M={M} {plan}")
        # the same steps in the same order as the register double-buffered loop: the same bits
        base = dataclasses.replace(plan, pipeline=0)
        if interpreter_enabled() and not fold:
            assert torch.equal(y, int4_linear(x, qw, plan=base)), f"M={M} {plan}"
    xs = _case(2, N, 2 * K, group, dtype, seed=3)[0][:1, ::2]  # stride_xk = 2
    assert_close(int4_linear(xs, qw, plan=plan), int4_linear_ref(xs, w_exact), msg=f"{plan}")


DOT_PIPELINED = [
    Int4Plan(block_m=16, block_n=16, groups_per_iter=2, split_k=1, num_warps=1, pipeline=3),
    Int4Plan(block_m=16, block_n=32, groups_per_iter=4, split_k=2, num_warps=2, pipeline=2),
    Int4Plan(block_m=16, block_n=16, groups_per_iter=1, split_k=3, num_warps=4, pipeline=4),
]


@kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "plan", DOT_PIPELINED, ids=lambda p: f"s{p.split_k}-g{p.groups_per_iter}-st{p.pipeline}"
)
@pytest.mark.parametrize("fold", [False, True], ids=["sub", "fold"])
def test_int4_pipelined_dot_gemv(plan, fold, dtype, poison, monkeypatch):
    # The tensor-core GEMV with several groups per pipelined step (int4_gemv.py): odd N, 5 groups
    # (2 and 4 do not divide it; split 3 leaves a split empty), M = 1 (x broadcast), 3, 17 (two
    # 16-row tiles), group 64 and 96 (48 bytes per half, padded lanes), strided x; FOLD_OFFSET:
    # the decode without its subtract, each group corrected by offset * sum(x).
    monkeypatch.setattr(int4_mod, "FOLD_OFFSET", fold)
    for M, group in ((1, 64), (3, 96), (17, 64), (1, 96)):
        x, qw, w_exact = _case(M, 21, 5 * group, group, dtype, seed=M + group)
        y = int4_linear(x, qw, plan=plan)
        assert_close(y, int4_linear_ref(x, w_exact), msg=f"M={M} group={group} {plan}")
    xs = _case(2, 21, 10 * group, group, dtype, seed=4)[0][:, ::2]  # stride_xk = 2, two rows
    assert_close(int4_linear(xs, qw, plan=plan), int4_linear_ref(xs, w_exact), msg=f"{plan}")


def test_int4_pipeline_plan_validation():
    with pytest.raises(ValueError, match="pipeline must be 0"):
        Int4Plan(block_m=1, block_n=16, pipeline=1)
    with pytest.raises(ValueError, match="pipeline must be 0"):
        Int4Plan(block_m=1, block_n=16, pipeline=9)
    with pytest.raises(ValueError, match="a GEMV loop"):
        Int4Plan(block_m=32, block_n=16, pipeline=3)


@kernels
@pytest.mark.parametrize(
    "plan",
    [
        Int4Plan(block_m=1, block_n=64, groups_per_iter=1, split_k=2, num_warps=2, pipeline=3),
        Int4Plan(block_m=1, block_n=16, groups_per_iter=8, split_k=1, num_warps=2, pipeline=3),
        Int4Plan(block_m=16, block_n=64, groups_per_iter=4, split_k=2, num_warps=4, pipeline=3),
        Int4Plan(block_m=16, block_n=32, groups_per_iter=8, split_k=1, num_warps=2, pipeline=3),
    ],
    ids=["fma-64x1-s2", "fma-16x8", "dot-64x4-s2", "dot-32x8"],
)
def test_int4_pipelined_sweep_plans_group_128(plan, poison):
    # The sweep's plan shapes with the production group size: N = 70 (a wrapped last tile of 64
    # rows), 10 groups (8 and 4 per step leave a partial last step), BF16.
    x, qw, w_exact = _case(1, 70, 1280, 128, torch.bfloat16, seed=21)
    assert_close(int4_linear(x, qw, plan=plan), int4_linear_ref(x, w_exact), msg=f"{plan}")


@kernels
@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_folded_fma_gemv_rounding_long_k(dtype, poison, monkeypatch):
    # The folded decode sums x * 2**11 beside q * x and cancels it later: over a long K with an
    # x of large mean (the constant part dominates every partial sum) the result must still be
    # within the two-ulp tolerance of the FP64 reference, and match the exact decode closely.
    monkeypatch.setattr(int4_mod, "FMA_FOLD", True)
    plan = Int4Plan(block_m=1, block_n=16, groups_per_iter=4, split_k=1, num_warps=2, pipeline=3)
    N, K = 16, 4096
    qw = quantize_int4(rand(N, K, dtype=dtype, seed=5), 128)
    x = (rand(1, K, seed=6) + 4.0).to(dtype)  # mean 4: q * x small against x * 2**11
    w_exact = qw.dequantize(torch.float32)
    y = int4_linear(x, qw, plan=plan)
    assert_close(y, int4_linear_ref(x, w_exact), msg="folded")
    monkeypatch.setattr(int4_mod, "FMA_FOLD", False)
    y0 = int4_linear(x, qw, plan=plan)
    scale = int4_linear_ref(x, w_exact).double().abs().max()
    assert (y.double() - y0.double()).abs().max() <= 4e-3 * scale
