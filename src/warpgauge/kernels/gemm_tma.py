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
with a stride of the grid size.

Traffic (compulsory): read A (M*K) + B (K*N) + write C (M*N) elements; FLOPs 2*M*N*K.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._device import interpreter_enabled

__all__ = ["eligible", "descriptors", "tma_kernel", "set_block_shapes", "CONFIGS", "choose", "grid"]


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


# Hopper configs (228 KB shared memory per SM: 128x256x64 x 3 stages = 144 KB; 4 stages do not
# fit). Picked by a rule (``choose``) from the H200 sweeps (results/gemm-tuning-h200/, BF16,
# cuBLAS = 1), not timed per call: timing through the eager launch path measured host cost, and the
# rule costs no tuning time.
def _cfg(bm, bn, bk, stages, warps, persistent=False, ws=False):
    return triton.Config(
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "PERSISTENT": persistent,
         "WS": ws},
        num_stages=stages, num_warps=warps,
    )  # fmt: skip


# Persistent 128x256: best or within 2% of it at 4096^3 NN / NT / TN (0.98x), 4095x4096x4096,
# K = 8 mod 16 and 4096x14336x4096 NT (0.965x; non-persistent 0.75x there).
WIDE = _cfg(128, 256, 64, 3, 8, persistent=True)
# Persistent 256x128: the same tile turned; fits N = 4104 in 4 whole waves where 128x256 needs 5
# (4096x4104x4096 NN 214 us vs 236; NT 197 vs 218).
TALL = _cfg(256, 128, 64, 3, 8, persistent=True)
# Under one wave of 128x256 tiles: 128x128 (1024^3 8.3 us vs 13.6; 1000x768x520 6.5 vs 9.6), and
# 128x64 when even those are few (128x4096x4096 NT, 16.6 us).
MID = _cfg(128, 128, 64, 4, 8)
SMALL = _cfg(128, 64, 64, 4, 4)
CONFIGS = [WIDE, TALL, MID, SMALL]
INTERPRETER_CONFIG = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 4,
                      "PERSISTENT": False, "WS": False}  # fmt: skip


def _waves(M: int, N: int, bm: int, bn: int, sm_count: int) -> int:
    return triton.cdiv(triton.cdiv(M, bm) * triton.cdiv(N, bn), sm_count)


# Time per tile relative to a 128x256 tile at full occupancy, read off the same sweeps: 256x128
# ran 4096^3 in 200.2 us against 175.1 (1.14x), two 128x128 tiles 200.9 (1.15x per 128x256 of work).
_TALL_COST = 1.14
_MID_COST = 1.15 / 2


def choose(M: int, N: int, sm_count: int) -> triton.Config:
    """The config rule: the tile that finishes in the least time counted in whole waves, each wave
    costing its tile's relative time; below half a wave of 128x256 tiles, 128x128 (128x64 when
    even those are few). The caller passes M's bucket (gemm_tile._bucket), so every M of a
    bucket shares one config. 2048x2056x2048: 128x256 needs 2 waves for 1.09 waves of work (51.5
    us), 128x128 3 half-cost waves (43.4 us)."""
    if triton.cdiv(M, 128) * triton.cdiv(N, 256) <= sm_count // 2:
        return MID if triton.cdiv(M, 128) * triton.cdiv(N, 128) >= 48 else SMALL
    cost = {
        "wide": _waves(M, N, 128, 256, sm_count),
        "tall": _waves(M, N, 256, 128, sm_count) * _TALL_COST,
        "mid": _waves(M, N, 128, 128, sm_count) * _MID_COST,
    }
    best = min(cost, key=cost.get)  # ties keep the first: wide
    return {"wide": WIDE, "tall": TALL, "mid": MID}[best]


def grid(M: int, N: int, meta: dict, sm_count: int) -> tuple[int]:
    tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
    return (min(tiles, sm_count) if meta["PERSISTENT"] else tiles,)


