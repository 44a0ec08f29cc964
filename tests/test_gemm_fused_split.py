"""gemm11b paths (issue 11): split-K reduced inside ``split_kernel`` by the last split of each tile
(an atomic counter per tile, fixed-order sums), and the "line" path (an NT product whose operands
both have rows off 128-byte lines: the smaller one copied onto lines first). Small shapes through
the Triton interpreter (CPU; FP16/FP32 products, its BF16 dot is wrong) or a GPU, against FP64
references on NaN-poisoned outputs."""

from __future__ import annotations

import pytest
import torch

from warpgauge._device import interpreter_enabled
from warpgauge.kernels import gemm as gemm_mod
from warpgauge.kernels import gemm_persistent as gp
from warpgauge.kernels.gemm import gemm, gemm_grad_a, gemm_grad_b
from warpgauge.reference import assert_close

pytestmark = pytest.mark.skipif(
    not (interpreter_enabled() or torch.cuda.is_available()),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)
DEV = "cpu" if interpreter_enabled() else "cuda"
T = gemm_mod.tma
META = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, num_warps=4, num_stages=2)


def rand(*shape, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=DEV)


def ref64(a, b):
    return (a.double() @ b.double()).to(a.dtype)


def nan_out(M, N, dtype=torch.float16):
    return torch.full((M, N), float("nan"), dtype=dtype, device=DEV)


@pytest.mark.parametrize(
    "M,N,K,layout,split",
    [
        (70, 72, 88, "NN", 2),  # 3x3 tiles, ragged last row / column, 6 K steps
        (72, 80, 88, "TN", 3),  # A = x.t() (dB's layout); the last split is short
        (64, 40, 104, "NT", 8),  # 8 splits of 7 K steps: the last split is empty (zeros)
    ],
)
def test_fused_split_matches_fp64_and_the_two_launch_bits(M, N, K, layout, split):
    a = rand(K, M, seed=M).t() if layout[0] == "T" else rand(M, K, seed=M)
    b = rand(N, K, seed=N).t() if layout[1] == "T" else rand(K, N, seed=N)
    fused, plain = nan_out(M, N), nan_out(M, N)
    gp.run_split(a, b, fused, META, split, fused=True)
    gp.run_split(a, b, plain, META, split)
    assert_close(fused, ref64(a, b), msg=f"{layout} split {split}")
    assert torch.equal(fused, plain)  # the same sums in the same order: the same bits
    cnt = gp.counters(a.device)
    assert int(cnt.abs().sum()) == 0  # every reducing program reset its counter
    again = nan_out(M, N)
    gp.run_split(a, b, again, META, split, fused=True)  # the reset counters are reusable
    assert torch.equal(again, fused)


def test_fused_split_writes_only_its_tiles_into_a_strided_c():
    a, b = rand(64, 80, seed=1), rand(80, 96, seed=2)  # 2x3 tiles, tiles 2, 3, 4 split
    wide = nan_out(64, 104)
    c = wide[:, 3:99]  # rows 104 long, base off 16 bytes: the pointer store takes any C
    gp.run_split(a, b, c, META, 3, tile0=2, tiles=3, fused=True)
    written = ~torch.isnan(c)
    assert written.sum() == 3 * 32 * 32
    assert torch.isnan(wide[:, :3]).all() and torch.isnan(wide[:, 99:]).all()
    assert_close(c[written], ref64(a, b)[written])


@pytest.mark.parametrize("fused", [False, True])
def test_split_dispatch_passes_the_fused_switch(fused, monkeypatch):
    # the rule runs the two-launch reduction (SPLIT_FUSED = False: fused lost on the H200); the
    # switch still reaches run_split, and both give the FP64 answer with bit-identical repeats
    monkeypatch.setattr(T, "SPLIT_MIN_K", 1)
    monkeypatch.setattr(T, "SPLIT_MIN_STEPS", 1)
    monkeypatch.setattr(gemm_mod, "SPLIT_FUSED", fused)
    a, dc = rand(333, 64, seed=3), rand(333, 24, seed=4)
    seen = []
    real = gp.run_split
    monkeypatch.setattr(gp, "run_split", lambda *x, **kw: seen.append(kw) or real(*x, **kw))
    db = gemm_grad_b(dc, a)
    assert seen and seen[0]["fused"] is fused
    assert_close(db, ref64(a.t(), dc))
    assert torch.equal(db, gemm_grad_b(dc, a))  # bit-identical run to run


