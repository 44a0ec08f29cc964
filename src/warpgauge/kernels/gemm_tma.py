"""GEMM through Hopper's tensor-memory accelerator (TMA): ``C = A @ B`` with tensor descriptors.

Each operand is described by a host ``TensorDescriptor`` over the storage as it lies in memory
(row-major, or its transpose for a column-major view), so the TMA unit copies whole
``BLOCK x BLOCK_K`` boxes into shared memory asynchronously, zero-fills boxes that run past
M, N or K, and clips the store of C: no masks, no wrapped offsets, and any M, N, K. A transposed
operand is a transposed box (``A_T`` / ``B_T``) handed to ``tl.dot`` as ``.T`` (wgmma reads both
shared-memory majors), never a copy.

Eligible when every operand has a unit stride and its other stride and base address are 16-byte
aligned (a BF16 row of any multiple of 8 elements), and C is row-major; ``eligible`` checks it.
Otherwise the pointer kernel (``gemm_tile``) runs.

Schedules: ``PERSISTENT = False`` launches one program per output tile in grouped order;
``PERSISTENT = True`` launches at most one program per SM; each walks the tiles in the same order
with a stride of the grid size. Configs with ``FLATTEN`` run ``gemm_persistent.persistent_kernel``
instead (the flattened persistent loop); so does any config when C's rows are not 16-byte aligned
(the pad path), with a pointer-store epilogue. ``SPLIT_TILE`` runs ``gemm_persistent.run_split``
(split-K, fixed-order reduction) with ``split_count`` splits.

Traffic (compulsory): read A (M*K) + B (K*N) + write C (M*N) elements; FLOPs 2*M*N*K.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._device import interpreter_enabled
from ._launch import cdiv, next_pow2

__all__ = ["eligible", "descriptors", "tma_kernel", "set_block_shapes", "CONFIGS", "choose", "grid",
           "k_class"]  # fmt: skip


def unit_stride(t: torch.Tensor) -> bool:
    return t.stride(0) == 1 or t.stride(1) == 1


def base_aligned(t: torch.Tensor) -> bool:
    """Base address on a 128-byte line (TMA boxes then start on lines; see gemm.PAD_MIN_WORK)."""
    return t.data_ptr() % 128 == 0


def aligned(t: torch.Tensor) -> bool:
    """A unit stride, the other stride a multiple of 16 bytes, base 16-byte aligned."""
    e = t.element_size()
    s0, s1 = t.stride()
    if t.data_ptr() % 16:
        return False
    if s1 == 1:
        return (s0 * e) % 16 == 0 and s0 >= t.shape[1]
    if s0 == 1:
        return (s1 * e) % 16 == 0 and s1 >= t.shape[0]
    return False


def device_ok(a: torch.Tensor) -> bool:
    """TMA needs sm_90+ (or the interpreter, which emulates descriptors on CPU tensors)."""
    if a.device.type == "cuda":
        return torch.cuda.get_device_capability(a.device)[0] >= 9
    return interpreter_enabled()


def eligible(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> bool:
    if not device_ok(a):
        return False
    if min(a.shape[0], a.shape[1], b.shape[1]) < 1:
        return False
    return aligned(a) and aligned(b) and c.stride(1) == 1 and aligned(c)


def _desc(t: torch.Tensor, transposed: bool):
    from triton.tools.tensor_descriptor import TensorDescriptor

    if transposed:  # column-major view: describe the row-major storage t.T
        s = t.t()
        return TensorDescriptor(s, list(s.shape), list(s.stride()), [16, 16])
    return TensorDescriptor(t, list(t.shape), list(t.stride()), [16, 16])


def descriptors(a, b, c):
    """(a_desc, b_desc, c_desc, A_T, B_T): block shapes are set per config by set_block_shapes."""
    a_t = a.stride(1) != 1
    b_t = b.stride(1) != 1
    return _desc(a, a_t), _desc(b, b_t), _desc(c, False), a_t, b_t


def set_block_shapes(nargs) -> None:
    """The descriptors' boxes follow the config being run."""
    bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
    nargs["a_desc"].block_shape = [bk, bm] if nargs["A_T"] else [bm, bk]
    nargs["b_desc"].block_shape = [bn, bk] if nargs["B_T"] else [bk, bn]
    nargs["c_desc"].block_shape = [bm, bn]


