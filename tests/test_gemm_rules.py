"""GEMM dispatch rules added for issue 11's 0.95x goal (gemm-95): split-K for outputs of few tiles
with long K, and the rules' keys. Kernels run on small shapes through the Triton interpreter (CPU)
or a GPU, against FP64 references on NaN-poisoned outputs (conftest poisons every allocation)."""

from __future__ import annotations

import pytest
import torch

from warpgauge._device import interpreter_enabled
from warpgauge.kernels import gemm as gemm_mod
from warpgauge.kernels import gemm_tile
from warpgauge.kernels.gemm import gemm, gemm_grad_b
from warpgauge.reference import assert_close

pytestmark = pytest.mark.skipif(
    not (interpreter_enabled() or torch.cuda.is_available()),
    reason="needs a CUDA GPU or TRITON_INTERPRET=1",
)
DEV = "cpu" if interpreter_enabled() else "cuda"
T = gemm_mod.tma


def rand(*shape, dtype=torch.float16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype=dtype, device=DEV)


def ref64(a, b):
    return (a.double() @ b.double()).to(a.dtype)


def test_split_rule_keys():
    # dB of 16384x1024x1024: a 1024x1024 output (32 tiles of 128x256) from 16384 tokens
    assert T.choose(1024, 1024, 132, T.k_class(16384)) is T.SPLIT_TILE
    assert T.split_count(1024, 1024, T.k_class(16384), 132, T.SPLIT_TILE) == 4  # 32 tiles
    assert T.split_count(256, 2048, 8192, 132, T.SPLIT_TILE) == 8  # 16 tiles, 128 K steps
    assert T.split_count(256, 2048, 8192, 33, T.SPLIT_TILE) == 2  # the SM count bounds it
    assert T.choose(1024, 1024, 132, T.k_class(4096)) is T.NARROW  # short K: no split
    assert T.choose(1024, 1024, 132) is T.NARROW
    assert T.choose(4096, 4096, 132, T.k_class(16384)) is T.WIDE  # many tiles: no split
    # every K of a class gets one config and one split: the key, not K, decides
    assert len({T.split_count(1024, 1024, T.k_class(k), 132, T.SPLIT_TILE)
                for k in (8193, 12000, 16384, 50000)}) == 1  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "tokens,K,N",
    [
        (200, 48, 40),  # dB (48 x 40) from 200 tokens: K tail of 8 in the last split
        (333, 64, 24),  # odd token count: the last split is short and ragged
    ],
)
def test_split_k_dispatch_matches_fp64(tokens, K, N, dtype, monkeypatch):
    monkeypatch.setattr(T, "SPLIT_MIN_K", 1)
    monkeypatch.setattr(T, "SPLIT_MIN_STEPS", 1)
    a = rand(tokens, K, dtype=dtype, seed=tokens)
    dc = rand(tokens, N, dtype=dtype, seed=tokens + 1)
    sms = gemm_mod.device_info(a.device).sm_count
    assert T.choose(gemm_mod._bucket(K), N, sms, T.k_class(tokens)) is T.SPLIT_TILE
    assert gemm_mod._path(a.t(), dc, torch.empty(K, N, dtype=dtype), "k") == "tma"
    calls = []
    real = gemm_mod.gp.run_split
    monkeypatch.setattr(
        gemm_mod.gp, "run_split", lambda *x, **kw: calls.append(x[4]) or real(*x, **kw)
    )
    db = gemm_grad_b(dc, a)
    assert calls and calls[0] > 1  # the split path ran, with more than one split
    assert_close(db, ref64(a.t(), dc), msg=f"{tokens} tokens, split {calls[0]}")
    again = gemm_grad_b(dc, a)
    assert torch.equal(db, again)  # fixed-order reduction: the same bits on every call
    # the forward product of the same shape (tokens in M) is unaffected by the rule's K class
    x = rand(K, tokens, dtype=dtype, seed=3)
    assert_close(gemm(x, dc), ref64(x, dc))


