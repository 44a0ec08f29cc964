"""The TMA GEMM schedules of ``gemm_persistent`` (persistent v2, split-K, whole waves + split tail, padded
copies) against FP64, on small shapes under the Triton interpreter (or a GPU). Blocks are 32x32x16
so a few dozen rows already make several tiles, several K steps and partial edge tiles."""

from __future__ import annotations

import pytest
import torch
import triton

from warpgauge._device import interpreter_enabled
from warpgauge.kernels import gemm_persistent as gp
from warpgauge.kernels import gemm_tma as tm
from warpgauge.reference import assert_close

pytestmark = pytest.mark.skipif(
    not (interpreter_enabled() or torch.cuda.is_available()),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)
DEV = "cpu" if interpreter_enabled() else "cuda"
META = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, num_warps=4, num_stages=2)
UPCAST = interpreter_enabled()  # the interpreter's BF16 tl.dot is wrong: FP32 products (exact)


def rand(*shape, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=DEV)


def operands(M, N, K, layout, dtype=torch.float16, seed=0):
    a = (
        rand(K, M, dtype=dtype, seed=seed).t()
        if layout[0] == "T"
        else rand(M, K, dtype=dtype, seed=seed)
    )
    b = (
        rand(N, K, dtype=dtype, seed=seed + 1).t()
        if layout[1] == "T"
        else rand(K, N, dtype=dtype, seed=seed + 1)
    )
    return a, b


def ref64(a, b):
    return (a.double() @ b.double()).to(a.dtype)


def nan_out(M, N, dtype=torch.float16):
    return torch.full((M, N), float("nan"), dtype=dtype, device=DEV)


@pytest.mark.parametrize("flags", ["", "f", "fs", "fc", "fw", "s"])
@pytest.mark.parametrize(
    "M,N,K,layout,sms",
    [
        (72, 80, 88, "NN", 4),  # 3x3 tiles (partial last row/column), 6 K steps: 4 programs loop
        (64, 96, 40, "NT", 5),  # B = w.t(): transposed boxes; K tail of 8 (zero-filled)
        (80, 48, 56, "TN", 2),  # A = x.t() (M = 80 keeps its rows 16-byte aligned)
    ],
)
def test_persistent_v2_matches_fp64(M, N, K, layout, sms, flags):
    a, b = operands(M, N, K, layout, seed=M)
    c = nan_out(M, N)
    meta = dict(
        META, FLATTEN="f" in flags, WS="w" in flags, SUBTILE="s" in flags, C_PTR="c" in flags
    )
    gp.run_persistent(a, b, c, meta, sms)
    assert_close(c, ref64(a, b), msg=f"{layout} {flags}")


def test_persistent_v2_bf16_and_pointer_store_on_odd_n():
    # C_PTR: a C of 45 columns (90-byte rows) that no TMA descriptor could address
    a, b = operands(40, 45, 32, "NT", dtype=torch.bfloat16, seed=3)
    assert tm.aligned(a) and tm.aligned(b) and not tm.aligned(nan_out(40, 45))
    c = nan_out(40, 45, torch.bfloat16)
    gp.run_persistent(a, b, c, dict(META, FLATTEN=True, C_PTR=True), 3, upcast=UPCAST)
    assert_close(c, ref64(a, b))


def test_persistent_v2_tile_end_writes_only_its_tiles():
    a, b = operands(64, 64, 32, "NN", seed=4)
    c = nan_out(64, 64)
    gp.run_persistent(a, b, c, META, 2, tile_end=3)  # tiles 0..2 of 4 (grouped order)
    ref = ref64(a, b)
    written = ~torch.isnan(c)
    assert written.sum() == 3 * 32 * 32
    assert torch.isnan(c[32:, 32:]).all()  # tile 3 in grouped order (GROUP_M=8: column-major)
    assert_close(c[written], ref[written])


@pytest.mark.parametrize("split", [1, 2, 3, 8])  # 8 > the 6 K steps: the last splits are empty
def test_split_k_matches_fp64(split):
    a, b = operands(70, 72, 88, "NN", seed=5)
    c = nan_out(70, 72)
    gp.run_split(a, b, c, META, split)
    assert_close(c, ref64(a, b), msg=f"split {split}")