@triton.jit
def _tile_ids(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((tile % num_pid_in_group) % group_size_m)
    pid_n = (tile % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _tile(a_desc, b_desc, off_m, off_n, K, BLOCK_K: tl.constexpr, BLOCK_M: tl.constexpr,
          BLOCK_N: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr,
          UPCAST: tl.constexpr, WS: tl.constexpr):  # fmt: skip
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in tl.range(0, tl.cdiv(K, BLOCK_K), warp_specialize=WS):
        off_k = kt * BLOCK_K
        if A_T:
            a = a_desc.load([off_k, off_m]).T
        else:
            a = a_desc.load([off_m, off_k])
        if B_T:
            b = b_desc.load([off_n, off_k]).T
        else:
            b = b_desc.load([off_k, off_n])
        if UPCAST:  # interpreter only: its BF16 tl.dot is wrong; FP32 products of BF16 are exact
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit(do_not_specialize=["M", "K", "M_BUCKET", "K_BUCKET", "LAYOUT"])
def tma_kernel(
    a_desc, b_desc, c_desc, M, N, K, M_BUCKET, K_BUCKET, LAYOUT,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    A_T: tl.constexpr, B_T: tl.constexpr, PERSISTENT: tl.constexpr, WS: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    # I/O: read A (M*K) + B (K*N) + write C (M*N) elements; 2*M*N*K FLOPs.
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    if PERSISTENT:
        for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
            pid_m, pid_n = _tile_ids(tile, num_pid_m, num_pid_n, GROUP_M)
            acc = _tile(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, K, BLOCK_K, BLOCK_M,
                        BLOCK_N, A_T, B_T, UPCAST, WS)  # fmt: skip
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))
    else:
        pid_m, pid_n = _tile_ids(tl.program_id(0), num_pid_m, num_pid_n, GROUP_M)
        acc = _tile(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, K, BLOCK_K, BLOCK_M,
                    BLOCK_N, A_T, B_T, UPCAST, WS)  # fmt: skip
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))  # one rounding


# Hopper configs (228 KB shared memory per SM: 128x256x64 x 3 stages = 144 KB + the C tile).
# Picked by a rule (``choose``) from the H200 sweeps (results/gemm-tuning-h200/ and
# results/gemm-shapes-h200/, BF16, cuBLAS = 1), not timed per call: the rule costs no tuning time.
# ``FLATTEN`` configs run gemm_persistent.persistent_kernel (flattened persistent loop), the others
# tma_kernel (persistent or one program per tile).
def _cfg(bm, bn, bk, stages, warps, persistent=False, ws=False, flatten=False, subtile=False):
    return triton.Config(
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "PERSISTENT": persistent,
         "WS": ws, "FLATTEN": flatten, "SUBTILE": subtile},
        num_stages=stages, num_warps=warps,
    )  # fmt: skip