def test_skinny_plan_for_64_tokens_wide_n():
    P = gemm_mod.skinny.SkinnyPlan
    p = P.for_shape(64, 14336, 4096, 132)  # 112 tiles of 128 rows, 64-deep K steps 6 stages
    assert (p.block_m, p.block_n, p.block_k, p.num_stages, p.split_k) == (64, 128, 64, 6, 1)
    assert P.for_shape(40, 14336, 4096, 132) == p  # every M of 33..64 shares the plan
    q = P.for_shape(16, 14336, 4096, 132)  # <= 32 tokens keep 128-deep steps, 3 stages
    assert (q.block_n, q.block_k, q.num_stages) == (128, 128, 3)
    r = P.for_shape(64, 4096, 14336, 132)  # dA of the same layer: N = 4096, not wide
    assert (r.block_n, r.block_k, r.num_stages, r.split_k) == (64, 128, 4, 2)
    assert P.for_shape(64, 14336, 4096, 66).split_k == 1  # 112 tiles > 66 SMs: no split


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_skinny_64_token_plan_matches_fp64(dtype):
    # the 64-token wide plan's shape of steps on a small problem: BLOCK_K 64, several splits,
    # 6 stages, an odd N and a K tail (interpreter: 16-row tiles of B^T keep it fast)
    M, N, K = 50, 70, 200
    a = rand(M, K, dtype=dtype, seed=21)
    b = rand(K, N, dtype=dtype, seed=22)
    plan = gemm_mod.skinny.SkinnyPlan(64, 16 if interpreter_enabled() else 128, 64, 2,
                                      num_warps=4, num_stages=6)  # fmt: skip
    c = torch.full((M, N), float("nan"), dtype=dtype, device=DEV)
    upcast = dtype == torch.bfloat16 and interpreter_enabled()
    gemm_mod._launch_skinny(a, b, c, upcast, plan=plan)
    assert_close(c, ref64(a, b))


