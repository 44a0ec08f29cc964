"""The batch-1 FMA GEMV's split-K reduced inside the kernel (``Int4Plan(block_m=1, pipeline=S,
fused=True)``, ``kernels/int4_gemv.py``): the last split of each output block adds the FP32
partials in the fixed order 0 .. split_k - 1, as ``_splitk_reduce_kernel`` does. On the Triton
interpreter (TRITON_INTERPRET=1) or a GPU: FP64 references, NaN-poisoned outputs and scratch,
odd N (a wrapped last block), group counts that neither the step nor the split divides (empty
splits), several x rows, strided x; the same bits as the unfused plan, call after call."""

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
kernels = pytest.mark.skipif(
    not (interpreter_enabled() or torch.cuda.is_available()),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=DEV)


@pytest.fixture
def poison(monkeypatch):
    """Every output and split-K scratch buffer the launchers allocate starts as NaN."""

    def nan_alloc(shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(int4_mod, "_alloc", nan_alloc)


FUSED = [
    Int4Plan(block_m=1, block_n=16, groups_per_iter=1, split_k=2, num_warps=1, pipeline=3,
             fused=True),
    Int4Plan(block_m=1, block_n=32, groups_per_iter=2, split_k=3, num_warps=2, pipeline=2,
             fused=True),
    Int4Plan(block_m=1, block_n=16, groups_per_iter=4, split_k=4, num_warps=2, pipeline=3,
             fused=True),
]  # fmt: skip


@kernels
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fold", [False, True], ids=["exact", "fold"])
@pytest.mark.parametrize(
    "plan", FUSED, ids=lambda p: f"n{p.block_n}-g{p.groups_per_iter}-s{p.split_k}"
)
def test_int4_fused_fma_gemv(plan, fold, dtype, poison, monkeypatch):
    # N = 37 (a wrapped last block), 7 groups of 64 (split 3 of 2-group steps: 2 + 2 + 0 steps,
    # an empty split; split 4 of 4-group steps: 1 + 1 + 0 + 0), M = 1 and 3 (one program row per
    # x row, each with its own counters), strided x.
    monkeypatch.setattr(int4_mod, "FMA_FOLD", fold)
    group, N = 64, 37
    for M in (1, 3):
        qw = quantize_int4(rand(N, 7 * group, dtype=dtype, seed=M), group)
        x = rand(M, 7 * group, dtype=dtype, seed=M + 10)
        w = qw.dequantize(torch.float32)
        y = int4_linear(x, qw, plan=plan)
        assert_close(y, int4_linear_ref(x, w), msg=f"M={M} {plan}")
        plain = dataclasses.replace(plan, fused=False)
        assert torch.equal(y, int4_linear(x, qw, plan=plain)), f"M={M} {plan}"
        assert torch.equal(y, int4_linear(x, qw, plan=plan)), f"M={M} {plan} second call"
    xs = rand(1, 14 * group, dtype=dtype, seed=7)[:, ::2]  # stride_xk = 2
    assert_close(int4_linear(xs, qw, plan=plan), int4_linear_ref(xs, w), msg=f"strided {plan}")
    # the reducing programs reset their counters: the cached buffer is all zeros again
    assert int(int4_tile._counters(x.device, 8).abs().sum()) == 0


@kernels
def test_int4_fused_fma_gemv_group_128_bf16(poison):
    # the production group size and the 32 x 4-group step of the batch-1 rule; N = 70, 10 groups
    # (split 4 of 4-group steps: 1 + 1 + 1 + 0 steps), split 8 (one step or none per split)
    qw = quantize_int4(rand(70, 1280, dtype=torch.bfloat16, seed=3), 128)
    x = rand(1, 1280, dtype=torch.bfloat16, seed=4)
    ref = int4_linear_ref(x, qw.dequantize(torch.float32))
    for sp in (4, 8):
        plan = Int4Plan(block_m=1, block_n=32, groups_per_iter=4, split_k=sp, num_warps=2,
                        pipeline=3, fused=True)  # fmt: skip
        y = int4_linear(x, qw, plan=plan)
        assert_close(y, ref, msg=f"{plan}")
        assert torch.equal(y, int4_linear(x, qw, plan=dataclasses.replace(plan, fused=False)))


def test_int4_fused_plan_validation():
    # fused=True is a tile-kernel or pipelined-FMA-GEMV field
    Int4Plan(block_m=1, block_n=16, pipeline=3, split_k=2, fused=True)
    with pytest.raises(ValueError, match="fused=True"):
        Int4Plan(block_m=1, block_n=16, split_k=2, fused=True)  # the old loop (pipeline 0)
    with pytest.raises(ValueError, match="fused=True"):
        Int4Plan(block_m=16, block_n=16, pipeline=3, split_k=2, fused=True)


def test_plan_rule_fused_flag(monkeypatch):
    # FMA_PIPE_FUSED marks the batch-1 rule's split plans fused (unsplit plans stay unfused);
    # FMA_PIPE_MIN_STEPS = 1 lets a split hold one 4-group step
    monkeypatch.setattr(int4_mod, "FMA_PIPE_FUSED", True)
    p = Int4Plan.for_shape(1, 4096, 4096, 132)
    assert (p.split_k, p.fused) == (4, True)
    p = Int4Plan.for_shape(1, 28672, 8192, 132)
    assert (p.split_k, p.fused) == (1, False)
    monkeypatch.setattr(int4_mod, "FMA_PIPE_MIN_STEPS", 1)
    assert Int4Plan.for_shape(1, 1024, 2048, 132).split_k == 4  # 4 groups per split, one step


@kernels
@pytest.mark.parametrize("group", [64, 96, 128])  # 96: 12 words per group, padded to 16 lanes
@pytest.mark.parametrize(
    "plan",
    [
        Int4Plan(block_m=1, block_n=32, groups_per_iter=2, split_k=3, num_warps=2, pipeline=3,
                 fused=True),
        Int4Plan(block_m=1, block_n=16, groups_per_iter=4, split_k=1, num_warps=4, pipeline=3),
    ],
    ids=["g2-s3-fused", "g4-s1-w4"],
)  # fmt: skip
def test_int4_fma_gemv_x_per_nibble(plan, group, poison, monkeypatch):
    # FMA_XR: x read per nibble position (``int4_gemv._fma_step_xr``), prefetched one step
    # ahead: FP64 reference on N = 37 and 7 groups (a partial last step and an empty split),
    # M = 1 and 3, BF16; a strided x falls back to the shared-memory form (same result)
    monkeypatch.setattr(int4_mod, "FMA_XR", True)
    N, K = 37, 7 * group
    for M in (1, 3):
        qw = quantize_int4(rand(N, K, dtype=torch.bfloat16, seed=M + group), group)
        x = rand(M, K, dtype=torch.bfloat16, seed=M + 20)
        w = qw.dequantize(torch.float32)
        assert_close(int4_linear(x, qw, plan=plan), int4_linear_ref(x, w), msg=f"M={M} {plan}")
    xs = torch.stack([x, x], -1).reshape(M, 2 * K)[:, ::2]  # the same values, stride_xk = 2
    assert_close(int4_linear(xs, qw, plan=plan), int4_linear_ref(x, w), msg=f"strided {plan}")
