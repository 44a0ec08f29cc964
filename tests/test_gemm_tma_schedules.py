"""The TMA GEMM schedules of ``gemm_tma`` (persistent v2, split-K, whole waves + split tail, padded
copies) against FP64, on small shapes under the Triton interpreter (or a GPU). Blocks are 32x32x16
so a few dozen rows already make several tiles, several K steps and partial edge tiles."""

from __future__ import annotations

import pytest
import torch
import triton

from warpgauge._device import interpreter_enabled
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
    tm.run_persistent(a, b, c, meta, sms)
    assert_close(c, ref64(a, b), msg=f"{layout} {flags}")


def test_persistent_v2_bf16_and_pointer_store_on_odd_n():
    # C_PTR: a C of 45 columns (90-byte rows) that no TMA descriptor could address
    a, b = operands(40, 45, 32, "NT", dtype=torch.bfloat16, seed=3)
    assert tm.aligned(a) and tm.aligned(b) and not tm.aligned(nan_out(40, 45))
    c = nan_out(40, 45, torch.bfloat16)
    tm.run_persistent(a, b, c, dict(META, FLATTEN=True, C_PTR=True), 3, upcast=UPCAST)
    assert_close(c, ref64(a, b))


def test_persistent_v2_tile_end_writes_only_its_tiles():
    a, b = operands(64, 64, 32, "NN", seed=4)
    c = nan_out(64, 64)
    tm.run_persistent(a, b, c, META, 2, tile_end=3)  # tiles 0..2 of 4 (grouped order)
    ref = ref64(a, b)
    written = ~torch.isnan(c)
    assert written.sum() == 3 * 32 * 32
    assert torch.isnan(c[32:, 32:]).all()  # tile 3 in grouped order (GROUP_M=8: column-major)
    assert_close(c[written], ref[written])


@pytest.mark.parametrize("split", [1, 2, 3, 8])  # 8 > the 6 K steps: the last splits are empty
def test_split_k_matches_fp64(split):
    a, b = operands(70, 72, 88, "NN", seed=5)
    c = nan_out(70, 72)
    tm.run_split(a, b, c, META, split)
    assert_close(c, ref64(a, b), msg=f"split {split}")


def test_split_k_tile_subset_and_bit_identical():
    a, b = operands(64, 96, 80, "NT", seed=6)
    c1, c2 = nan_out(64, 96), nan_out(64, 96)
    tm.run_split(a, b, c1, META, 3, tile0=2, tiles=3)  # tiles 2, 3, 4 of 6
    tm.run_split(a, b, c2, META, 3, tile0=2, tiles=3)
    written = ~torch.isnan(c1)
    assert written.sum() == 3 * 32 * 32
    assert torch.equal(c1[written], c2[written])  # fixed-order reduction: same bits every run
    assert_close(c1[written], ref64(a, b)[written])


@pytest.mark.parametrize("sms", [2, 3, 5, 16])  # 9 tiles: 4 + 1, 3 + 0 (no tail), 5 + 4, all tail
def test_hybrid_whole_waves_then_split_tail(sms):
    a, b = operands(72, 80, 88, "TN", seed=7)
    c = nan_out(72, 80)
    tm.run_hybrid(a, b, c, dict(META, FLATTEN=True), 4, sms)
    assert_close(c, ref64(a, b), msg=f"sms {sms}")


def test_pad_rows_copies_into_aligned_rows():
    t = rand(33, 45, seed=8)  # 90-byte rows
    p = tm.pad_rows(t)
    assert p.shape == t.shape and p.stride() == (48, 1) and tm.aligned(p)
    assert torch.equal(p, t)
    assert p.data_ptr() != t.data_ptr()
    assert triton.cdiv(45, 8) * 8 == p.stride(0)


def test_pad_rows_then_pointer_epilogue_odd_everything():
    a, b = operands(37, 41, 43, "NN", seed=9)
    c = nan_out(37, 41)
    tm.run_persistent(tm.pad_rows(a), tm.pad_rows(b), c, dict(META, C_PTR=True, FLATTEN=True), 3)
    assert_close(c, ref64(a, b))