def test_tile_autotune_keeps_32x32_for_small_problems_only():
    cfgs = gemm_mod._KERNELS["m"].configs
    small = dict(M_BUCKET=128, N=255)
    big = dict(M_BUCKET=1024, N=1024)
    tiles = {(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"]) for c in
             gemm_tile._prune(cfgs, small)}  # fmt: skip
    assert {(32, 32, 128), (32, 32, 64), (32, 64, 64)} <= tiles
    assert all(c.kwargs["BLOCK_M"] >= 64 for c in gemm_tile._prune(cfgs, big))


@pytest.mark.parametrize("M,N,K", [(127, 255, 65), (65, 255, 127), (127, 65, 255)])
def test_tiny_odd_shapes_match_fp64(M, N, K):
    # the suite's tiny all-odd product and its dB / dA shapes, through the public function
    a = rand(M, K, seed=M + K)
    b = rand(K, N, seed=N)
    assert_close(gemm(a, b), ref64(a, b))


def test_pad_path_writes_a_padded_out_in_place(monkeypatch):
    # odd K and N (the 4095^3 case in small): A and B are padded copies; an ``out`` whose rows are
    # already 16-byte aligned is written by TMA directly, with no copy of C back
    monkeypatch.setattr(gemm_mod, "PAD_MIN_WORK", 0)
    M, N, K = 70, 45, 51
    a, b = rand(M, K, seed=31), rand(K, N, seed=32)
    out = torch.full((M, 48), float("nan"), dtype=torch.float16, device=DEV)[:, :N]
    assert gemm_mod._path(a, b, out, "m") == "pad"
    copies = []
    real = gemm_mod.gp.copy_rows
    monkeypatch.setattr(gemm_mod.gp, "copy_rows", lambda *x: copies.append(x) or real(*x))
    assert gemm(a, b, out=out) is out
    assert len(copies) == 2  # the padded copies of A and B (pad_rows), none of C
    assert_close(out, ref64(a, b))
    c = gemm(a, b)  # a contiguous result: written to a padded buffer, then copied back
    assert c.is_contiguous() and len(copies) == 5 and copies[-1][1] is c
    assert_close(c, ref64(a, b))


def test_rule_sees_the_layout_class_and_keeps_an_unaligned_c_off_the_swap(monkeypatch):
    # dB = A^T dC hands the rule a column-major A (a_t); the forward product a row-major one. A
    # rule answer of the swapped product runs run_transposed, whose C must be TMA-addressable
    seen, swapped = [], []
    real_choose, real_t = T.choose, gemm_mod.gp.run_transposed
    monkeypatch.setattr(T, "choose", lambda *a, **k: seen.append(a[4]) or T.WIDE_FLAT_T)
    monkeypatch.setattr(
        gemm_mod.gp, "run_transposed", lambda *a, **k: swapped.append(1) or real_t(*a, **k)
    )
    x, dc = rand(96, 40, seed=41), rand(96, 56, seed=42)  # tokens 96, K 40, N 56
    db = gemm_grad_b(dc, x)
    assert seen == [True] and swapped == [1]
    assert_close(db, ref64(x.t(), dc))
    w = rand(40, 56, seed=43)
    assert_close(gemm(x, w), ref64(x, w))
    assert seen == [True, False] and swapped == [1, 1]
    xt = rand(40, 96, seed=45).t()  # a column-major A with the tokens in M: not dB's class
    assert_close(gemm(xt, w), ref64(xt, w))
    assert seen == [True, False, False] and len(swapped) == 3  # (the forced answer still runs)
    monkeypatch.setattr(gemm_mod, "PAD_MIN_WORK", 0)
    w_odd = rand(40, 45, seed=44)  # N = 45: C rows unaligned (pad path, pointer-store C)
    assert_close(gemm(x, w_odd), ref64(x, w_odd))
    assert len(swapped) == 4  # the pad path stores into a padded C: the swap runs
    c = torch.full((96, 45), float("nan"), dtype=torch.float16, device=DEV)  # rows unaligned
    gemm_mod._launch_tma(x, gemm_mod.gp.pad_rows(w_odd), c, "m", upcast=False)
    assert len(swapped) == 4  # a C TMA cannot store: TALL_FLAT with pointer stores instead
    assert_close(c, ref64(x, w_odd))
    monkeypatch.setattr(T, "choose", real_choose)


def test_tuned_launch_logs_a_tuning_seen_by_cache_or_bench_time(monkeypatch):
    # the pointer path's autotuning record (issue 11: tuning time per case): a call that tuned is
    # logged once with the autotuner's key and choice, whether the cache grew or only bench_time
    import triton

    class Tuner:
        fn = gemm_tile._gemm_kernel.fn
        cache: dict = {}
        best_config = triton.Config({"BLOCK_M": 32}, num_warps=4, num_stages=2)

    tuner = Tuner()
    calls = []

    def fake_launch(kernel, grid, *args, **meta):
        calls.append(args)
        if len(calls) == 1:
            kernel.bench_time = 0.25  # tuned, but the cache did not visibly grow
        elif len(calls) == 2:
            kernel.cache[(1,)] = kernel.best_config  # tuned: the cache grew

    monkeypatch.setattr(gemm_mod, "launch", fake_launch)
    args = [None] * 3 + [5, 7, 9] + [0] * 6 + [8, 16, 3]  # ..., M_BUCKET 8, K_BUCKET 16, LAYOUT 3
    before = len(gemm_mod.tuning_log())
    for _ in range(3):  # the third call tunes nothing: no record
        gemm_mod._tuned_launch(tuner, (1,), *args)
    new = gemm_mod.tuning_log()[before:]
    assert [r["key"] for r in new] == [[8, 7, 16, 3]] * 2
    assert new[0]["tuning_s"] == 0.25 and new[0]["config"]["BLOCK_M"] == 32