@pytest.mark.parametrize("layout", ["TN", "NT"])
def test_split_k_warp_specialized_matches_fp64_and_plain_bits(layout):
    # WS (the split's K loop warp-specialized, a dB candidate) changes the schedule, not the sums:
    # the same K steps in the same order, so the bits equal the plain loop's
    a, b = operands(72, 80, 88, layout, seed=9)  # rows of 8 elements: TMA-eligible either way
    c_ws, c_plain = nan_out(72, 80), nan_out(72, 80)
    gp.run_split(a, b, c_ws, dict(META, WS=True), 3)
    gp.run_split(a, b, c_plain, META, 3)
    assert_close(c_ws, ref64(a, b), msg=f"WS split {layout}")
    assert torch.equal(c_ws, c_plain)


@pytest.mark.parametrize("layout", ["NN", "TN", "NT", "TT"])
@pytest.mark.parametrize("flags", ["", "f"])
def test_transposed_product_matches_fp64(layout, flags):
    # c = a @ b as c^T = b^T a^T with tiles stored transposed (C_T): N = 72 is 2 whole 32-row
    # tiles of the swapped product plus a ragged third (the N = 8 mod 16 case in small)
    a, b = operands(80, 72, 56, layout, seed=11)
    c = nan_out(80, 72)
    meta = dict(META, FLATTEN="f" in flags)
    gp.run_transposed(a, b, c, meta, 3, upcast=UPCAST and a.dtype == torch.bfloat16)
    assert_close(c, ref64(a, b), msg=f"{layout} {flags}")


def test_split_k_tile_subset_and_bit_identical():
    a, b = operands(64, 96, 80, "NT", seed=6)
    c1, c2 = nan_out(64, 96), nan_out(64, 96)
    gp.run_split(a, b, c1, META, 3, tile0=2, tiles=3)  # tiles 2, 3, 4 of 6
    gp.run_split(a, b, c2, META, 3, tile0=2, tiles=3)
    written = ~torch.isnan(c1)
    assert written.sum() == 3 * 32 * 32
    assert torch.equal(c1[written], c2[written])  # fixed-order reduction: same bits every run
    assert_close(c1[written], ref64(a, b)[written])


@pytest.mark.parametrize("sms", [2, 3, 5, 16])  # 9 tiles: 4 + 1, 3 + 0 (no tail), 5 + 4, all tail
def test_hybrid_whole_waves_then_split_tail(sms):
    a, b = operands(72, 80, 88, "TN", seed=7)
    c = nan_out(72, 80)
    gp.run_hybrid(a, b, c, dict(META, FLATTEN=True), 4, sms)
    assert_close(c, ref64(a, b), msg=f"sms {sms}")


def test_pad_rows_copies_into_aligned_rows():
    t = rand(33, 45, seed=8)  # 90-byte rows
    p = gp.pad_rows(t)
    assert p.shape == t.shape and p.stride() == (48, 1) and tm.aligned(p)
    assert torch.equal(p, t)
    assert p.data_ptr() != t.data_ptr()
    assert triton.cdiv(45, 8) * 8 == p.stride(0)


def test_pad_rows_then_pointer_epilogue_odd_everything():
    a, b = operands(37, 41, 43, "NN", seed=9)
    c = nan_out(37, 41)
    gp.run_persistent(gp.pad_rows(a), gp.pad_rows(b), c, dict(META, C_PTR=True, FLATTEN=True), 3)
    assert_close(c, ref64(a, b))


# ---- dispatch: gemm() reaches these schedules


@pytest.fixture
def choose(monkeypatch):
    from warpgauge.kernels import gemm as gemm_mod

    def force(cfg):
        monkeypatch.setattr(gemm_mod.tma, "choose", lambda *a, **k: cfg)

    return force


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["NN", "NT", "TN"])
@pytest.mark.parametrize("which", ["WIDE_FLAT", "TALL_FLAT", "WIDE_FLAT_T", "NARROW", "TINY"])
def test_gemm_dispatch_runs_the_chosen_schedule(which, layout, dtype, choose, monkeypatch):
    from warpgauge.kernels import gemm as gemm_mod

    cfg = getattr(tm, which)
    choose(cfg)
    calls = []
    run = gp.run_persistent
    monkeypatch.setattr(gp, "run_persistent", lambda *a, **k: calls.append(a[3]) or run(*a, **k))
    M, N, K = 136, 104, 72  # 5 x 4 tiles of 32x32 (partial last ones) over 4 programs: they loop
    a, b = operands(M, N, K, layout, dtype=dtype, seed=11)
    c = torch.empty(M, N, dtype=dtype, device=DEV)
    assert gemm_mod._path(a, b, c, "m") == "tma"
    assert_close(gemm_mod.gemm(a, b), ref64(a, b), msg=f"{which} {layout}")
    assert bool(calls) == cfg.kwargs["FLATTEN"]  # flattened configs: persistent_kernel
    if calls:
        assert calls[0]["FLATTEN"] and calls[0]["PERSISTENT"] and not calls[0]["C_PTR"]
        assert bool(calls[0].get("C_T")) == (cfg is tm.WIDE_FLAT_T)  # the swapped product
    # dB (tokens in K) goes the same way
    g = rand(M, N, dtype=dtype, seed=12)
    assert_close(gemm_mod.gemm_grad_b(g, a), ref64(a.t(), g), msg="dB")


