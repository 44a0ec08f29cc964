"""INT4 quantization (warpgauge.quant) and the INT4 linear kernels, on small shapes: runs on the
CPU through the Triton interpreter (TRITON_INTERPRET=1, 4 pretend SMs) or on a GPU. Each kernel
test names the path it reaches. Full sizes: tests/gpu/test_gemm_int4_gpu.py.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from warpgauge._device import INTERPRETER_SM_COUNT, interpreter_enabled
from warpgauge.kernels import int4 as int4_mod
from warpgauge.kernels.int4 import (
    Int4Plan,
    int4_linear,
    int4_linear_grad_input,
    int4_linear_packed,
    work,
)
from warpgauge.quant import Int4Weight, pack_int4, quantize_int4, unpack_int4
from warpgauge.reference import assert_close, int4_linear_ref

from .launch_spy import spy_launches

DEV = "cpu" if interpreter_enabled() else "cuda"
DTYPES = [torch.float16, torch.bfloat16]
kernels = pytest.mark.skipif(
    not (interpreter_enabled() or torch.cuda.is_available()),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)


def rand(*shape, dtype=torch.float32, seed=0, device=DEV):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=device)


def grad_ref(g, w_exact):
    return (g.double() @ w_exact.double()).to(g.dtype)


# =============================================================================================
# quant.py (plain PyTorch, runs anywhere)


def test_pack_unpack_all_16_values_exact():
    vals = torch.arange(-8, 8, dtype=torch.int8)
    q = torch.stack(torch.meshgrid(vals, vals, indexing="ij"), -1).reshape(1, -1)  # every pair
    packed = pack_int4(q)
    assert packed.dtype == torch.uint8 and packed.shape == (1, 256)
    assert torch.equal(unpack_int4(packed), q)
    assert sorted(set(packed.flatten().tolist())) == list(range(256))  # a bijection on bytes


def test_nibble_order_against_hand_built_byte():
    # even k -> low nibble, odd k -> high nibble, two's complement: 3 = 0x3, -2 = 0xE, -8 = 0x8
    q = torch.tensor([[3, -2, -8, 7, 0, -1]], dtype=torch.int8)
    assert pack_int4(q).tolist() == [[0xE3, 0x78, 0xF0]]
    assert unpack_int4(torch.tensor([[0xE3, 0x78, 0xF0]], dtype=torch.uint8)).tolist() == q.tolist()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(-8, 7), min_size=2, max_size=64).filter(lambda v: len(v) % 2 == 0))
def test_pack_unpack_roundtrip_property(values):
    q = torch.tensor(values, dtype=torch.int8)
    assert torch.equal(unpack_int4(pack_int4(q)), q)


@pytest.mark.parametrize("bad", [8, -9, 100])
def test_pack_rejects_out_of_range(bad):
    q = torch.zeros(1, 4, dtype=torch.int8)
    q[0, 1] = bad
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        pack_int4(q)


def test_pack_unpack_errors():
    with pytest.raises(TypeError, match="integer"):
        pack_int4(torch.zeros(1, 4))
    with pytest.raises(ValueError, match="even last dimension"):
        pack_int4(torch.zeros(1, 3, dtype=torch.int8))
    with pytest.raises(TypeError, match="uint8"):
        unpack_int4(torch.zeros(1, 4, dtype=torch.int8))
    with pytest.raises(TypeError, match="torch.Tensor"):
        pack_int4([1, 2])


@pytest.mark.parametrize(
    "wdtype,sdtype",
    [
        (torch.bfloat16, torch.bfloat16),
        (torch.float16, torch.float16),
        (torch.float32, torch.bfloat16),
    ],
)
@pytest.mark.parametrize("group", [128, 32, 96])
def test_quantize_dequantize_error_within_half_scale(wdtype, sdtype, group):
    N, K = 24, 3 * group
    w = (rand(N, K, seed=1) * torch.logspace(-3, 2, N, device=DEV).unsqueeze(1)).to(
        wdtype
    )  # rows of all scales
    qw = quantize_int4(w, group)
    assert qw.scales.dtype == sdtype and qw.dtype == sdtype
    assert qw.packed.shape == (N, K // 2) and qw.scales.shape == (N, K // group)
    assert qw.shape == (N, K) and qw.group_size == group
    q = unpack_int4(qw.packed)
    assert int(q.min()) >= -8 and int(q.max()) <= 7
    s = qw.scales.double().repeat_interleave(group, dim=1)
    err = (w.double() - qw.dequantize(torch.float64)).abs()
    assert bool((err <= s / 2 * (1 + 1e-12)).all())
    # The stored scale is absmax / 7 rounded once to its dtype.
    absmax = w.double().reshape(N, K // group, group).abs().amax(-1)
    assert torch.equal(qw.scales, (absmax / 7).to(sdtype))


def test_dequantize_exact_in_fp32_and_default_dtype():
    w = rand(8, 256, dtype=torch.float16, seed=2)
    qw = quantize_int4(w)
    exact = qw.dequantize(torch.float32)
    q = unpack_int4(qw.packed).double()
    s = qw.scales.double().repeat_interleave(128, dim=1)
    assert torch.equal(exact.double(), q * s)  # q * s fits FP32 exactly
    assert qw.dequantize().dtype == torch.float16
    assert torch.equal(qw.dequantize(), exact.to(torch.float16))


def test_zero_group_dequantizes_to_zero_not_nan():
    w = rand(4, 256, dtype=torch.bfloat16, seed=3)
    w[1, :128] = 0  # one all-zero group
    w[2] = 0  # a whole zero row
    qw = quantize_int4(w)
    assert qw.scales[1, 0] == 0 and bool((qw.scales[2] == 0).all())
    d = qw.dequantize(torch.float32)
    assert bool(torch.isfinite(d).all())
    assert bool((d[1, :128] == 0).all()) and bool((d[2] == 0).all())
    assert bool((unpack_int4(qw.packed)[2] == 0).all())


def test_int4weight_nbytes_to_and_validation():
    qw = quantize_int4(rand(16, 256, dtype=torch.bfloat16, seed=4))
    assert qw.nbytes == 16 * 128 + 16 * 2 * 2
    moved = qw.to("cpu")
    assert isinstance(moved, Int4Weight) and moved.device.type == "cpu"
    assert torch.equal(moved.packed, qw.packed.cpu())
    with pytest.raises(dataclasses.FrozenInstanceError):
        qw.group_size = 64
    with pytest.raises(ValueError, match=r"expected \(N, K // 2\)"):
        Int4Weight(qw.packed[:, :64].contiguous(), qw.scales, (16, 256), 128)
    with pytest.raises(ValueError, match="scales has shape"):
        Int4Weight(qw.packed, qw.scales[:, :1].contiguous(), (16, 256), 128)
    with pytest.raises(TypeError, match="scales must be float16 or bfloat16"):
        Int4Weight(qw.packed, qw.scales.float(), (16, 256), 128)
    with pytest.raises(ValueError, match="contiguous"):
        Int4Weight(qw.packed.t().contiguous().t(), qw.scales, (16, 256), 128)


def test_quantize_errors():
    w = rand(4, 256, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="2-D"):
        quantize_int4(w.reshape(2, 2, 256))
    with pytest.raises(ValueError, match="multiple of 128"):
        quantize_int4(rand(4, 200, dtype=torch.bfloat16))
    for bad in (0, -2, 3):
        with pytest.raises(ValueError, match="positive multiple of 16"):
            quantize_int4(w, bad)
    for bad in (2.0, True, "128"):
        with pytest.raises(TypeError, match="group_size must be a positive int multiple of 16"):
            quantize_int4(w, bad)
    with pytest.raises(TypeError, match=r"float16, bfloat16 and float32.*\.to\("):
        quantize_int4(torch.ones(4, 128, dtype=torch.int32))
    with pytest.raises(TypeError, match="torch.Tensor"):
        quantize_int4([[1.0] * 128])
    w_inf = w.clone()
    w_inf[0, 0] = float("inf")
    with pytest.raises(ValueError, match="inf or NaN"):
        quantize_int4(w_inf)


# =============================================================================================
# Plans


def test_plan_rule_h200_anchor_shapes():
    sm = 132
    # batch 1: the pipelined FMA GEMV, 32 rows x 4 groups per step, split to >= 3 programs per SM
    # (the plans that results/int4-pipe-h200/pipe.json measured)
    for N, K, split in ((28672, 8192, 1), (128256, 4096, 1), (4096, 4096, 4), (14336, 4096, 1),
                        (4096, 14336, 4), (8192, 8192, 2)):  # fmt: skip
        p = Int4Plan.for_shape(1, N, K, sm)
        assert (p.path, p.block_n, p.groups_per_iter, p.num_warps, p.pipeline, p.split_k) == (
            "gemv_fma",
            32,
            4,
            2,
            3,
            split,
        ), (N, K)
        assert p.tiles(1, N) * p.split_k >= 3 * sm
    p = Int4Plan.for_shape(1, 4096, 4096, sm, group_size=32)
    assert (p.groups_per_iter, p.split_k) == (16, 4)  # 512 K values per step, >= 2 steps/split
    p = Int4Plan.for_shape(1, 4096, 4096, sm, group_size=4)  # words need group % 8 == 0
    assert p.path == "gemv_dot"
    p = Int4Plan.for_shape(16, 28672, 8192, sm)  # 112 tiles of 256 rows: 2 splits, 224 programs
    assert (p.path, p.block_m, p.block_n, p.num_warps, p.split_k) == ("gemv_dot", 16, 256, 4, 2)
    p = Int4Plan.for_shape(4096, 4096, 4096, sm)
    assert (p.path, p.block_m, p.num_warps, p.split_k) == ("tiled", 128, 8, 1)
    p = Int4Plan.for_shape(17, 4096, 4096, sm)
    assert (p.path, p.block_m, p.num_warps) == ("tiled", 32, 4)


def test_plan_rule_old_fma_loop_when_pipeline_off(monkeypatch):
    # FMA_PIPELINE = 0 restores the old batch-1 rule (64 rows x 1 group, 6 programs per SM)
    monkeypatch.setattr(int4_mod, "FMA_PIPELINE", 0)
    p = Int4Plan.for_shape(1, 28672, 8192, 132)
    assert (p.path, p.block_n, p.groups_per_iter, p.pipeline, p.split_k) == (
        "gemv_fma",
        64,
        1,
        0,
        2,
    )
    p = Int4Plan.for_shape(1, 8192, 8192, 132)
    assert p.split_k == 8  # 128 tiles < 6 * 132: 1024 programs
    p = Int4Plan.for_shape(1, 4096, 4096, 132, group_size=32)
    assert p.groups_per_iter == 4  # 128 K values per step


@pytest.mark.parametrize(
    "N,K,block_n,split",
    [
        (4096, 4096, 128, 8),  # 256 rows would split 16 ways with 2 groups each (< 4): 128 rows
        (8192, 8192, 256, 8),
        (14336, 4096, 256, 4),
        (4096, 14336, 256, 16),  # 7 groups per split: 256 rows stay
        (28672, 8192, 256, 2),
        (128256, 4096, 256, 1),
    ],  # fmt: skip
)
@pytest.mark.parametrize("M", [2, 4, 16])
def test_plan_rule_gemv_dot_split_to_1_5_programs_per_sm(M, N, K, block_n, split):
    # the measured best splits on the H200 (r1.json): the smallest power of two that reaches
    # 1.5 programs per SM (198 on 132 SMs), 16 at most; 128-row tiles where 256 rows would leave
    # fewer than 4 groups per split (results/int4s-h200/int4s.json)
    p = Int4Plan.for_shape(M, N, K, 132)
    assert (p.path, p.block_n, p.split_k) == ("gemv_dot", block_n, split)
    assert p.tiles(M, N) * p.split_k >= 198 or p.split_k == 16
    assert p.split_k == 1 or p.tiles(M, N) * p.split_k // 2 < 198


@pytest.mark.parametrize(
    "M,N,K,split",
    [
        (256, 8192, 8192, 1),  # 128 tiles >= 0.75 per SM: no split
        (256, 4096, 14336, 2),  # 64 tiles: 2 splits reach 0.75 per SM
        (64, 4096, 4096, 4),  # 32 tiles, 32 groups: 4 splits of 8 (the minimum per split)
    ],
)
def test_plan_rule_tiled_splits(M, N, K, split):
    # the measured best splits of the tiled path on the H200 (results/int4-gemv-h200/r2.json);
    # batch 17-64 on larger weights moved to the tile kernel (tests/test_int4_tile.py)
    p = Int4Plan.for_shape(M, N, K, 132)
    assert (p.path, p.kernel, p.split_k) == ("tiled", "mm", split)


@pytest.mark.parametrize(
    "M,N,K,tile",
    [
        (65, 4096, 4096, (128, 64, 4, 4)),  # 32 x 2 tiles: split to 1.5 programs per SM (198)
        (128, 4096, 4096, (128, 64, 4, 4)),
        (256, 4096, 4096, (128, 64, 4, 2)),
        (256, 14336, 4096, (128, 64, 4, 1)),  # 448 tiles: no split (the tile kernel, TMA)
        (256, 4096, 14336, (128, 64, 4, 2)),
        (64, 4096, 4096, (64, 128, 8, 4)),  # block_m 64: unchanged
        (257, 4096, 4096, (128, 128, 8, 2)),  # above 256 rows (not measured): 128 x 128
        (4096, 4096, 4096, (128, 128, 8, 1)),
    ],
)
def test_plan_rule_tiled_wide_m_tiles(M, N, K, tile):
    # 64 < M <= 256: 128 x 64 tiles with 4 warps (results/int4s-h200/int4s.json: 3-8% faster
    # than 128 x 128 with 8 warps at batch 256, 2% at 128x4096x4096)
    p = Int4Plan.for_shape(M, N, K, 132)
    assert (p.path, p.block_m, p.block_n, p.num_warps, p.split_k) == ("tiled", *tile)


def test_plan_rule_gemv_dot_keeps_two_groups_per_split():
    p = Int4Plan.for_shape(4, 256, 1024, 132)  # 1 tile, 8 groups: 4 splits of 2, not 16
    assert (p.path, p.split_k) == ("gemv_dot", 4)
    p = Int4Plan.for_shape(4, 256, 384, 132)  # 3 groups: one split of 2 would leave 1
    assert p.split_k == 1


def test_plan_rule_small_k_never_splits_below_min_groups():
    p = Int4Plan.for_shape(1, 16, 1024, 132)  # 8 groups: splitting would leave < 8 per split
    assert p.split_k == 1


def test_plan_validation():
    with pytest.raises(ValueError, match="block_m"):
        Int4Plan(block_m=8, block_n=32)
    with pytest.raises(ValueError, match="block_n"):
        Int4Plan(block_m=1, block_n=24)
    with pytest.raises(ValueError, match="split_k"):
        Int4Plan(block_m=1, block_n=32, split_k=0)
    with pytest.raises(ValueError, match="groups_per_iter"):
        Int4Plan(block_m=1, block_n=32, groups_per_iter=3)


def test_work_model():
    w = work(1, 8192, 8192, 128, torch.bfloat16)
    assert w.bytes == 8192 * 4096 + 8192 * 64 * 2 + 8192 * 2 + 8192 * 2
    assert w.flops == 2 * 8192 * 8192


# =============================================================================================
# Kernels


@pytest.fixture
def poison(monkeypatch):
    """Every output and split-K scratch buffer the launchers allocate starts as NaN."""

    def nan_alloc(shape, dtype, device):
        return torch.full(shape, float("nan"), dtype=dtype, device=device)

    monkeypatch.setattr(int4_mod, "_alloc", nan_alloc)


def _case(M, N, K, group, dtype, seed=0):
    w = rand(N, K, dtype=dtype, seed=seed)
    qw = quantize_int4(w, group)
    x = rand(M, K, dtype=dtype, seed=seed + 1)
    return x, qw, qw.dequantize(torch.float32)


SM = INTERPRETER_SM_COUNT if interpreter_enabled() else None


def _plan(M, N, K, group):
    sm = SM or torch.cuda.get_device_properties(0).multi_processor_count
    return Int4Plan.for_shape(M, N, K, sm, group)


@kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "M,N,K,group,path",
    [
        (1, 37, 384, 128, "gemv_fma"),  # odd N; 3 groups: K not a multiple of the 2-group step
        (3, 40, 96, 32, "gemv_dot"),  # M padded to a 16-row tile; small groups
        (16, 64, 256, 128, "gemv_dot"),  # a full 16-row tile
        (17, 24, 192, 96, "tiled"),  # M > 16; group/2 = 48 is not a power of two (padded lanes)
    ],
)
def test_int4_linear_default_plan(M, N, K, group, path, dtype, poison):
    x, qw, w_exact = _case(M, N, K, group, dtype)
    plan = _plan(M, N, K, group)
    assert plan.path == path
    y = int4_linear(x, qw)
    assert y.shape == (M, N) and y.dtype == dtype
    assert_close(y, int4_linear_ref(x, w_exact), msg=f"{plan}")


@kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "M,N,K,want",
    [
        # 256 rows on 4 SMs: 1 tile split 2 with 2 groups each (< 4): 128-row tiles, split 2
        (4, 200, 512, dict(path="gemv_dot", block_n=128, split_k=2)),
        (100, 72, 384, dict(path="tiled", block_m=128, block_n=64, num_warps=4)),  # 64 < M <= 256
    ],
    ids=["gemv-dot-128-rows", "tiled-128x64"],
)
def test_int4_linear_default_plan_new_tiles(M, N, K, want, dtype, poison):
    plan = _plan(M, N, K, 128)
    assert {k: getattr(plan, k) if k != "path" else plan.path for k in want} == want
    x, qw, w_exact = _case(M, N, K, 128, dtype, seed=M)
    assert_close(int4_linear(x, qw), int4_linear_ref(x, w_exact), msg=f"{plan}")


@kernels
@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_linear_default_plan_splits_k(dtype, poison):
    # 2 tiles of 32 rows on 4 SMs, 128 groups of 32 (16 per step): split 4 (12 programs)
    M, N, K, group = 1, 48, 4096, 32
    plan = _plan(M, N, K, group)
    assert (plan.split_k, plan.path, plan.pipeline) == (4, "gemv_fma", 3)
    x, qw, w_exact = _case(M, N, K, group, dtype, seed=5)
    assert_close(int4_linear(x, qw), int4_linear_ref(x, w_exact))


FORCED = [
    Int4Plan(block_m=1, block_n=16, groups_per_iter=2, split_k=1),  # FMA, 2 groups per step
    Int4Plan(
        block_m=1, block_n=32, groups_per_iter=4, split_k=3
    ),  # FMA split; a split may be empty
    Int4Plan(block_m=16, block_n=16, split_k=1),  # tensor-core GEMV
    Int4Plan(block_m=16, block_n=32, split_k=2),  # tensor-core GEMV, split
    Int4Plan(block_m=32, block_n=16, split_k=4),  # tiled, split (more splits than some ranges)
]


@kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 3, 16, 17])
@pytest.mark.parametrize(
    "plan", FORCED, ids=lambda p: f"{p.path}-s{p.split_k}-g{p.groups_per_iter}"
)
def test_int4_linear_every_forced_path(plan, M, dtype, poison):
    N, K, group = 21, 320, 64  # odd N, 5 groups: not a multiple of any step or split
    x, qw, w_exact = _case(M, N, K, group, dtype, seed=M)
    y = int4_linear(x, qw, plan=plan)
    assert_close(y, int4_linear_ref(x, w_exact), msg=f"M={M} {plan}")


@kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 3, 17])
@pytest.mark.parametrize("plan", FORCED[2:], ids=lambda p: f"{p.path}-s{p.split_k}")
def test_int4_weight_as_dot_b_operand(plan, M, dtype, poison, monkeypatch):
    # WEIGHT_AS_B: x is the dot's A side and the decoded weight tile its B side (acc is y, not y^T)
    monkeypatch.setattr(int4_mod, "WEIGHT_AS_B", True)
    x, qw, w_exact = _case(M, 21, 320, 64, dtype, seed=7)
    assert_close(int4_linear(x, qw, plan=plan), int4_linear_ref(x, w_exact), msg=f"M={M} {plan}")


@kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 3, 17])
@pytest.mark.parametrize(
    "flags",
    [
        dict(SPLIT_HALVES=True),
        dict(SPLIT_HALVES=True, WEIGHT_AS_B=True, TILED_WEIGHT_AS_B=True),
        dict(FOLD_OFFSET=True),
        dict(SPLIT_HALVES=True, FOLD_OFFSET=True, WEIGHT_AS_B=True),
        dict(SPLIT_HALVES=True, ONE_ROW_BROADCAST=True, WEIGHT_AS_B=True),
    ],
    ids=lambda f: "+".join(sorted(f)),
)
@pytest.mark.parametrize("plan", FORCED[2:], ids=lambda p: f"{p.path}-s{p.split_k}")
def test_int4_decode_variants_on_tensor_core_paths(plan, flags, M, dtype, poison, monkeypatch):
    # SPLIT_HALVES: even-k and odd-k nibbles as two dots against x[even] / x[odd];
    # FOLD_OFFSET: q + offset decoded, each group corrected by offset * sum(x);
    # TILED_WEIGHT_AS_B: the M > 16 tiles with the weight as the dot's B side (M=17 reaches it).
    for name, value in flags.items():
        monkeypatch.setattr(int4_mod, name, value)
    x, qw, w_exact = _case(M, 21, 320, 64, dtype, seed=11 + M)
    assert_close(int4_linear(x, qw, plan=plan), int4_linear_ref(x, w_exact), msg=f"{flags} {plan}")
    xs = _case(M, 21, 640, 64, dtype, seed=12)[0][:, ::2]  # strided x: stride_xk = 2
    assert_close(int4_linear(xs, qw, plan=plan), int4_linear_ref(xs, w_exact), msg=f"{flags}")


@kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "flags",
    [dict(), dict(SPLIT_HALVES=True, TILED_WEIGHT_AS_B=True), dict(FOLD_OFFSET=True)],
    ids=["a-side", "halves-b-side", "fold-ignored"],
)
@pytest.mark.parametrize(
    "plan",
    [Int4Plan(block_m=32, block_n=16, split_k=1), Int4Plan(block_m=32, block_n=32, split_k=3)],
    ids=["s1", "s3"],
)
def test_int4_tiled_round_weight(plan, flags, dtype, poison, monkeypatch):
    # TILED_ROUND_WEIGHT: the tiled path multiplies dtype(q * scale) with one accumulator across
    # groups, so its reference is the rounded weight's (dense F.linear's numerics; against the
    # exact weight it can exceed the two-ulp tolerance, which is why it is off by default). Group
    # magnitudes differ by up to 40x, so a scale of the wrong group, a scale applied twice or an
    # accumulator reset per group fails.
    monkeypatch.setattr(int4_mod, "TILED_ROUND_WEIGHT", True)
    for name, value in flags.items():
        monkeypatch.setattr(int4_mod, name, value)
    M, N, K, group = 33, 21, 320, 64  # M > 16 (tiled, 2 M-tiles), odd N, 5 groups
    ramp = (1.0 + 39.0 * (torch.arange(K) // group) / (K // group - 1)).to(DEV)
    qw = quantize_int4((rand(N, K, seed=21) * ramp).to(dtype), group)
    x = rand(M, K, dtype=dtype, seed=22)
    w_rounded = qw.dequantize(dtype)
    y = int4_linear(x, qw, plan=plan)
    assert_close(y, int4_linear_ref(x, w_rounded), msg=f"{flags} {plan}")
    xs = rand(M, 2 * K, dtype=dtype, seed=23)[:, ::2]  # strided x: stride_xk = 2
    assert_close(int4_linear(xs, qw, plan=plan), int4_linear_ref(xs, w_rounded), msg="strided")


@kernels
@pytest.mark.parametrize("group", [16, 32])
def test_int4_halves_with_small_groups(group, poison, monkeypatch):
    # group 16: each half is 8 lanes, below a dot's minimum K, so HALVES falls back to one dot;
    # group 32: halves of 16 lanes (the smallest two-dot case)
    monkeypatch.setattr(int4_mod, "SPLIT_HALVES", True)
    for M, plan in ((2, Int4Plan(block_m=16, block_n=16)), (20, Int4Plan(block_m=32, block_n=16))):
        x, qw, w_exact = _case(M, 24, 4 * group, group, torch.float16, seed=group + M)
        assert_close(int4_linear(x, qw, plan=plan), int4_linear_ref(x, w_exact), msg=f"{M}")


@kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("plan", FORCED[2:], ids=lambda p: f"{p.path}-s{p.split_k}")
def test_int4_one_row_broadcast_on_tensor_core_paths(plan, dtype, poison, monkeypatch):
    # M == 1 on a tensor-core plan with ONE_ROW_BROADCAST: x is loaded once per group and
    # broadcast to the dot's columns instead of re-reading 16 wrapped copies of the row.
    monkeypatch.setattr(int4_mod, "ONE_ROW_BROADCAST", True)
    x, qw, w_exact = _case(1, 21, 320, 64, dtype, seed=5)
    assert_close(int4_linear(x, qw, plan=plan), int4_linear_ref(x, w_exact), msg=f"{plan}")
    xs = _case(2, 21, 640, 64, dtype, seed=6)[0][:1, ::2]  # one row with stride_xk = 2
    assert_close(int4_linear(xs, qw, plan=plan), int4_linear_ref(xs, w_exact))


@kernels
@pytest.mark.parametrize(
    "plan",
    [
        Int4Plan(block_m=1, block_n=16, groups_per_iter=1, split_k=4),
        Int4Plan(block_m=16, block_n=16, split_k=4),
    ],
    ids=["fma", "dot"],
)
def test_int4_split_k_bit_identical_across_calls(plan):
    x, qw, w_exact = _case(2, 40, 512, 64, torch.float16, seed=9)
    first = int4_linear(x, qw, plan=plan)
    for _ in range(3):
        assert torch.equal(int4_linear(x, qw, plan=plan), first)
    assert_close(first, int4_linear_ref(x, w_exact))


@kernels
@pytest.mark.parametrize("dtype", DTYPES)
def test_int4_linear_nd_and_strided_x(dtype, poison):
    N, K, group = 20, 256, 128
    _, qw, w_exact = _case(1, N, K, group, dtype, seed=11)
    x3 = rand(2, 3, K, dtype=dtype, seed=12)
    y3 = int4_linear(x3, qw)
    assert y3.shape == (2, 3, N)
    assert_close(y3, int4_linear_ref(x3, w_exact))
    wide = rand(5, 2 * K, dtype=dtype, seed=13)
    xs = wide[:, ::2]  # strided along K
    assert_close(int4_linear(xs, qw), int4_linear_ref(xs, w_exact))
    xt = rand(K, 4, dtype=dtype, seed=14).t()  # (4, K) column-major
    assert_close(int4_linear(xt, qw), int4_linear_ref(xt, w_exact))


@kernels
def test_int4_linear_extreme_nibbles_and_zero_groups():
    # Every code from -8 to 7, including -8 (which quantize never emits), and a zero-scale group.
    N, K, group = 16, 256, 128
    q = (torch.arange(N * K) % 16 - 8).to(torch.int8).reshape(N, K)
    scales = rand(N, K // group, seed=15).abs().to(torch.float16)
    scales[3, 1] = 0
    qw = Int4Weight(pack_int4(q).to(DEV), scales.to(DEV), (N, K), group)
    x = rand(1, K, dtype=torch.float16, seed=16)
    for plan in (None, Int4Plan(block_m=16, block_n=16)):
        assert_close(
            int4_linear(x, qw, plan=plan), int4_linear_ref(x, qw.dequantize(torch.float32))
        )


def test_int4_group_size_must_be_multiple_of_16():
    # A group of 6 gave wrong tensor-core GEMV results on the H200 (an 8-lane padded K tile); the
    # quantizer refuses such groups instead.
    with pytest.raises(ValueError, match="positive multiple of 16"):
        quantize_int4(rand(20, 60, dtype=torch.float16, seed=31), 6)


@kernels
def test_int4_linear_empty_batch():
    _, qw, _ = _case(1, 16, 128, 128, torch.bfloat16)
    y = int4_linear(torch.empty(0, 128, dtype=torch.bfloat16, device=DEV), qw)
    assert y.shape == (0, 16)


@kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "M,N,K,group",
    [
        (1, 37, 256, 128),  # odd N: the reduction's last step is partial
        (3, 70, 192, 64),  # N > one 64-row reduction step
        (17, 24, 192, 96),  # M > 16 (64-row tiles); padded group lanes
    ],
)
def test_int4_grad_input(M, N, K, group, dtype, poison):
    _, qw, w_exact = _case(M, N, K, group, dtype, seed=M + N)
    g = rand(M, N, dtype=dtype, seed=21)
    dx = int4_linear_grad_input(g, qw)
    assert dx.shape == (M, K) and dx.dtype == dtype
    assert_close(dx, grad_ref(g, w_exact))


@kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "M,N,K,max_split,split,chunk",
    [
        (1, 200, 256, 32, 2, 128),  # 2 reduction blocks, one per split; the second partial
        (2, 700, 128, 3, 3, 256),  # 6 blocks in 3 chunks of 2; the last block partial
        (17, 300, 128, 32, 1, 384),  # 64-row tiles: the partials' bound (N // 16M) keeps one
    ],
)
@pytest.mark.parametrize("decode", [0, 1])
def test_int4_grad_input_split_n(
    M, N, K, max_split, split, chunk, decode, dtype, poison, monkeypatch
):
    # Few programs (batch 1, narrow K) split the reduction over N into FP32 partials summed in
    # a fixed order; every split covers its rows exactly once (outputs and partials poisoned).
    # decode 1: the folded path's nibbles from int4_kernels._dequant_halves (its interpreter
    # form; the bit trick and the PTX decode run on the GPU only).
    monkeypatch.setattr(int4_mod, "GRAD_MAX_SPLIT", max_split)
    monkeypatch.setattr(int4_mod, "GRAD_DECODE", decode)
    tiles = -(-M // (16 if M <= int4_mod.GEMV_MAX_M else 64)) * (K // 128)
    assert int4_mod.grad_input_split(M, N, tiles, INTERPRETER_SM_COUNT) == (split, chunk)
    _, qw, w_exact = _case(M, N, K, 128, dtype, seed=M + N + 1)
    g = rand(M, N, dtype=dtype, seed=24)
    dx = int4_linear_grad_input(g, qw)
    assert dx.shape == (M, K)
    assert_close(dx, grad_ref(g, w_exact))


@kernels
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "M,N,K,group,gpp,max_split",
    [
        (1, 200, 256, 128, 1, 32),  # 2 groups x 2 splits: the second chunk partial
        (2, 333, 384, 64, 2, 3),  # odd N, groups of 64 two per program (6 groups: 3 full blocks)
        (1, 70, 128, 128, 1, 1),  # one chunk: dx written directly, rows past N masked
        (2, 1000, 128, 32, 1, 32),  # small groups, many rows per chunk
        # groups not a multiple of GPP: the last program's words past K are masked, and it must
        # still be launched (programs = cdiv(groups, GPP)); found by mutation testing
        (1, 200, 384, 128, 2, 32),  # 3 groups two per program; split N
        (2, 70, 640, 64, 4, 1),  # 10 groups four per program; dx directly
    ],
)
def test_int4_grad_input_gemv(M, N, K, group, gpp, max_split, dtype, poison, monkeypatch):
    # The streaming FMA grad-input (int4_grad.py, GRAD_GEMV): exact nibbles as q / 16, the
    # scale folded into grad_out, N in FP32 partials summed in chunk order; outputs poisoned.
    monkeypatch.setattr(int4_mod, "GRAD_GEMV", True)
    monkeypatch.setattr(int4_mod, "GRAD_GEMV_GPP", gpp)
    monkeypatch.setattr(int4_mod, "GRAD_MAX_SPLIT", max_split)
    monkeypatch.setattr(int4_mod, "GRAD_GEMV_BLOCK_N", 16)
    _, qw, w_exact = _case(M, N, K, group, dtype, seed=N + K)
    g = rand(M, N, dtype=dtype, seed=31)
    launched = spy_launches(monkeypatch, int4_mod)
    dx = int4_linear_grad_input(g, qw)
    assert launched[0] == "_int4_grad_gemv_kernel"
    assert dx.shape == (M, K) and dx.dtype == dtype
    assert_close(dx, grad_ref(g, w_exact))
    # an output gradient of one sign: nothing large is carried and cancelled at the end
    gp = g.abs() + 0.5
    assert_close(int4_linear_grad_input(gp, qw), grad_ref(gp, w_exact))
    assert torch.equal(int4_linear_grad_input(g, qw), dx)  # a fixed order: the same bits


def test_int4_grad_input_gemv_off_by_default():
    assert int4_mod.GRAD_GEMV is False  # prepared in session 21, not yet timed on the GPU


def test_int4_grad_input_split_rule():
    # The H200's 132 SMs: batch 1 at K = 4096 (32 programs) splits; a batch that already fills
    # the GPU does not; the partials never outweigh the packed weight.
    sm = 132
    assert int4_mod.grad_input_split(1, 4096, 32, sm) == (16, 256)
    assert int4_mod.grad_input_split(16, 14336, 32, sm) == (16, 896)
    assert int4_mod.grad_input_split(4096, 4096, 64 * 32, sm) == (1, 4096)
    for M, N, tiles in ((64, 4096, 32), (1, 64, 32), (256, 8192, 4 * 64)):
        split, chunk = int4_mod.grad_input_split(M, N, tiles, sm)
        assert split == 1 or 8 * split * M <= N // 2
        assert chunk % int4_mod.GRAD_BLOCK_N == 0 and (split - 1) * chunk < N <= split * chunk


@kernels
def test_int4_grad_input_nd_and_large_scales():
    # Large-magnitude FP16 scales make q * s need all 14 bits: only the hi/lo split is exact.
    N, K, group = 20, 128, 128
    w = rand(N, K, dtype=torch.float16, seed=22) * 300
    qw = quantize_int4(w, group)
    g = rand(2, 3, N, dtype=torch.float16, seed=23)
    dx = int4_linear_grad_input(g, qw)
    assert dx.shape == (2, 3, K)
    assert_close(dx, grad_ref(g, qw.dequantize(torch.float32)))


@kernels
def test_int4_packed_entry_point_matches():
    x, qw, _ = _case(3, 24, 256, 128, torch.bfloat16, seed=30)
    y = int4_linear_packed(x, qw.packed, qw.scales, qw.group_size)
    assert_close(y, int4_linear_ref(x, qw.dequantize(torch.float32)))
    assert torch.equal(y, int4_linear(x, qw))


# ---- errors (validation runs before any launch)


def test_errors_int4_linear(monkeypatch):
    _, qw, _ = _case(1, 16, 256, 128, torch.bfloat16)
    x = rand(2, 256, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="qweight must be a warpgauge.quant.Int4Weight"):
        int4_linear(x, qw.dequantize())
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        int4_linear(x.tolist(), qw)
    with pytest.raises(TypeError, match=r"scales are bfloat16.*x\.to\(torch\.bfloat16\)"):
        int4_linear(x.half(), qw)
    with pytest.raises(TypeError, match="float32.*supported: float16, bfloat16"):
        int4_linear(x.float(), qw)
    with pytest.raises(ValueError, match="last dimension must be the weight's K = 256"):
        int4_linear(rand(2, 128, dtype=torch.bfloat16), qw)
    with pytest.raises(TypeError, match="plan must be an Int4Plan"):
        int4_linear(x, qw, plan={"block_m": 1})
    with pytest.raises(ValueError, match="same device"):
        int4_linear(torch.empty(2, 256, dtype=torch.bfloat16, device="meta"), qw)
    with pytest.raises(ValueError, match="group_size|scales has shape"):
        int4_linear_packed(x, qw.packed, qw.scales, 64)
    with pytest.raises(ValueError, match="positive multiple of 16"):
        int4_linear_packed(x, qw.packed, qw.scales, 0)
    with pytest.raises(TypeError, match="packed has dtype int8.*uint8"):
        int4_linear_packed(x, qw.packed.view(torch.int8), qw.scales, 128)
    with pytest.raises(TypeError, match="scales has dtype float32"):
        int4_linear_packed(x, qw.packed, qw.scales.float(), 128)
    with pytest.raises(ValueError, match="contiguous"):
        int4_linear_packed(x, qw.packed.t().contiguous().t(), qw.scales, 128)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    cpu_qw = qw.to("cpu")
    with pytest.raises(ValueError, match="CPU tensor"):
        int4_linear(x.cpu(), cpu_qw)


def test_errors_int4_grad_input():
    _, qw, _ = _case(1, 16, 256, 128, torch.float16)
    with pytest.raises(ValueError, match="last dimension must be the weight's N = 16"):
        int4_linear_grad_input(rand(2, 256, dtype=torch.float16), qw)
    with pytest.raises(TypeError, match="scales are float16"):
        int4_linear_grad_input(rand(2, 16, dtype=torch.bfloat16), qw)
    with pytest.raises(TypeError, match="qweight must be"):
        int4_linear_grad_input(rand(2, 16, dtype=torch.float16), None)


def test_ptx_decode_is_one_line_for_inductor():
    """Inductor pastes constexpr strings into generated source as one-line literals: a newline in
    the PTX made torch.compile of int4_linear a SyntaxError on the H200 (session 5 GPU tests)."""
    from warpgauge.kernels import int4

    for asm in (int4._DECODE_BF16, int4._DECODE_F16):
        text = getattr(asm, "value", asm)
        assert "\n" not in text and "prmt.b32" in text and text.count(";") >= 16


# Found by mutation testing (session 22): which kernel runs per batch.


@kernels
def test_int4_grad_input_gemv_takes_batches_up_to_max_m(monkeypatch):
    # GRAD_GEMV on: every batch of at most GRAD_GEMV_MAX_M rows runs the streaming kernel, a
    # larger one the tile kernel (a correct result alone cannot tell the two paths apart).
    monkeypatch.setattr(int4_mod, "GRAD_GEMV", True)
    N, K, group = 40, 256, 128
    _, qw, w_exact = _case(1, N, K, group, torch.float16, seed=3)
    launched = spy_launches(monkeypatch, int4_mod)
    for M in range(1, int4_mod.GRAD_GEMV_MAX_M + 2):
        launched.clear()
        g = rand(M, N, dtype=torch.float16, seed=40 + M)
        assert_close(int4_linear_grad_input(g, qw), grad_ref(g, w_exact))
        want = (
            "_int4_grad_gemv_kernel" if M <= int4_mod.GRAD_GEMV_MAX_M else "_int4_grad_input_kernel"
        )
        assert launched[0] == want, (M, launched)
