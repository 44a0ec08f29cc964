"""Full-size GEMM and INT4 checks on a CUDA GPU (written for the H200; skipped without CUDA).

Run on the GPU machine, without TRITON_INTERPRET:

    pytest tests/gpu/test_gemm_int4_gpu.py -q

Every numeric check is against an FP64 reference through reference.assert_close. The first GEMM
call for each (M bucket, N, K bucket, layout, dtype) autotunes (compiles and times up to 8
configs), so the first run takes a few minutes; Triton's disk cache makes later runs faster.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from warpgauge._device import interpreter_enabled
from warpgauge.kernels import int4 as int4_mod
from warpgauge.kernels import int4_tile
from warpgauge.kernels.gemm import compiled_variants, gemm, gemm_backward
from warpgauge.kernels.int4 import (
    Int4Plan,
    int4_linear,
    int4_linear_grad_input,
    int4_linear_packed,
)
from warpgauge.quant import quantize_int4
from warpgauge.reference import assert_close, gemm_ref, int4_linear_ref

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or interpreter_enabled(),
        reason="needs a CUDA GPU (and TRITON_INTERPRET unset)",
    ),
]

DTYPES = [torch.bfloat16, torch.float16]


def rand(*shape, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(dtype)


def ref64(a, b):
    return (a.double() @ b.double()).to(a.dtype)


def sm_count():
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


# =============================================================================================
# GEMM


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "M,N,K",
    [(127, 255, 65), (1024, 1024, 1024), (4096, 4096, 4096), (1, 4096, 4096), (4096, 14336, 4096)],
)
def test_gemm_full_size(M, N, K, dtype):
    a, b = rand(M, K, dtype=dtype, seed=1), rand(K, N, dtype=dtype, seed=2)
    out = torch.full((M, N), float("nan"), dtype=dtype, device="cuda")
    gemm(a, b, out=out)
    assert_close(out, gemm_ref(a, b), msg=f"{M}x{N}x{K} {dtype}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT", "sliced"])
def test_gemm_layouts(layout, dtype):
    M, N, K = 1000, 768, 520
    if layout == "sliced":
        a = rand(2 * M, K + 8, dtype=dtype, seed=3)[::2, 8:]
        b = rand(K, 3 * N, dtype=dtype, seed=4)[:, ::3]
    else:
        a = (
            rand(K, M, dtype=dtype, seed=3).t()
            if layout[0] == "T"
            else rand(M, K, dtype=dtype, seed=3)
        )
        b = (
            rand(N, K, dtype=dtype, seed=4).t()
            if layout[1] == "T"
            else rand(K, N, dtype=dtype, seed=4)
        )
    assert_close(gemm(a, b), ref64(a, b), msg=layout)


def test_gemm_bf16_rounding_exact():
    # Integer products sum exactly in FP32; BF16 spacing is 2 above 256 and 4 above 512. The GPU
    # must round to nearest, ties to even (the interpreter truncates, so this is GPU-only).
    cols = {
        257.0: ([255, 2], 256.0),  # tie -> even
        259.0: ([255, 4], 260.0),  # tie -> even
        258.0: ([255, 3], 258.0),  # exact
        513.0: ([255, 255, 3], 512.0),  # nearest
        514.0: ([255, 255, 4], 512.0),  # tie -> even
        515.0: ([255, 255, 5], 516.0),  # nearest
    }
    K = 300
    a = torch.ones(130, K, dtype=torch.bfloat16, device="cuda")
    b = torch.zeros(K, len(cols), dtype=torch.bfloat16, device="cuda")
    for j, (parts, _) in enumerate(cols.values()):
        b[: len(parts), j] = torch.tensor(parts, dtype=torch.bfloat16)
    c = gemm(a, b)
    assert torch.equal(c, gemm_ref(a, b))
    assert c[0].tolist() == [want for _, want in cols.values()]
    assert torch.equal(c, c[:1].expand_as(c))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_backward_full_size(dtype):
    M, K, N = 2048, 1024, 768  # a linear layer: x (M, K), weight (N, K), b = weight.t()
    a = rand(M, K, dtype=dtype, seed=5)
    w = rand(N, K, dtype=dtype, seed=6)
    g = rand(M, N, dtype=dtype, seed=7)
    da, db = gemm_backward(g, a, w.t())
    assert_close(da, ref64(g, w), msg="dA")
    assert_close(db, ref64(a.t(), g), msg="dB")


def test_new_token_count_within_bucket_reuses_compiled_kernels():
    K, N = 512, 768
    b = rand(K, N, dtype=torch.bfloat16, seed=8)
    gemm(rand(1000, K, dtype=torch.bfloat16, seed=9), b)  # autotunes bucket 1024 (compiles)
    torch.cuda.synchronize()
    before = compiled_variants("m")
    assert before > 0
    for M in (513, 600, 777, 1001, 1023, 1024):  # the same bucket: no new binary, no retuning
        a = rand(M, K, dtype=torch.bfloat16, seed=M)
        assert_close(gemm(a, b), gemm_ref(a, b), msg=f"M={M}")
    assert compiled_variants("m") == before

    # dB = A^T @ dC reduces over the token count: K unspecialized in the "k" entry point.
    w = rand(N, K, dtype=torch.bfloat16, seed=10)
    gemm_backward(
        rand(1000, N, dtype=torch.bfloat16), rand(1000, K, dtype=torch.bfloat16), w.t(), False, True
    )
    torch.cuda.synchronize()
    before_k = compiled_variants("k")
    for T in (520, 999, 1003, 1024):
        x = rand(T, K, dtype=torch.bfloat16, seed=T)
        g = rand(T, N, dtype=torch.bfloat16, seed=T + 1)
        _, db = gemm_backward(g, x, w.t(), False, True)
        assert_close(db, ref64(x.t(), g), msg=f"tokens={T}")
    assert compiled_variants("k") == before_k


@pytest.mark.parametrize(
    "M,N,K,layout,dtype",
    [
        (4096, 4104, 4096, "NN", torch.bfloat16),  # N = 8 mod 16: TMA (was 0.12x cuBLAS)
        (2047, 2047, 2047, "NN", torch.bfloat16),  # all odd: padded copies + TMA
        (1001, 1003, 1005, "NN", torch.float16),  # all odd, below PAD_MIN_WORK: pointer kernel
        (4095, 4096, 4096, "NT", torch.bfloat16),  # M odd, B = w.t(): clipped last row tile
        (2049, 1032, 2056, "TN", torch.float16),  # A = x.t(): a transposed TMA box
        (1000, 768, 520, "sliced", torch.bfloat16),
    ],
)
def test_gemm_unaligned_and_transposed(M, N, K, layout, dtype):
    from warpgauge.kernels import gemm as gemm_mod

    if layout == "sliced":
        a = rand(M, K + 16, dtype=dtype, seed=21)[:, 8 : 8 + K]
        b = rand(K, N + 8, dtype=dtype, seed=22)[:, :N]
    else:
        a = (
            rand(K, M, dtype=dtype, seed=21).t()
            if layout[0] == "T"
            else rand(M, K, dtype=dtype, seed=21)
        )
        b = (
            rand(N, K, dtype=dtype, seed=22).t()
            if layout[1] == "T"
            else rand(K, N, dtype=dtype, seed=22)
        )
    out = torch.full((M, N), float("nan"), dtype=dtype, device="cuda")
    gemm(a, b, out=out)
    path = gemm_mod._path(a, b, out, "m")
    assert_close(out, ref64(a, b), msg=f"{M}x{N}x{K} {layout} path={path}")
    g = rand(M, N, dtype=dtype, seed=23)
    da, db = gemm_backward(g, a, b)
    assert_close(da, ref64(g, b.t()), msg="dA")
    assert_close(db, ref64(a.t(), g), msg="dB")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 7, 16, 64])
@pytest.mark.parametrize("N,K", [(4096, 4096), (1000, 14336), (4104, 4095)])
def test_gemm_skinny_tokens(M, N, K, dtype):
    from warpgauge.kernels import gemm as gemm_mod

    x = rand(M, K, dtype=dtype, seed=M)
    w = rand(N, K, dtype=dtype, seed=N)
    out = torch.full((M, N), float("nan"), dtype=dtype, device="cuda")
    assert gemm_mod._path(x, w.t(), out, "m") == "skinny"
    gemm(x, w.t(), out=out)
    assert_close(out, ref64(x, w.t()), msg=f"M={M}")
    for _ in range(3):  # split-K partials reduced in a fixed order: bit-identical
        assert torch.equal(gemm(x, w.t()), out)


# =============================================================================================
# INT4


ANCHORS = [  # anchors-h200.md, batch 1, plus the 16-row decode batch
    (1, 4096, 4096),
    (1, 8192, 8192),
    (1, 14336, 4096),
    (1, 4096, 14336),
    (1, 28672, 8192),
    (16, 28672, 8192),
    (4, 4096, 4096),  # tile kernel GEMV form, 128-row tiles, split 8 reduced in the kernel
    (128, 4096, 4096),  # tiled 128 x 64, 4 warps, split 4
    (256, 14336, 4096),  # tile kernel, 128 x 64 tiles, TMA, no split
]


@pytest.fixture(scope="module")
def weights():
    cache = {}

    def get(N, K, dtype, group=128):
        key = (N, K, dtype, group)
        if key not in cache:
            qw = quantize_int4(rand(N, K, dtype=dtype, seed=N + K) * 0.02, group)
            cache[key] = (qw, qw.dequantize(torch.float32))
        return cache[key]

    return get


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,N,K", ANCHORS)
def test_int4_anchor_shapes(M, N, K, dtype, weights):
    qw, w_exact = weights(N, K, dtype)
    x = rand(M, K, dtype=dtype, seed=11)
    y = int4_linear(x, qw)
    assert y.shape == (M, N)
    assert_close(y, int4_linear_ref(x, w_exact), msg=f"{Int4Plan.for_shape(M, N, K, sm_count())}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 3, 16, 17, 200])
@pytest.mark.parametrize(
    "plan",
    [
        Int4Plan(block_m=16, block_n=64, split_k=1),
        Int4Plan(block_m=16, block_n=128, split_k=3),
        Int4Plan(block_m=64, block_n=128, split_k=1, num_warps=8),
    ],
    ids=lambda p: f"{p.path}-bm{p.block_m}-s{p.split_k}",
)
def test_int4_ptx_decode_matches_fp64(plan, M, dtype, weights, monkeypatch):
    monkeypatch.setattr(int4_mod, "USE_ASM_DECODE", True)
    N, K = 3001, 128 * 37
    qw, w_exact = weights(N, K, dtype)
    x = rand(M, K, dtype=dtype, seed=12)
    assert_close(int4_linear(x, qw, plan=plan), int4_linear_ref(x, w_exact), msg=f"M={M} {plan}")


GPU_PLANS = [
    Int4Plan(block_m=1, block_n=64, groups_per_iter=1, split_k=1, num_warps=2, num_stages=1),
    Int4Plan(block_m=1, block_n=32, groups_per_iter=2, split_k=5, num_warps=4, num_stages=1),
    Int4Plan(block_m=16, block_n=64, split_k=1),
    Int4Plan(block_m=16, block_n=128, split_k=3),
    Int4Plan(block_m=64, block_n=128, split_k=1, num_warps=8),
    Int4Plan(block_m=128, block_n=128, split_k=2, num_warps=8),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [1, 3, 16, 17, 200])
@pytest.mark.parametrize("plan", GPU_PLANS, ids=lambda p: f"{p.path}-bm{p.block_m}-s{p.split_k}")
def test_int4_every_path_odd_shape(plan, M, dtype, weights):
    N, K = 3001, 128 * 37  # odd N; 37 groups: not a multiple of any step or split
    qw, w_exact = weights(N, K, dtype)
    x = rand(M, K, dtype=dtype, seed=12)
    y = torch.full((M, N), float("nan"), dtype=dtype, device="cuda")
    y.copy_(int4_linear(x, qw, plan=plan))
    assert_close(y, int4_linear_ref(x, w_exact), msg=f"M={M} {plan}")


TILE_PLANS = [
    Int4Plan(block_m=16, block_n=256, split_k=4, kernel="tile", fused=True),
    Int4Plan(block_m=16, block_n=128, split_k=1, kernel="tile", num_stages=4),
    Int4Plan(block_m=64, block_n=128, split_k=3, num_warps=8, kernel="tile", fused=True),
    Int4Plan(block_m=128, block_n=128, split_k=2, num_warps=8, kernel="tile", tma=True, fused=True),
    Int4Plan(block_m=128, block_n=64, split_k=1, num_warps=4, kernel="tile", tma=True),
    Int4Plan(block_m=64, block_n=256, split_k=1, num_warps=8, kernel="tile", tma=True),
    Int4Plan(block_m=128, block_n=128, split_k=2, num_warps=8, kernel="tile", tma=True, mode=1),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M", [3, 17, 200])
@pytest.mark.parametrize(
    "plan",
    TILE_PLANS,
    ids=lambda p: f"bm{p.block_m}-bn{p.block_n}-s{p.split_k}-m{p.mode}-t{p.tma:d}",
)
def test_int4_tile_kernel_odd_shape(plan, M, dtype, weights):
    # kernels/int4_tile.py: odd N (a partial last tile: wrapped rows or TMA zero rows), 37 groups
    # (no split divides them), M across tiles; mode 1 (exact hi + lo) the same FP64 check.
    N, K = 3001, 128 * 37
    qw, w_exact = weights(N, K, dtype)
    x = rand(M, K, dtype=dtype, seed=12)
    assert_close(int4_linear(x, qw, plan=plan), int4_linear_ref(x, w_exact), msg=f"M={M} {plan}")


def test_int4_tile_fused_split_bit_identical(weights):
    # the in-kernel reduction (atomic tile counters) against the reduction kernel, run to run
    qw, _ = weights(8192, 8192, torch.bfloat16)
    x = rand(64, 8192, dtype=torch.bfloat16, seed=16)
    fused = Int4Plan(block_m=64, block_n=128, split_k=8, num_warps=8, kernel="tile", fused=True)
    plain = dataclasses.replace(fused, fused=False)
    first = int4_linear(x, qw, plan=fused)
    for _ in range(5):
        assert torch.equal(int4_linear(x, qw, plan=fused), first)
    assert torch.equal(int4_linear(x, qw, plan=plain), first)


@pytest.mark.parametrize("group", [32, 64, 256])
def test_int4_other_group_sizes(group, weights):
    N, K = 1024, group * 40
    qw, w_exact = weights(N, K, torch.bfloat16, group)
    for M in (1, 5, 40):
        x = rand(M, K, dtype=torch.bfloat16, seed=M)
        assert_close(int4_linear(x, qw), int4_linear_ref(x, w_exact), msg=f"group={group} M={M}")


@pytest.mark.parametrize(
    "plan",
    [
        None,
        Int4Plan(block_m=16, block_n=64, split_k=8),
        Int4Plan(block_m=1, block_n=64, split_k=16, num_warps=2),
    ],
    ids=["default", "dot-split8", "fma-split16"],
)
def test_int4_split_k_bit_identical_run_to_run(plan, weights):
    qw, w_exact = weights(8192, 8192, torch.bfloat16)
    if plan is None:
        assert Int4Plan.for_shape(1, 8192, 8192, sm_count()).split_k > 1  # the default splits here
    x = rand(1 if plan is None or plan.block_m == 1 else 8, 8192, dtype=torch.bfloat16, seed=13)
    first = int4_linear(x, qw, plan=plan)
    for _ in range(5):
        assert torch.equal(int4_linear(x, qw, plan=plan), first)
    assert_close(first, int4_linear_ref(x, w_exact))


def test_int4_nd_and_strided_x(weights):
    qw, w_exact = weights(4096, 4096, torch.bfloat16)
    x = rand(2, 3, 4096, dtype=torch.bfloat16, seed=14)
    assert_close(int4_linear(x, qw), int4_linear_ref(x, w_exact))
    xs = rand(4, 8192, dtype=torch.bfloat16, seed=15)[:, ::2]
    assert_close(int4_linear(xs, qw), int4_linear_ref(xs, w_exact))


def test_int4_new_batch_size_reuses_compiled_kernels(weights):
    qw, _ = weights(4096, 4096, torch.bfloat16)
    int4_linear(rand(2, 4096, dtype=torch.bfloat16), qw)  # the tensor-core GEMV (M in 2..16)
    torch.cuda.synchronize()

    def count():
        kernels = (int4_mod._int4_mm_kernel, int4_tile._int4_tile_kernel)
        return sum(len(e[0]) for k in kernels for e in k.device_caches.values())

    before = count()
    for M in (3, 7, 12, 16):  # same plan (block_m 16, same split): M is never specialized
        int4_linear(rand(M, 4096, dtype=torch.bfloat16, seed=M), qw)
    assert count() == before


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("M,N,K", [(1, 4096, 4096), (17, 4096, 11008), (256, 11008, 4096)])
def test_int4_grad_input_full_size(M, N, K, dtype, weights):
    qw, w_exact = weights(N, K, dtype)
    g = rand(M, N, dtype=dtype, seed=16)
    dx = int4_linear_grad_input(g, qw)
    assert_close(dx, (g.double() @ w_exact.double()).to(dtype))


# =============================================================================================
# Traceability: the launchers use wrap_triton, so they can sit inside torch.library.triton_op and
# be compiled with fullgraph=True (ops.py does the real registration; this is an early warning).


def test_launchers_trace_under_triton_op_and_compile(weights):
    from torch.library import triton_op

    @triton_op("wgtest_gemm_int4::gemm", mutates_args=())
    def gemm_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return gemm(a, b)

    @triton_op("wgtest_gemm_int4::int4_linear", mutates_args=())
    def int4_op(
        x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group_size: int
    ) -> torch.Tensor:
        return int4_linear_packed(x, packed, scales, group_size)

    qw, w_exact = weights(4096, 4096, torch.bfloat16)
    a = rand(256, 512, dtype=torch.bfloat16, seed=17)
    b = rand(512, 384, dtype=torch.bfloat16, seed=18)
    x = rand(1, 4096, dtype=torch.bfloat16, seed=19)

    @torch.compile(fullgraph=True)
    def f(a, b, x):
        return gemm_op(a, b), int4_op(x, qw.packed, qw.scales, qw.group_size)

    c, y = f(a, b, x)
    assert_close(c, gemm_ref(a, b))
    assert_close(y, int4_linear_ref(x, w_exact))


def test_plan_is_frozen_and_replaceable():
    p = Int4Plan.for_shape(1, 8192, 8192, sm_count())
    assert dataclasses.replace(p, split_k=1).split_k == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.split_k = 2