def test_pad_path_copies_with_triton_and_pads_an_odd_c(monkeypatch):
    from warpgauge.kernels import gemm as gemm_mod

    monkeypatch.setattr(gemm_mod, "PAD_MIN_WORK", 0)
    padded, metas, back = [], [], []
    pad, run, copy = gp.pad_rows, gp.run_persistent, gp.copy_rows
    monkeypatch.setattr(gp, "pad_rows", lambda t: padded.append(tuple(t.shape)) or pad(t))
    monkeypatch.setattr(gp, "run_persistent", lambda *a, **k: metas.append(a[3]) or run(*a, **k))
    monkeypatch.setattr(gp, "copy_rows", lambda s, d: back.append(d) or copy(s, d))
    monkeypatch.setattr(gemm_mod.tma, "choose", lambda *a, **k: gemm_mod.tma.WIDE_FLAT)
    a, b = operands(70, 45, 51, "NN", seed=13)  # K and N odd: A, B and C rows unaligned
    c = nan_out(70, 45)
    assert gemm_mod._path(a, b, c, "m") == "pad"
    gemm_mod.gemm(a, b, out=c)
    assert_close(c, ref64(a, b))
    assert padded == [(70, 51), (51, 45)]  # A and B copied in (C's buffer is only written)
    assert [d is c for d in back] == [False, False, True]  # A, B in (pad_rows), then C back
    assert metas and not metas[0]["C_PTR"]  # the padded C takes TMA stores
    # K odd only, B = w.t() column-major: B's copy keeps the stride swap; C aligned: no copy back
    padded.clear()
    back.clear()
    a, b = operands(66, 40, 37, "NT", seed=14)
    assert gemm_mod._path(a, b, nan_out(66, 40), "m") == "pad"
    assert_close(gemm_mod.gemm(a, b), ref64(a, b))
    assert padded == [(66, 37), (40, 37)]  # b.t() is the (40, 37) row-major storage
    assert len(back) == 2  # the two copies in, none back


def test_copy_rows_between_row_strides():
    src = rand(19, 300, seed=16)[:, :261]  # 261 columns of rows 300 long: two column blocks
    buf = nan_out(19, 270)
    gp.copy_rows(src, buf[:, :261])
    assert torch.equal(buf[:, :261], src)
    assert torch.isnan(buf[:, 261:]).all()  # the padding is never written


def test_tma_rule_is_logged_per_key_with_its_k_class(choose):
    from warpgauge.kernels import gemm as gemm_mod

    choose(tm.WIDE_FLAT)
    a, b = operands(72, 64, 40, "NN", seed=15)
    gemm_mod.gemm(a, b)
    logged = [r for r in gemm_mod.tuning_log() if r["kernel"] == "tma_kernel"]
    assert any(r["config"]["FLATTEN"] and r["key"][:3] == [128, 64, 64] for r in logged)


def test_pointer_autotune_keeps_32_row_tiles_for_small_problems_only():
    from warpgauge.kernels import gemm_tile as gt

    def rows(m_bucket, n):
        kept = gt._prune(gt._CONFIGS, {"M_BUCKET": m_bucket, "N": n})
        return sorted({c.kwargs["BLOCK_M"] for c in kept})

    assert rows(128, 255) == [32, 64, 128]  # 127x255x65: the 32-row tile is a candidate
    assert 32 not in rows(4096, 4096)
    assert rows(1, 8) == [32, 64]  # a tiny problem never ends with no candidate
