"""GEMM on small shapes: runs on the CPU through the Triton interpreter (TRITON_INTERPRET=1) or on
a GPU. The interpreter uses one fixed tile config (32x32x16, GROUP_M=4); shapes below are picked
against it (comments say which branch each one reaches). Full sizes: tests/gpu/test_gemm_int4_gpu.py.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warpgauge._device import interpreter_enabled
from warpgauge.kernels import gemm as gemm_mod
from warpgauge.kernels.gemm import (
    gemm,
    gemm_backward,
    gemm_grad_a,
    gemm_grad_b,
    work,
)
from warpgauge.reference import assert_close, gemm_ref

pytestmark = pytest.mark.skipif(
    not (interpreter_enabled() or torch.cuda.is_available()),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)

DEV = "cpu" if interpreter_enabled() else "cuda"
DTYPES = [torch.float16, torch.bfloat16]


def rand(*shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=DEV)


def ref64(a, b):
    return (a.double() @ b.double()).to(a.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "M,N,K",
    [
        (1, 1, 1),  # everything is a tail: one program, K loop empty, masked K step
        (37, 45, 50),  # partial tiles in M and N, 3 full K steps + a tail of 2
        (32, 32, 32),  # exact tiles: no K tail
        (160, 40, 20),  # 5 row-tiles > GROUP_M=4: the grouped order wraps into a second group
        (3, 70, 9),  # skinny M, K < BLOCK_K (tail only)
    ],
)
def test_gemm_matches_fp64(M, N, K, dtype):
    a, b = rand(M, K, dtype=dtype, seed=1), rand(K, N, dtype=dtype, seed=2)
    c = gemm(a, b)
    assert c.shape == (M, N) and c.dtype == dtype and c.is_contiguous()
    assert_close(c, gemm_ref(a, b), msg=f"{M}x{N}x{K} {dtype}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_transposed_operands_read_through_strides(dtype):
    at = rand(50, 37, dtype=dtype, seed=3)  # a = at.t(): column-major (37, 50)
    w = rand(45, 50, dtype=dtype, seed=4)  # b = w.t(): the F.linear weight layout
    a, b = at.t(), w.t()
    assert not a.is_contiguous() and not b.is_contiguous()
    assert_close(gemm(a, b), ref64(a, b))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_non_unit_strides_both_dims(dtype):
    big_a = rand(80, 90, dtype=dtype, seed=5)
    big_b = rand(120, 70, dtype=dtype, seed=6)
    a = big_a[::2, 1::3]  # (40, 30), strides (180, 3)
    b = big_b[1::4, ::2]  # (30, 35), strides (280, 2)
    assert a.stride() == (180, 3) and b.stride() == (280, 2)
    assert_close(gemm(a, b), ref64(a, b))


def test_gemm_broadcast_zero_stride_operand():
    row = rand(1, 33, dtype=torch.float16, seed=7)
    a = row.expand(20, 33)  # stride (0, 1)
    b = rand(33, 17, dtype=torch.float16, seed=8)
    assert_close(gemm(a, b), ref64(a, b))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_writes_every_element_of_preallocated_out(dtype):
    a, b = rand(37, 50, dtype=dtype, seed=9), rand(50, 45, dtype=dtype, seed=10)
    out = torch.full((37, 45), float("nan"), dtype=dtype, device=DEV)
    res = gemm(a, b, out=out)
    assert res is out
    assert_close(out, gemm_ref(a, b))


def test_gemm_strided_out():
    a, b = rand(20, 24, dtype=torch.float16, seed=11), rand(24, 36, dtype=torch.float16, seed=12)
    buf = torch.full((36, 20), float("nan"), dtype=torch.float16, device=DEV)
    out = buf.t()  # (20, 36) column-major
    gemm(a, b, out=out)
    assert_close(out, gemm_ref(a, b))


def test_gemm_fp16_rounds_once_to_nearest_even():
    # Integer products sum exactly in FP32; the results need FP16 rounding (spacing 2 above 2048,
    # 4 above 4096), including ties, which must go to the even neighbour.
    cols = {
        2049.0: ([2047, 2], 2048.0),  # tie -> even
        2051.0: ([2047, 4], 2052.0),  # tie -> even
        2050.0: ([2047, 3], 2050.0),  # exact
        4099.0: ([2047, 2048, 4], 4100.0),  # nearest
        4098.0: ([2047, 2048, 3], 4096.0),  # tie -> even
    }
    K = 40
    a = torch.ones(3, K, dtype=torch.float16, device=DEV)
    b = torch.zeros(K, len(cols), dtype=torch.float16, device=DEV)
    for j, (parts, _) in enumerate(cols.values()):
        b[: len(parts), j] = torch.tensor(parts, dtype=torch.float16)
    assert b.double().sum(0).tolist() == list(cols)
    c = gemm(a, b)
    assert torch.equal(c, gemm_ref(a, b))
    assert c[0].tolist() == [want for _, want in cols.values()]


def test_gemm_degenerate_sizes():
    a, b = rand(0, 5, dtype=torch.float16), rand(5, 7, dtype=torch.float16)
    assert gemm(a, b).shape == (0, 7)
    a, b = rand(3, 0, dtype=torch.bfloat16), rand(0, 4, dtype=torch.bfloat16)
    out = torch.full((3, 4), float("nan"), dtype=torch.bfloat16, device=DEV)
    gemm(a, b, out=out)
    assert torch.equal(out, torch.zeros_like(out))  # the empty sum


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    M=st.integers(1, 70),
    N=st.integers(1, 70),
    K=st.integers(1, 40),
    ta=st.booleans(),
    tb=st.booleans(),
    dtype=st.sampled_from(DTYPES),
)
def test_gemm_property_any_shape_any_layout(M, N, K, ta, tb, dtype):
    a = rand(K, M, dtype=dtype, seed=M).t() if ta else rand(M, K, dtype=dtype, seed=M)
    b = rand(N, K, dtype=dtype, seed=N).t() if tb else rand(K, N, dtype=dtype, seed=N)
    assert_close(gemm(a, b), ref64(a, b), msg=f"{M}x{N}x{K} ta={ta} tb={tb}")


# ---- backward


@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_backward_both(dtype):
    M, K, N = 37, 50, 45
    a = rand(M, K, dtype=dtype, seed=13)
    w = rand(N, K, dtype=dtype, seed=14)
    b = w.t()  # the linear-layer case: B is a transposed view
    g = rand(M, N, dtype=dtype, seed=15)
    da, db = gemm_backward(g, a, b, needs_a=True, needs_b=True)
    assert da.shape == a.shape and db.shape == b.shape
    assert da.dtype == db.dtype == dtype
    assert_close(da, ref64(g, b.t()), msg="dA")
    assert_close(db, ref64(a.t(), g), msg="dB")


def test_gemm_backward_only_what_is_needed():
    a, b = rand(9, 20, dtype=torch.float16, seed=16), rand(20, 11, dtype=torch.float16, seed=17)
    g = rand(9, 11, dtype=torch.float16, seed=18)
    da, db = gemm_backward(g, a, b, needs_a=True, needs_b=False)
    assert db is None
    assert_close(da, ref64(g, b.t()))
    da, db = gemm_backward(g, a, b, needs_a=False, needs_b=True)
    assert da is None
    assert_close(db, ref64(a.t(), g))
    assert gemm_backward(g, a, b, needs_a=False, needs_b=False) == (None, None)


def test_gemm_single_gradient_launchers():
    a, w = rand(12, 40, dtype=torch.bfloat16, seed=22), rand(30, 40, dtype=torch.bfloat16, seed=23)
    g = rand(12, 30, dtype=torch.bfloat16, seed=24)
    assert_close(gemm_grad_a(g, w.t()), ref64(g, w))
    assert_close(gemm_grad_b(g, a), ref64(a.t(), g))
    with pytest.raises(ValueError, match=r"grad_out.shape\[1\] \(30\) must equal b.shape\[1\]"):
        gemm_grad_a(g, w)
    with pytest.raises(ValueError, match=r"grad_out.shape\[0\] \(12\) must equal a.shape\[0\]"):
        gemm_grad_b(g, a.t())


def test_gemm_backward_matches_autograd_fp64():
    a = rand(17, 21, dtype=torch.bfloat16, seed=19)
    b = rand(21, 13, dtype=torch.bfloat16, seed=20)
    g = rand(17, 13, dtype=torch.bfloat16, seed=21)
    a64 = a.double().requires_grad_()
    b64 = b.double().requires_grad_()
    (a64 @ b64).backward(g.double())
    da, db = gemm_backward(g, a, b)
    assert_close(da, a64.grad.to(a.dtype))
    assert_close(db, b64.grad.to(b.dtype))


def test_gemm_backward_zero_tokens():
    a, b = rand(0, 6, dtype=torch.float16), rand(6, 5, dtype=torch.float16)
    g = rand(0, 5, dtype=torch.float16)
    da, db = gemm_backward(g, a, b)
    assert da.shape == (0, 6)
    assert torch.equal(db, torch.zeros(6, 5, dtype=torch.float16, device=DEV))


# ---- helpers


def test_work_model():
    w = work(4096, 4096, 4096, torch.bfloat16)
    assert w.bytes == 3 * 4096 * 4096 * 2
    assert w.flops == 2 * 4096**3
    w = work(3, 5, 7, torch.float16)
    assert w.bytes == (21 + 35 + 15) * 2 and w.flops == 210


def test_bucket_and_layout_keys():
    assert [gemm_mod._bucket(m) for m in (1, 2, 3, 1000, 1024, 1025, 10**6)] == [
        1, 2, 4, 1024, 1024, 2048, gemm_mod.M_BUCKET_MAX,
    ]  # fmt: skip
    a = torch.empty(8, 4, dtype=torch.float16)
    b = torch.empty(4, 6, dtype=torch.float16)
    assert gemm_mod._layout(a, b) == 0b0101  # A along K, B along N
    assert gemm_mod._layout(a.t().contiguous().t(), b.t().contiguous().t()) == 0b1010


# ---- errors


def _ab(dtype=torch.float16):
    return rand(4, 6, dtype=dtype), rand(6, 5, dtype=dtype)


def test_error_non_tensor():
    a, b = _ab()
    with pytest.raises(TypeError, match="a must be a torch.Tensor"):
        gemm([[1.0]], b)
    with pytest.raises(TypeError, match="b must be a torch.Tensor"):
        gemm(a, 3.0)


def test_error_cpu_without_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    a, b = torch.randn(4, 6).half(), torch.randn(6, 5).half()
    with pytest.raises(ValueError, match=r"a is a CPU tensor.*\.cuda\(\)"):
        gemm(a, b)


def test_error_dims():
    a, b = _ab()
    with pytest.raises(ValueError, match="a must be 2-D"):
        gemm(a.reshape(2, 2, 6), b)
    with pytest.raises(ValueError, match="b must be 2-D"):
        gemm(a, b.reshape(-1))


def test_error_inner_dims_name_the_shapes():
    a, _ = _ab()
    b = rand(7, 5, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"a is \(4, 6\) and b is \(7, 5\)"):
        gemm(a, b)


def test_error_dtype_mismatch_and_fp32():
    a, b = _ab()
    with pytest.raises(TypeError, match="cast one"):
        gemm(a, b.to(torch.bfloat16))
    with pytest.raises(TypeError, match=r"float32.*supported: float16, bfloat16.*\.to\("):
        gemm(a.float(), b.float())


def test_error_mismatched_devices():
    a, b = _ab()
    with pytest.raises(ValueError, match="same device"):
        gemm(a, torch.empty(6, 5, dtype=torch.float16, device="meta"))


def test_error_out_shape_dtype_overlap():
    a, b = _ab()
    with pytest.raises(ValueError, match=r"out has shape \(5, 4\).*\(4, 5\)"):
        gemm(a, b, out=torch.empty(5, 4, dtype=torch.float16, device=DEV))
    with pytest.raises(TypeError, match="out has dtype bfloat16"):
        gemm(a, b, out=torch.empty(4, 5, dtype=torch.bfloat16, device=DEV))
    sq = rand(5, 5, dtype=torch.float16)
    with pytest.raises(ValueError, match="out shares memory with a"):
        gemm(sq, sq.clone(), out=sq)


def test_error_backward_shapes():
    a, b = _ab()
    with pytest.raises(ValueError, match="grad_out must be"):
        gemm_backward(rand(4, 6, dtype=torch.float16), a, b)
    with pytest.raises(TypeError, match="cast one"):
        gemm_backward(rand(4, 5, dtype=torch.bfloat16), a, b)


# ---- paths (issue 11): skinny split-K, TMA descriptors, pointer kernel with alignment hints


@pytest.fixture
def force_path(monkeypatch):
    def force(path):
        monkeypatch.setattr(gemm_mod, "FORCE_PATH", path)

    return force


def _linear_operands(M, N, K, dtype, seed=0):
    """x (M, K) row-major and b = w.t() for w (N, K): the F.linear layout."""
    return rand(M, K, dtype=dtype, seed=seed), rand(N, K, dtype=dtype, seed=seed + 1).t()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "M,N,K,split",
    [
        (1, 45, 200, 3),  # one token, odd N, a K tail inside the last split (200 = 12*16 + 8)
        (5, 64, 96, 1),  # no split: the program rounds and stores C itself
        (16, 70, 130, 4),  # split ranges of 3 steps + a 2-element tail; 3 N-tiles, wrapped rows
        (33, 32, 64, 8),  # 8 splits of 8 elements... more splits than 16-wide steps: empty splits
        (64, 50, 48, 2),  # the largest skinny M: one 64-wide token tile
    ],
)
def test_skinny_split_k_matches_fp64(M, N, K, split, dtype):
    a, b = _linear_operands(M, N, K, dtype, seed=M)
    plan = gemm_mod.skinny.SkinnyPlan(max(16, 1 << (M - 1).bit_length()), 32, 16, split)
    c = torch.full((M, N), float("nan"), dtype=dtype, device=DEV)
    gemm_mod._launch_skinny(a, b, c, upcast=dtype == torch.bfloat16 and DEV == "cpu", plan=plan)
    assert_close(c, ref64(a, b), msg=f"{M}x{N}x{K} split={split}")


def test_skinny_split_k_is_bit_identical_run_to_run():
    a, b = _linear_operands(7, 40, 256, torch.float16, seed=3)
    plan = gemm_mod.skinny.SkinnyPlan(16, 32, 16, 5)  # 5 splits of 4 steps (the last one short)
    outs = []
    for _ in range(3):
        c = torch.full((7, 40), float("nan"), dtype=torch.float16, device=DEV)
        gemm_mod._launch_skinny(a, b, c, upcast=False, plan=plan)
        outs.append(c)
    assert all(torch.equal(o, outs[0]) for o in outs)
    assert_close(outs[0], ref64(a, b))


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "strided_out"])
def test_default_path_skinny_for_few_tokens(layout):
    M, N, K = 9, 37, 77
    a = (
        rand(K, M, dtype=torch.float16, seed=4).t()
        if layout == "TN"
        else rand(M, K, dtype=torch.float16, seed=4)
    )
    b = (
        rand(N, K, dtype=torch.float16, seed=5).t()
        if layout == "NT"
        else rand(K, N, dtype=torch.float16, seed=5)
    )
    out = None
    if layout == "strided_out":
        out = torch.full((N, M), float("nan"), dtype=torch.float16, device=DEV).t()
    assert gemm_mod._path(a, b, torch.empty(M, N), "m") == "skinny"
    assert_close(gemm(a, b, out=out), ref64(a, b), msg=layout)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "M,N,K,layout",
    [
        (70, 40, 24, "NN"),  # partial tiles in M, N and K: TMA zero-fills and clips them
        (67, 48, 56, "NT"),  # B = w.t(): a transposed box
        (72, 104, 40, "TN"),  # A = x.t(), M contiguous
        (72, 40, 24, "TT"),  # both transposed; M = 72 keeps the A^T rows 16-byte aligned
        (66, 56, 40, "sliced"),  # rows of a wider buffer, 16-byte aligned offset and stride
    ],
)
def test_tma_path_matches_fp64(M, N, K, layout, dtype):
    if layout == "sliced":
        a = rand(M, K + 16, dtype=dtype, seed=6)[:, 8 : 8 + K]
        b = rand(K, N + 8, dtype=dtype, seed=7)[:, :N]
    else:
        a = (
            rand(K, M, dtype=dtype, seed=6).t()
            if layout[0] == "T"
            else rand(M, K, dtype=dtype, seed=6)
        )
        b = (
            rand(N, K, dtype=dtype, seed=7).t()
            if layout[1] == "T"
            else rand(K, N, dtype=dtype, seed=7)
        )
    c = torch.empty(M, N, dtype=dtype, device=DEV)
    assert gemm_mod._path(a, b, c, "m") == "tma"
    assert_close(gemm(a, b), ref64(a, b), msg=layout)


def test_tma_not_taken_for_unaligned_rows():
    a, b = rand(70, 45, dtype=torch.float16), rand(45, 40, dtype=torch.float16)  # stride 45: 90 B
    assert gemm_mod._path(a, b, torch.empty(70, 40, dtype=torch.float16), "m") == "tile"


@pytest.mark.parametrize(
    "M,N,K",
    [
        (70, 72, 40),  # N and K = 8 mod 16: strides get the 16-byte hint (bits 1, 2, 4, 7)
        (66, 45, 51),  # odd: no hints, scalar loads
    ],
)
def test_pointer_path_with_alignment_hints(M, N, K, force_path):
    force_path("tile")
    a, b = rand(M, K, dtype=torch.float16, seed=8), rand(K, N, dtype=torch.float16, seed=9)
    c = torch.empty(M, N, dtype=torch.float16, device=DEV)
    h = gemm_mod.hints(a, b, c)
    assert (h != 0) == (N % 16 == 8)
    assert_close(gemm(a, b), ref64(a, b))
    _, db = gemm_backward(rand(M, N, dtype=torch.float16, seed=10), a, b, needs_a=False)
    assert_close(db, ref64(a.t(), rand(M, N, dtype=torch.float16, seed=10)))


def test_hints_bits():
    a = torch.empty(80, 24, dtype=torch.float16)  # stride(0) 24 = 8 mod 16
    b = torch.empty(24, 40, dtype=torch.float16)  # stride(0) 40
    c = torch.empty(80, 40, dtype=torch.float16)
    assert gemm_mod.hints(a, b, c) == 0b1 | 0b100 | 0b10000 | 0b10000000
    assert gemm_mod.hints(a, b, c, "k") == gemm_mod.hints(a, b, c)  # M = 80 is 0 mod 16
    a2 = torch.empty(72, 24, dtype=torch.float16)
    assert gemm_mod.hints(a2, b, torch.empty(72, 40, dtype=torch.float16), "k") & 64
    assert gemm_mod.hints(a2, b, torch.empty(72, 40, dtype=torch.float16), "m") & 64 == 0


def test_skinny_plan_rule():
    P = gemm_mod.skinny.SkinnyPlan
    p = P.for_shape(1, 4096, 4096, 132)  # 64 tiles of 64 rows: 4 splits = 256 programs
    assert (p.block_m, p.block_n, p.block_k, p.split_k, p.num_stages) == (16, 64, 128, 4, 4)
    p = P.for_shape(1, 14336, 4096, 132)  # wide N: 128-row tiles, 112 of them, 2 splits
    assert (p.block_n, p.split_k, p.num_stages) == (128, 2, 3)
    p = P.for_shape(64, 4096, 4096, 132)  # 64 tokens: 1 program per SM
    assert (p.block_m, p.split_k) == (64, 2)
    assert P.for_shape(1, 1024, 8192, 132).split_k == 16  # 16 tiles; 64 K steps: 4 per split
    assert P.for_shape(3, 64, 64, 132).split_k == 1  # too little K to split
    assert p.steps_per_split(4096) * p.block_k * p.split_k >= 4096


@pytest.mark.parametrize(
    "M,N,K,layout",
    [
        (70, 45, 51, "NN"),  # every row unaligned: A, B and C are padded copies
        (66, 40, 37, "NT"),  # K odd: A and B = w.t() (its column-major copy keeps the swap)
        (67, 37, 48, "TN"),  # A = x.t() with M odd; N odd: C padded and copied back
    ],
)
def test_pad_path_for_unaligned_rows(M, N, K, layout, monkeypatch):
    monkeypatch.setattr(gemm_mod, "PAD_MIN_WORK", 0)
    a = (
        rand(K, M, dtype=torch.float16, seed=11).t()
        if layout[0] == "T"
        else rand(M, K, dtype=torch.float16, seed=11)
    )
    b = (
        rand(N, K, dtype=torch.float16, seed=12).t()
        if layout[1] == "T"
        else rand(K, N, dtype=torch.float16, seed=12)
    )
    c = torch.full((M, N), float("nan"), dtype=torch.float16, device=DEV)
    assert gemm_mod._path(a, b, c, "m") == "pad"
    a0, b0 = a.clone(), b.clone()
    gemm(a, b, out=c)
    assert_close(c, ref64(a, b), msg=layout)
    assert torch.equal(a, a0) and torch.equal(b, b0)  # the copies never write the operands
    strided = torch.full((N, M), float("nan"), dtype=torch.float16, device=DEV).t()
    assert gemm_mod._path(a, b, strided, "m") == "tile"  # column-major C: pointer kernel


def test_pad_path_for_a_sliced_base_when_big(monkeypatch):
    # 16-byte aligned rows but a base off its 128-byte line (a[:, 8:]): padded copy when big
    monkeypatch.setattr(gemm_mod, "PAD_MIN_WORK", 0)
    a = rand(70, 72, dtype=torch.float16, seed=13)[:, 8:]  # (70, 64), stride 72, base + 16 B
    b = rand(64, 48, dtype=torch.float16, seed=14)
    c = torch.empty(70, 48, dtype=torch.float16, device=DEV)
    assert gemm_mod._path(a, b, c, "m") == "pad"
    assert_close(gemm(a, b), ref64(a, b))
    monkeypatch.setattr(gemm_mod, "PAD_MIN_WORK", 1 << 30)
    assert gemm_mod._path(a, b, c, "m") == "tma"  # small: TMA in place


def test_tma_config_rule():
    T = gemm_mod.tma
    assert T.choose(4096, 4096, 132) is T.WIDE_FLAT  # 512 tiles: 4 waves either way; K <= 4096
    assert T.choose(4096, 4096, 132, T.k_class(8192)) is T.WIDE  # long K: the plain loop
    assert T.choose(4096, 4104, 132) is T.TALL_FLAT  # 128x256: 544 tiles, 5 waves; 256x128: 4
    assert T.choose(4096, 4104, 132, 16384) is T.TALL
    # column-major A (dB = A^T dC): the swapped product in 128x256 tiles, stored transposed
    assert T.choose(4096, 4104, 132, a_t=True) is T.WIDE_FLAT_T
    assert T.choose(4096, 4104, 132, 16384, a_t=True) is T.TALL  # long K: the plain loop
    assert T.choose(4096, 4096, 132, a_t=True) is T.WIDE_FLAT  # wide tiles win: no swap
    assert T.choose(1024, 1024, 132) is T.NARROW  # under half a wave: 128 tiles of 64x128
    assert T.choose(128, 4096, 132) is T.NARROW  # 64 tiles of 64x128
    assert T.choose(256, 256, 132) is T.TINY  # 8 tiles of 64x128 < 132 / 8: 64x32 instead
    assert T.choose(512, 4096, 132) is T.MID  # 256 tiles of 64x128 > one wave: 128 of 128x128
    assert T.choose(2048, 2048, 132) is T.WIDE_FLAT  # 128 tiles: one wave
    assert T.choose(2048, 2056, 132) is T.MID  # 144 wide tiles: 2 waves; 272 mid: 3 half-cost
    assert T.choose(4096, 14336, 132) is T.WIDE_FLAT
    assert T.choose(4096, 1024, 132) is T.WIDE_FLAT  # 16384x1024x1024 has M bucket 4096
    assert T.choose(1024, 1024, 66) is T.MID  # half the SMs: 64x128 tiles no longer fit a wave
    assert [T.k_class(k) for k in (1, 100, 4096, 4097, 8192, 14336)] == [1, 128, 4096] + [8192] * 3