# Persistent 128x256: best or within 2% of it at 4096^3 NN / NT / TN (0.98x), 4095x4096x4096,
# K = 8 mod 16 and 4096x14336x4096 NT (0.965x; non-persistent 0.75x there).
WIDE = _cfg(128, 256, 64, 3, 8, persistent=True)
# Persistent 256x128: the same tile turned; fits N = 4104 in 4 whole waves where 128x256 needs 5
# (4096x4104x4096 NN 214 us vs 236; NT 197 vs 218).
TALL = _cfg(256, 128, 64, 3, 8, persistent=True)
# The same tiles with the flattened persistent loop (the next tile's loads under this tile's
# epilogue) and, for 128x256, warp specialization; for K <= FLAT_MAX_K (shapes-h200 round1.json,
# cold L2, cuBLAS = 1): 16384x1024x1024 53.3 us vs 57.2 (0.98x vs 0.91x); 4096^3 NN / NT / TN
# 178.9 / 181.2 / 178.7 vs 180.1 / 183.3 / 180.4; 4096x14336x4096 NN 626.0 vs 629.7, its dB
# 621.2 vs 632.2. At K = 8192 the flattened loop ran 8192^3 in 1504.8 us cold against 1403.6 (warm
# 1419.4 vs 1438.7; round2_confirm.json: 1429.0 vs 1468.8 cold, 1501.8 vs 1466.9 warm, cuBLAS
# 1390.2 / 1472.5: power-state noise at this size), so longer K keeps the old loop.
WIDE_FLAT = _cfg(128, 256, 64, 3, 8, persistent=True, ws=True, flatten=True)
# 256x128, flattened, 4 stages with C stored in two halves (4 x 48 KB + 32 KB of shared memory):
# 4096x4104x4096 NN 188.5 us against 204.1 with 3 stages and a whole-tile store and 215.2 for
# the old loop (cuBLAS 182.5; round2_confirm.json, round1.json).
TALL_FLAT = _cfg(256, 128, 64, 4, 8, persistent=True, flatten=True, subtile=True)
FLAT_MAX_K = 4096
# Where the rule picks 256x128 and A is column-major (A^T @ dC, the dB product): the swapped
# product C^T = B^T A^T in 128x256 tiles of the flattened loop, each stored transposed
# (gemm_persistent.run_transposed; 4104 = 33 tiles of 128 there too). dB of 4096x4104x4096
# (TN): 188.6 us against 193.2 (cuBLAS 179.6; warm 182.5 / 191.8; g11.json). The forward (NN)
# product lost with it (191.3-194.0 against 185.2), so only the column-major-A class takes it.
WIDE_FLAT_T = _cfg(128, 256, 64, 3, 8, persistent=True, ws=True, flatten=True)
# 128x128 tiles for sliver waves (2048x2056x2048, see choose).
MID = _cfg(128, 128, 64, 4, 8)
# Under half a wave of 128x256 tiles, one program per tile, as many tiles as fit one wave (cold):
# 64x128 ran 1024^3 in 10.8 us against 12.2 for 128x128 and 11.3 for 128x64 (warm 5.4 / 7.8 /
# 6.1; cuBLAS 9.3 cold, 5.3 warm); 64x64 ran 256^3 in 6.56 us against 6.75 for 128x64 (cuBLAS
# 6.34). Split-K lost at 1024^3 (13.9-20.2 us; gemm_persistent). 64x128 with 6 stages: 9.6 us
# (8 stages 9.7, 128-deep K steps 10.0, cuBLAS 9.3; warm 5.4, cuBLAS 5.2; round2_confirm.json):
# cold, the first K steps wait on DRAM, and more of them in flight hide it. 128-deep K steps 4
# stages deep (192 KB in flight) beat that at all three 1024^3 products (gemm11 round,
# results/gemm11-h200/g11.json, cold / warm us): fwd 9.8 / 5.2 against 9.9 / 5.4, dA (NT) 9.8 /
# 5.3 against 10.5 / 5.6, dB (TN) 9.9 / 5.5 against 10.2 / 6.1 (cuBLAS 9.8, 9.8, 9.3); 128x64
# tiles 6 deep 10.2-10.3, 64x128x64 4 deep 11.3 (dB).
NARROW = _cfg(64, 128, 128, 4, 4)
# Fewer than sm_count / 8 tiles of 64x128: 64x32 tiles (twice the programs of 64x64): 256^3 fwd
# 6.5 us against 6.8 for 64x64 (cuBLAS 6.7; warm 2.6 / 2.7 / 3.0; g11.json); the pointer kernel's
# 32x64 6.7, 64x64 with 128-deep steps 6.8, split-K 8.7. Measured on the forward product only
# (its dA / dB ran 64x64: 6.6 / 7.0 against cuBLAS 6.3 / 6.5).
TINY = _cfg(64, 32, 64, 4, 4)
# Split-K for outputs under half a wave with K > FLAT_MAX_K (dB of a short layer: 1024x1024 from
# 16384 tokens): 128x256 tiles, each split over K into FP32 partials added in a fixed order
# (gemm_persistent.run_split; no atomics), split count from the SM count (split_count). 1024x1024
# x16384 TN: 4 splits 56.4 us cold against 58.6 for one wave of 64x128 tiles (cuBLAS 51.9; warm
# 53.7 / 55.8); 128x128 tiles in 2 splits 58.0, in 4 64.7 (results/gemm-95-h200/round1.json).
# 4 stages (192 KB): 54.8 us against 56.4 for the 3-stage rule (cuBLAS 51.7; warm 51.8 / 52.6);
# warp-specializing the split's K loop 57.1, 256x128 tiles 60.6-61.0, 2 splits of 128x256 88.1,
# 128x128 in 2 with WS 58.3, 64x256 in 2 57.3 (gemm11 round, g11.json). fwd 256x4096x14336
# (4 splits): 53.1 us against 57.9 with 3 stages (cuBLAS 53.8; gemm11b round, g11b.json); with
# 65..128 tokens in M the skinny kernel runs instead (gemm._path, gemm_skinny).
SPLIT_TILE = _cfg(128, 256, 64, 4, 8)
SPLIT_MIN_K = 8192
SPLIT_MIN_STEPS = 16  # each split reduces >= 16 BLOCK_K steps: its partials stay a small share
CONFIGS = [WIDE, TALL, WIDE_FLAT, TALL_FLAT, WIDE_FLAT_T, MID, NARROW, TINY, SPLIT_TILE]
INTERPRETER_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 4,
                      "PERSISTENT": False, "WS": False}  # fmt: skip