def with_blocks(descs, meta) -> None:
    """Set the descriptors' boxes for config ``meta`` (the kernel's block shapes)."""
    a_desc, b_desc, c_desc, a_t, b_t = descs
    set_block_shapes(dict(meta, a_desc=a_desc, b_desc=b_desc, c_desc=c_desc, A_T=a_t, B_T=b_t))


# ------------------------------------------------------------------ persistent v2, split-K, pad
# Variants swept by experiments/gemm_shapes_sweep.py (issue 11: the shapes that lose to cuBLAS).


@triton.jit
def _acc(a_desc, b_desc, off_m, off_n, k0, k1, BLOCK_K: tl.constexpr, BLOCK_M: tl.constexpr,
         BLOCK_N: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """FP32 sum over K steps [k0, k1) of one tile (plain loop: the caller's loop is pipelined)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(k0, k1):
        off_k = kt * BLOCK_K
        if A_T:
            a = a_desc.load([off_k, off_m]).T
        else:
            a = a_desc.load([off_m, off_k])
        if B_T:
            b = b_desc.load([off_n, off_k]).T
        else:
            b = b_desc.load([off_k, off_n])
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def _store_tile(c_desc, c_ptr, stride_cm, acc, off_m, off_n, M, N, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, SUBTILE: tl.constexpr, C_PTR: tl.constexpr):  # fmt: skip
    """One rounding, then a TMA store (whole or in two column halves) or a masked pointer store
    (C_PTR: for a C whose rows TMA cannot address, e.g. an odd N)."""
    if C_PTR:
        om = off_m + tl.arange(0, BLOCK_M)
        on = off_n + tl.arange(0, BLOCK_N)
        ptrs = c_ptr + om[:, None].to(tl.int64) * stride_cm + on[None, :]
        tl.store(ptrs, acc.to(c_ptr.dtype.element_ty), mask=(om[:, None] < M) & (on[None, :] < N))
    elif SUBTILE:
        acc3 = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
        acc0, acc1 = tl.split(acc3)
        c_desc.store([off_m, off_n], acc0.to(c_desc.dtype))
        c_desc.store([off_m, off_n + BLOCK_N // 2], acc1.to(c_desc.dtype))
    else:
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


@triton.jit(do_not_specialize=["M", "K", "TILE_END", "M_BUCKET", "K_BUCKET", "LAYOUT"])
def persistent_kernel(
    a_desc, b_desc, c_desc, c_ptr, stride_cm, M, N, K, TILE_END, M_BUCKET, K_BUCKET, LAYOUT,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    A_T: tl.constexpr, B_T: tl.constexpr, FLATTEN: tl.constexpr, WS: tl.constexpr,
    SUBTILE: tl.constexpr, C_PTR: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """Persistent: program p runs tiles p, p + grid, ... < TILE_END (grouped order). FLATTEN lets
    Triton pipeline the next tile's loads under this tile's epilogue (the persistent-matmul
    tutorial's schedule); the epilogue tile index is a second counter for that reason."""
    # I/O: read A (M*K) + B (K*N) + write C (M*N) elements; 2*M*N*K FLOPs.
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    start = tl.program_id(0)
    step = tl.num_programs(0)
    tile_c = start - step
    for tile in tl.range(start, TILE_END, step, flatten=FLATTEN, warp_specialize=WS):
        pid_m, pid_n = _tile_ids(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = _acc(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, 0, k_tiles, BLOCK_K, BLOCK_M,
                   BLOCK_N, A_T, B_T, UPCAST)  # fmt: skip
        tile_c += step
        pid_m, pid_n = _tile_ids(tile_c, num_pid_m, num_pid_n, GROUP_M)
        _store_tile(c_desc, c_ptr, stride_cm, acc, pid_m * BLOCK_M, pid_n * BLOCK_N, M, N,
                    BLOCK_M, BLOCK_N, SUBTILE, C_PTR)  # fmt: skip


@triton.jit(do_not_specialize=["M", "K", "TILE0", "TILES", "STEPS", "M_BUCKET", "K_BUCKET",
                               "LAYOUT"])  # fmt: skip
def split_kernel(
    a_desc, b_desc, p_ptr, M, N, K, TILE0, TILES, STEPS, M_BUCKET, K_BUCKET, LAYOUT,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    A_T: tl.constexpr, B_T: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """Split-K over tiles [TILE0, TILE0 + TILES) (grouped order): program pid = s * TILES + t sums
    K steps [s * STEPS, (s + 1) * STEPS) of tile TILE0 + t into FP32 block pid of p (tile-local
    BLOCK_M x BLOCK_N layout, no masks); split_reduce_kernel adds the splits in a fixed order."""
    # I/O: read A, B panels of STEPS * BLOCK_K; write BLOCK_M * BLOCK_N FP32.
    pid = tl.program_id(0)
    t = pid % TILES
    s = pid // TILES
    pid_m, pid_n = _tile_ids(TILE0 + t, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    k0 = s * STEPS
    k1 = tl.minimum(k0 + STEPS, tl.cdiv(K, BLOCK_K))
    acc = _acc(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, k0, k1, BLOCK_K, BLOCK_M,
               BLOCK_N, A_T, B_T, UPCAST)  # fmt: skip
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(p_ptr + pid.to(tl.int64) * (BLOCK_M * BLOCK_N) + offs, acc)


@triton.jit(do_not_specialize=["M", "TILE0", "TILES", "SPLIT"])
def split_reduce_kernel(
    p_ptr, c_ptr, M, N, stride_cm, TILE0, TILES, SPLIT,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, ROWS: tl.constexpr,
):  # fmt: skip
    """C rows [r * ROWS, (r + 1) * ROWS) of tile TILE0 + t = sum of its SPLIT partial blocks in the
    order 0, 1, ..., SPLIT - 1 (bit-identical run to run), one rounding, masked store."""
    # I/O: read SPLIT * ROWS * BLOCK_N FP32, write ROWS * BLOCK_N elements of C.
    t = tl.program_id(0)
    rows = tl.program_id(1) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    offs = rows[:, None] * BLOCK_N + cols[None, :]
    acc = tl.load(p_ptr + t.to(tl.int64) * (BLOCK_M * BLOCK_N) + offs)
    for s in range(1, SPLIT):
        acc += tl.load(p_ptr + (s * TILES + t).to(tl.int64) * (BLOCK_M * BLOCK_N) + offs)
    pid_m, pid_n = _tile_ids(TILE0 + t, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    om = pid_m * BLOCK_M + rows
    on = pid_n * BLOCK_N + cols
    ptrs = c_ptr + om[:, None].to(tl.int64) * stride_cm + on[None, :]
    tl.store(ptrs, acc.to(c_ptr.dtype.element_ty), mask=(om[:, None] < M) & (on[None, :] < N))


@triton.jit(do_not_specialize=["R", "C", "s_r", "d_r"])
def pad_copy_kernel(src, dst, R, C, s_r, d_r, BR: tl.constexpr, BC: tl.constexpr):
    """dst[:R, :C] = src[:R, :C] for row-major src/dst (dst rows padded to 16 bytes)."""
    # I/O: read R*C + write R*C elements.
    rows = tl.program_id(0) * BR + tl.arange(0, BR)
    cols = tl.program_id(1) * BC + tl.arange(0, BC)
    mask = (rows[:, None] < R) & (cols[None, :] < C)
    r64 = rows[:, None].to(tl.int64)
    x = tl.load(src + r64 * s_r + cols[None, :], mask=mask)
    tl.store(dst + r64 * d_r + cols[None, :], x, mask=mask)


def _boxes(a, b, c, meta: dict):
    """Descriptors with the boxes of ``meta``; with ``C_PTR`` C gets no descriptor (the A
    descriptor stands in as the unused argument) and may be any row-major tensor."""
    a_t, b_t = a.stride(1) != 1, b.stride(1) != 1
    ad, bd = _desc(a, a_t), _desc(b, b_t)
    bm, bn, bk = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]
    ad.block_shape = [bk, bm] if a_t else [bm, bk]
    bd.block_shape = [bn, bk] if b_t else [bk, bn]
    cd = ad
    if c is not None and not meta.get("C_PTR"):
        cd = _desc(c, False)
        cd.block_shape = [bm, bn // 2] if meta.get("SUBTILE") else [bm, bn]
    return ad, bd, cd, a_t, b_t


def _opts(meta: dict) -> dict:
    return dict(num_warps=meta.get("num_warps", 8), num_stages=meta.get("num_stages", 3))


def run_persistent(a, b, c, meta: dict, sms: int, keys=(1, 1, 0), tile_end=None, upcast=False):
    """c = a @ b (tiles [0, tile_end)) through ``persistent_kernel`` with config ``meta``
    (BLOCK_M/N/K, FLATTEN, WS, SUBTILE, C_PTR, num_warps, num_stages)."""
    from ._launch import launch

    M, K = a.shape
    N = b.shape[1]
    bm, bn = meta["BLOCK_M"], meta["BLOCK_N"]
    ad, bd, cd, a_t, b_t = _boxes(a, b, c, meta)
    end = triton.cdiv(M, bm) * triton.cdiv(N, bn) if tile_end is None else tile_end
    launch(
        persistent_kernel, (min(end, sms),), ad, bd, cd, c, c.stride(0), M, N, K, end, *keys,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=meta["BLOCK_K"], GROUP_M=8, A_T=a_t, B_T=b_t,
        FLATTEN=bool(meta.get("FLATTEN")), WS=bool(meta.get("WS")),
        SUBTILE=bool(meta.get("SUBTILE")), C_PTR=bool(meta.get("C_PTR")), UPCAST=upcast,
        **_opts(meta),
    )  # fmt: skip


def run_split(a, b, c, meta: dict, split: int, tile0=0, tiles=None, keys=(1, 1, 0), upcast=False):
    """Tiles [tile0, tile0 + tiles) of c = a @ b as ``split`` K ranges each, FP32 partials, then
    the fixed-order reduction. C must be row-major (any row stride)."""
    from ._launch import empty, launch

    M, K = a.shape
    N = b.shape[1]
    bm, bn, bk = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]
    if tiles is None:
        tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn) - tile0
    ad, bd, _, a_t, b_t = _boxes(a, b, None, meta)
    steps = triton.cdiv(triton.cdiv(K, bk), split)
    part = empty((split * tiles, bm, bn), torch.float32, a.device)
    launch(
        split_kernel, (split * tiles,), ad, bd, part, M, N, K, tile0, tiles, steps, *keys,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, A_T=a_t, B_T=b_t, UPCAST=upcast,
        **_opts(meta),
    )  # fmt: skip
    rows = max(1, min(bm, 4096 // bn))
    launch(
        split_reduce_kernel, (tiles, bm // rows), part, c, M, N, c.stride(0), tile0, tiles, split,
        BLOCK_M=bm, BLOCK_N=bn, GROUP_M=8, ROWS=rows, num_warps=4,
    )  # fmt: skip


def run_hybrid(a, b, c, meta: dict, split: int, sms: int, keys=(1, 1, 0), upcast=False):
    """Whole waves persistent, the last partial wave's tiles split ``split`` ways along K."""
    M, K = a.shape
    N = b.shape[1]
    tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
    main = tiles // sms * sms
    if main:
        run_persistent(a, b, c, meta, sms, keys, main, upcast)
    if tiles > main:
        run_split(a, b, c, meta, split, main, tiles - main, keys, upcast)


def pad_rows(t: torch.Tensor) -> torch.Tensor:
    """A row-major copy of row-major ``t`` whose rows are padded to 16 bytes (one Triton copy)."""
    from ._launch import empty, launch

    R, C = t.shape
    buf = empty((R, triton.cdiv(C, 8) * 8), t.dtype, t.device)
    launch(pad_copy_kernel, (triton.cdiv(R, 16), triton.cdiv(C, 256)), t, buf, R, C,
           t.stride(0), buf.stride(0), BR=16, BC=256, num_warps=4)  # fmt: skip
    return buf[:, :C]