def test_split_fused_is_off_by_rule():
    assert gemm_mod.SPLIT_FUSED is False


def _meta(*shape):
    return torch.empty(*shape, dtype=torch.bfloat16, device="meta")


def test_line_rule_class_operand_and_cost_model():
    # dA = dC B^T of a layer with N = 4104: both operands contiguous along K = 4104 (8208-byte
    # rows, 16- but not 128-byte multiples). 128x256 tiles: B's 256 rows carry 2/3 of the gap,
    # so B is copied (measured: B 213.0 us, A 226.7, neither 228.9)
    dc, w = _meta(4096, 4104), _meta(4096, 4104)
    assert gp.line_choice(dc, w.t(), 128, 256) == "b"
    assert gp.line_choice(dc, w.t(), 256, 128) == "a"  # a 256x128 tile: A's rows dominate
    small = _meta(512, 520)  # the same class at 1/64 of the work: no copy pays
    assert gp.line_choice(small, small.t(), 128, 256) is None
    # one operand on lines (K = 4096 rows), or an operand not contiguous along K: not the class
    assert gp.line_choice(_meta(4096, 4096), _meta(4096, 4096).t(), 128, 256) is None
    assert gp.line_choice(dc, _meta(4104, 4096), 128, 256) is None  # B contiguous along N
    assert gp.line_choice(_meta(4104, 4096).t(), w.t(), 128, 256) is None  # A contiguous in M


def test_line_operand_follows_the_tma_rule_tile(monkeypatch):
    dc, w = _meta(4096, 4104), _meta(4096, 4104)
    monkeypatch.setattr(gemm_mod, "device_info", lambda d: type("I", (), {"sm_count": 132}))
    assert gemm_mod._line_operand(dc, w.t(), "m") == "b"  # K class 8192: WIDE (128x256)


@pytest.mark.parametrize("which", ["a", "b"])
def test_line_padded_keeps_the_view_on_128_byte_rows(which):
    src = rand(40, 72, seed=5)  # 144-byte rows
    t = src if which == "a" else src.t()
    p = gp.line_padded(t)
    assert p.shape == t.shape and torch.equal(p, t)
    row = p.stride(0) if p.stride(1) == 1 else p.stride(1)
    assert (row * p.element_size()) % 128 == 0 and p.data_ptr() % 128 == 0
    assert p.stride(1 if which == "a" else 0) == 1  # the same major order


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M,N,K,copy", [(72, 40, 72, "a"), (80, 96, 88, "b"), (96, 72, 200, "a")])
def test_line_path_matches_fp64(M, N, K, copy, dtype, monkeypatch):
    # an NT product (dA = dC B^T) with K = 8 mod 64: rows of 144 / 176 / 400 bytes; M > 64 (not
    # skinny); the operand the rule picks is forced either way to reach both branches
    monkeypatch.setattr(gemm_mod, "FORCE_PATH", "line")
    monkeypatch.setattr(gemm_mod, "_line_operand", lambda a, b, td: copy)
    copies = []
    real = gp.copy_rows
    monkeypatch.setattr(gp, "copy_rows", lambda s, d: copies.append(s.shape) or real(s, d))
    dc, w = rand(M, K, dtype=dtype, seed=M), rand(N, K, dtype=dtype, seed=N)
    out = gemm(dc, w.t())
    assert copies == [(M, K) if copy == "a" else (N, K)]  # one copy, of the chosen operand
    assert_close(out, ref64(dc, w.t()), msg=f"{M}x{N}x{K}")
    da = gemm_grad_a(dc, w)  # the backward entry point: dc @ w^T, the same NT product
    assert_close(da, ref64(dc, w.t()))
    assert torch.equal(da, out)