def _waves(M: int, N: int, bm: int, bn: int, sm_count: int) -> int:
    return cdiv(cdiv(M, bm) * cdiv(N, bn), sm_count)


# Time per tile relative to a 128x256 tile at full occupancy, read off the same sweeps: 256x128
# ran 4096^3 in 200.2 us against 175.1 (1.14x), two 128x128 tiles 200.9 (1.15x per 128x256 of work).
_TALL_COST = 1.14
_MID_COST = 1.15 / 2


def k_class(K: int) -> int:
    """The K part of the rule's key: K's power-of-two bucket up to 2 * FLAT_MAX_K (all longer K
    share one), so in dB, where K is the token count, every K of a class shares one config."""
    return min(next_pow2(max(int(K), 1)), 2 * FLAT_MAX_K)


def choose(M: int, N: int, sm_count: int, K: int = FLAT_MAX_K, a_t: bool = False) -> triton.Config:
    """The config rule. The caller passes M's bucket (gemm_tile._bucket) and K's class
    (``k_class``), so every M of a bucket (every K of a class) shares one config; ``a_t``: A is
    column-major and the tokens are in K (the layout class of dB = A^T dC; gemm._launch_tma).

    - Below half a wave of 128x256 tiles: split-K for long K when it yields more than one split,
      else one program per tile, 64x128 tiles (128-deep K steps) while they fit one wave (64x32
      when fewer than sm_count / 8 of them), else 128x128.
    - Otherwise the tile that finishes in the least time counted in whole waves, each wave costing
      its tile's relative time. 2048x2056x2048: 128x256 needs 2 waves for 1.09 waves of work (51.5
      us), 128x128 3 half-cost waves (43.4 us). 128x256 and 256x128 run the flattened persistent
      loop when K <= FLAT_MAX_K; there a column-major A turns 256x128 into the swapped product in
      128x256 tiles (``WIDE_FLAT_T``)."""
    if cdiv(M, 128) * cdiv(N, 256) <= sm_count // 2:
        if K >= SPLIT_MIN_K and split_count(M, N, K, sm_count, SPLIT_TILE) > 1:
            return SPLIT_TILE
        narrow = cdiv(M, 64) * cdiv(N, 128)
        if narrow > sm_count:
            return MID
        return TINY if narrow < sm_count // 8 else NARROW
    cost = {
        "wide": _waves(M, N, 128, 256, sm_count),
        "tall": _waves(M, N, 256, 128, sm_count) * _TALL_COST,
        "mid": _waves(M, N, 128, 128, sm_count) * _MID_COST,
    }
    best = min(cost, key=cost.get)  # ties keep the first: wide
    if best == "mid":
        return MID
    if K <= FLAT_MAX_K:
        if best == "wide":
            return WIDE_FLAT
        return WIDE_FLAT_T if a_t else TALL_FLAT
    return WIDE if best == "wide" else TALL


def split_count(M: int, N: int, K: int, sm_count: int, cfg: triton.Config) -> int:
    """K splits of ``cfg``'s tiles: the largest power of two that keeps tiles x splits within one
    wave (``sm_count`` programs) with >= SPLIT_MIN_STEPS K steps per split. The caller passes M's
    bucket and K's class, so every shape of a key gets the same split."""
    tiles = cdiv(M, cfg.kwargs["BLOCK_M"]) * cdiv(N, cfg.kwargs["BLOCK_N"])
    steps = cdiv(K, cfg.kwargs["BLOCK_K"])
    split = 1
    while tiles * split * 2 <= sm_count and steps >= 2 * split * SPLIT_MIN_STEPS:
        split *= 2
    return split


def grid(M: int, N: int, meta: dict, sm_count: int) -> tuple[int]:
    tiles = cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"])
    return (min(tiles, sm_count) if meta["PERSISTENT"] else tiles,)


def with_blocks(descs, meta) -> None:
    """Set the descriptors' boxes for config ``meta`` (the kernel's block shapes)."""
    a_desc, b_desc, c_desc, a_t, b_t = descs
    set_block_shapes(dict(meta, a_desc=a_desc, b_desc=b_desc, c_desc=c_desc, A_T=a_t, B_T=b_t))