def _on_line(R, C, extra=0, seed=0):
    """An (R, C) row-major view with row stride C + extra whose base is 128-byte aligned."""
    flat = rand(R * (C + extra) + 64, seed=seed)
    skip = (-flat.data_ptr() % 128) // flat.element_size()
    return flat[skip : skip + R * (C + extra)].view(R, C + extra)[:, :C]


@pytest.mark.parametrize(
    "C,extra,vec",
    [(72, 0, 8), (72, 56, 8), (45, 3, 1), (72, 4, 1)],  # 16-byte rows vectorize; the rest not
)
def test_copy_rows_vector_class_and_values(C, extra, vec, monkeypatch):
    src = _on_line(37, C, extra, seed=C + extra)
    dst = gp.line_padded(src) if vec > 1 else torch.full_like(src, float("nan"))
    seen = []
    real = gp.launch
    monkeypatch.setattr(gp, "launch", lambda *x, **kw: seen.append(kw["VEC"]) or real(*x, **kw))
    dst.fill_(float("nan"))
    gp.copy_rows(src, dst)
    assert seen == [vec]
    assert torch.equal(dst, src)


def test_skinny_128_plan_for_the_split_class(monkeypatch):
    # 65..128 tokens where the TMA rule splits K: 128 tokens x 128 rows of B^T per program, 4
    # splits over 32 tiles on 132 SMs (the measured plan of fwd 128x4096x14336)
    plan = gemm_mod.skinny.SkinnyPlan.for_shape(128, 4096, 14336, 132)
    assert (plan.block_m, plan.block_n, plan.block_k, plan.split_k) == (128, 128, 64, 4)
    assert (plan.num_warps, plan.num_stages) == (8, 4)
    assert gemm_mod.skinny.SkinnyPlan.for_shape(100, 4096, 14336, 33).split_k == 1  # 32 tiles
    monkeypatch.setattr(gemm_mod, "device_info", lambda d: type("I", (), {"sm_count": 132}))
    x, w = _meta(128, 14336), _meta(14336, 4096)
    assert gemm_mod._split_class(x, w)
    assert not gemm_mod._split_class(_meta(128, 4096), _meta(4096, 4096))  # K class 4096
    assert not gemm_mod._split_class(_meta(4096, 14336), w)  # many tiles: no split


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("M", [65, 128])
def test_skinny_128_dispatch_matches_fp64(M, dtype, monkeypatch):
    # the split class reached with small sizes (SPLIT_MIN_K / SPLIT_MIN_STEPS lowered): 65 and
    # 128 tokens take the skinny kernel with 128 tokens per program, split K, fixed-order sums
    monkeypatch.setattr(T, "SPLIT_MIN_K", 1)
    monkeypatch.setattr(T, "SPLIT_MIN_STEPS", 1)
    x, w = rand(M, 200, dtype=dtype, seed=M), rand(200, 40, dtype=dtype, seed=7)
    assert gemm_mod._path(x, w, torch.empty(M, 40, dtype=dtype), "m") == "skinny"
    plans = []
    real = gemm_mod._launch_skinny
    monkeypatch.setattr(gemm_mod, "_launch_skinny", lambda *a: plans.append(a) or real(*a))
    out = torch.full((M, 40), float("nan"), dtype=dtype, device=DEV)
    gemm(x, w, out=out)
    assert plans
    assert_close(out, ref64(x, w), msg=f"M={M}")
    assert torch.equal(gemm(x, w), out)
    # the dA of a layer with M tokens (tokens in M, an NT product) takes the same path
    xt = rand(40, 200, dtype=dtype, seed=9)
    assert_close(gemm_grad_a(x, xt), ref64(x, xt.t()))
