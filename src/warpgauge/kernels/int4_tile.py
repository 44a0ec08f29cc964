"""The tile kernel of the INT4 linear (``Int4Plan(kernel="tile")``, batch >= 2) and its launcher.

One program owns a ``BLOCK_N x BLOCK_M`` tile of ``y^T`` (weight rows x batch rows) and steps one
group of K per iteration in a ``tl.range(..., num_stages=STAGES)`` loop, so Triton's pipeliner
keeps the packed weight bytes, the scales and x of the next steps in flight as asynchronous copies
while the current group decodes (``int4_kernels._dequant_halves``: the PTX decode on the GPU) and
multiplies on tensor cores. The decoded halves (even k, odd k) feed two dots directly:

- ``XPERM`` (the large-batch form): the launcher first copies x once into a per-group permuted
  order (the group's even k, then its odd k), so both halves of x are contiguous loads straight
  into shared memory for wgmma's B operand, and the decoded weight is wgmma's register A operand
  (no shuffle of x or of the weight in registers). The copy reads and writes M*K elements once.
- otherwise (``W_AS_B``, the GEMV form for M <= 16): x is loaded contiguously and split into its
  halves in registers (the tile is 16 rows), the decoded weight is the dot's B side.

``MODE`` says what multiplies x:
- 0: the exact integers q: one product per group, scaled by the group's scale in FP32 and added
  to the accumulator (the INT4 contract: the exact dequantized weight, FP32 accumulation).
- 1: the exact weight ``w = q * s`` (FP32, exact) split into ``hi = dtype(w)`` and
  ``lo = dtype(w - hi)`` (``q * s`` has at most 14 significant bits, so ``hi + lo == w``): both go
  through the dots into one accumulator that runs across groups (wgmma's accumulator stays in
  place, so consecutive dots can be issued back to back), at twice the tensor-core work.
- 2: the weight rounded once to x's dtype (``dtype(q * s)``: what dense ``F.linear`` on the
  dequantized weight multiplies, Marlin's numerics). Not the INT4 contract: forced plans only.

Split K (``SPLIT_K > 1``) writes FP32 partials ``[SPLIT_K, M, N]``. With ``FUSED`` the last
program of each output tile to finish (an atomic counter per tile, reset by that program) adds the
partials in the fixed order ``0 .. SPLIT_K - 1`` and stores y: the same additions in the same
order as the separate reduction kernel (bit-identical results, no data atomics), one launch less.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import _launch
from ._launch import cdiv, launch, next_pow2
from .int4_kernels import _dequant_halves, _scaled

MAX_FUSED_TILES = 8192  # counters per (device, stream); larger grids use the reduction kernel
_COUNTERS: dict = {}


@triton.jit
def _hilo(q, sc, X_BF16: tl.constexpr, UPCAST: tl.constexpr):
    """Exact weight q * scale (FP32) as hi + lo in x's dtype (FP32-held under the interpreter)."""
    w = q.to(tl.float32) * sc[:, None]
    dt = tl.bfloat16 if X_BF16 else tl.float16
    h = w.to(dt)
    lo = (w - h.to(tl.float32)).to(dt)
    if UPCAST:
        return h.to(tl.float32), lo.to(tl.float32)
    return h, lo


@triton.jit
def _group_dot(acc, lo, hi, xe, xo, sc, MODE: tl.constexpr, W_AS_B: tl.constexpr,
               X_BF16: tl.constexpr, UPCAST: tl.constexpr):  # fmt: skip
    """acc += one group's product. lo / hi: decoded [BN, HALF] even-k / odd-k weight values;
    xe / xo: x's [BM, HALF] even-k / odd-k values; sc: [BN] FP32 scales. acc is [BM, BN] when
    W_AS_B, else [BN, BM]."""
    if MODE == 0:
        if W_AS_B:
            part = tl.dot(xe, tl.trans(lo))
            part = tl.dot(xo, tl.trans(hi), part)
            acc += part * sc[None, :]
        else:
            part = tl.dot(lo, tl.trans(xe))
            part = tl.dot(hi, tl.trans(xo), part)
            acc += part * sc[:, None]
    elif MODE == 1:
        lh, ll = _hilo(lo, sc, X_BF16, UPCAST)
        hh, hl = _hilo(hi, sc, X_BF16, UPCAST)
        if W_AS_B:
            acc = tl.dot(xe, tl.trans(lh), acc)
            acc = tl.dot(xo, tl.trans(hh), acc)
            acc = tl.dot(xe, tl.trans(ll), acc)
            acc = tl.dot(xo, tl.trans(hl), acc)
        else:
            acc = tl.dot(lh, tl.trans(xe), acc)
            acc = tl.dot(hh, tl.trans(xo), acc)
            acc = tl.dot(ll, tl.trans(xe), acc)
            acc = tl.dot(hl, tl.trans(xo), acc)
    else:
        lr = _scaled(lo, sc, X_BF16, UPCAST)
        hr = _scaled(hi, sc, X_BF16, UPCAST)
        if W_AS_B:
            acc = tl.dot(xe, tl.trans(lr), acc)
            acc = tl.dot(xo, tl.trans(hr), acc)
        else:
            acc = tl.dot(lr, tl.trans(xe), acc)
            acc = tl.dot(hr, tl.trans(xo), acc)
    return acc


@triton.jit(do_not_specialize=["M", "split_k"])
def _int4_tile_kernel(x_ptr, w_ptr, s_ptr, y_ptr, part_ptr, cnt_ptr, M, N, K, split_k,
                      stride_xm, stride_xk, stride_wn, stride_sn, stride_ym, stride_yn,
                      GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      HAS_SPLIT: tl.constexpr, MODE: tl.constexpr, XPERM: tl.constexpr,
                      W_AS_B: tl.constexpr, FUSED: tl.constexpr, TMA: tl.constexpr, X_BF16: tl.constexpr,
                      UPCAST: tl.constexpr, ASM: tl.constexpr, STAGES: tl.constexpr):  # fmt: skip
    # I/O (compulsory): read packed N*K/2 B + scales N*K/GROUP + x M*K (once per N-tile, from
    # L2 after the first), write y M*N; split_k > 1 also writes + reads split_k*M*N FP32
    # partials (split_k is a runtime value: a new split compiles nothing). FLOPs 2*M*N*K (MODE 1
    # issues twice that on tensor cores).
    HALF: tl.constexpr = GROUP // 2
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % num_pid_m  # the M-tiles of one N-tile run together: its weight stays in L2
    pid_n = pid // num_pid_m
    n_groups = K // GROUP
    per_split = tl.cdiv(n_groups, split_k)
    g_start = pid_k * per_split
    g_end = tl.minimum(g_start + per_split, n_groups)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows = (offs_n % N).to(tl.int64)  # wrapped: the last tile re-reads valid rows
    ms = (offs_m % M).to(tl.int64)
    jj = tl.arange(0, HALF)
    s_ptrs = s_ptr + rows * stride_sn + g_start
    if TMA:  # x_ptr and w_ptr are TMA descriptors; no pointers to build
        w_ptrs = s_ptrs
        x_ptrs = s_ptrs
    elif XPERM:
        w_ptrs = (
            w_ptr + rows[:, None] * stride_wn + g_start * HALF + jj[None, :]
        )  # x rows permuted per group (even k, then odd k), unit k stride
        x_ptrs = x_ptr + ms[:, None] * stride_xm + (g_start * GROUP + jj)[None, :]
    else:
        w_ptrs = w_ptr + rows[:, None] * stride_wn + g_start * HALF + jj[None, :]
        kk = tl.arange(0, GROUP)
        x_ptrs = (
            x_ptr
            + ms[:, None] * stride_xm
            + (g_start * GROUP + kk).to(tl.int64)[None, :] * stride_xk
        )
    if W_AS_B:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    # The scales are 2-byte loads per row, too narrow for cp.async, so the pipeliner leaves them
    # synchronous: they are prefetched by hand, one group ahead, in registers.
    sc_nx = tl.load(s_ptrs, mask=(rows * 0 + g_start) < g_end, other=0.0)
    for g in tl.range(g_start, g_end, num_stages=STAGES):
        if TMA:  # x_ptr, w_ptr are descriptors (XPERM): rows past M / N read as zeros
            b = w_ptr.load([pid_n * BLOCK_N, g * HALF])
        else:
            b = tl.load(w_ptrs)
            w_ptrs += HALF
        sc = sc_nx.to(tl.float32)
        sc_nx = tl.load(s_ptrs + 1, mask=(rows * 0 + g + 1) < g_end, other=0.0)
        if TMA:
            xe = x_ptr.load([pid_m * BLOCK_M, g * GROUP])
            xo = x_ptr.load([pid_m * BLOCK_M, g * GROUP + HALF])
        elif XPERM:
            xe = tl.load(x_ptrs)
            xo = tl.load(x_ptrs + HALF)
            x_ptrs += GROUP
        else:
            xe, xo = tl.split(tl.reshape(tl.load(x_ptrs), (BLOCK_M, HALF, 2)))
            x_ptrs += GROUP * stride_xk
        s_ptrs += 1
        if UPCAST:
            xe = xe.to(tl.float32)
            xo = xo.to(tl.float32)
        lo, hi = _dequant_halves(b, X_BF16, UPCAST, ASM, False)
        acc = _group_dot(acc, lo, hi, xe, xo, sc, MODE, W_AS_B, X_BF16, UPCAST)
    if W_AS_B:
        m_idx = offs_m[:, None]
        n_idx = offs_n[None, :]
    else:
        m_idx = offs_m[None, :]
        n_idx = offs_n[:, None]
    mask = (m_idx < M) & (n_idx < N)
    y_ptrs = y_ptr + m_idx.to(tl.int64) * stride_ym + n_idx.to(tl.int64) * stride_yn
    if not HAS_SPLIT:
        tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        total = M.to(tl.int64) * N
        p_ptrs = part_ptr + m_idx.to(tl.int64) * N + n_idx
        tl.store(p_ptrs + pid_k * total, acc, mask=mask)
        if FUSED:
            tl.debug_barrier()  # every thread's partial is stored before the counter moves
            done = tl.atomic_add(cnt_ptr + pid, 1, sem="acq_rel", scope="gpu")
            if done == split_k - 1:  # the last split of this tile: reduce in the fixed order
                out = tl.load(p_ptrs, mask=mask, other=0.0, cache_modifier=".cg")
                for s in range(1, split_k):
                    out += tl.load(p_ptrs + s * total, mask=mask, other=0.0, cache_modifier=".cg")
                tl.store(y_ptrs, out.to(y_ptr.dtype.element_ty), mask=mask)
                tl.atomic_xchg(cnt_ptr + pid, 0)  # ready for the next call


def check_tile_fields(plan) -> None:
    """Validation of ``Int4Plan``'s tile-kernel fields (``kernel``, ``mode``, ``tma``, ``fused``)."""
    if plan.kernel not in ("mm", "tile"):
        raise ValueError(f"kernel must be 'mm' or 'tile', got {plan.kernel!r}")
    if plan.kernel == "tile" and (plan.block_m < 16 or plan.pipeline):
        raise ValueError(
            f"kernel='tile' needs block_m >= 16 and pipeline=0, got block_m={plan.block_m}, "
            f"pipeline={plan.pipeline}"
        )
    if plan.mode not in (0, 1, 2) or (plan.mode and plan.kernel != "tile"):
        raise ValueError(
            f"mode must be 0 (exact q), 1 (exact hi + lo) or 2 (rounded weight), the last two "
            f"with kernel='tile' only; got mode={plan.mode}, kernel={plan.kernel!r}"
        )
    if plan.tma and (plan.kernel != "tile" or plan.block_m <= 16):
        raise ValueError(
            f"tma=True (x and the packed weight through TMA descriptors) needs kernel='tile' "
            f"and block_m > 16, got kernel={plan.kernel!r}, block_m={plan.block_m}"
        )
    if plan.fused and plan.kernel != "tile" and not (plan.block_m == 1 and plan.pipeline):
        raise ValueError(
            "fused=True (the split-K reduction in the kernel) needs kernel='tile' or the "
            "pipelined FMA GEMV (block_m=1, pipeline >= 2)"
        )


@triton.jit
def _permute_x_kernel(x_ptr, y_ptr, M, K, stride_xm, stride_xk, GROUP: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    """y[m, g * GROUP + j] = x[m, g * GROUP + 2j] for j < GROUP / 2, else x[m, g * GROUP + 2(j -
    GROUP / 2) + 1]: each group's even k, then its odd k; y contiguous, x any strides."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    HALF: tl.constexpr = GROUP // 2
    j = k % GROUP
    src = k - j + tl.where(j < HALF, 2 * j, 2 * (j - HALF) + 1)
    mask = (rm < M)[:, None] & (k < K)[None, :]
    rows = rm.to(tl.int64)[:, None]
    v = tl.load(x_ptr + rows * stride_xm + src.to(tl.int64)[None, :] * stride_xk, mask=mask)
    tl.store(y_ptr + rows * K + k[None, :], v, mask=mask)


PERMUTE_BLOCK_M, PERMUTE_BLOCK_K = 4, 1024


def permute_x(x2: torch.Tensor, group_size: int) -> torch.Tensor:
    """x [M, K] -> contiguous [M, K] with each group's even k first, then its odd k: one Triton
    copy into a ``_launch.empty`` output, so an eager call that permutes x is still recorded and
    replayed (``_replay``: a torch reshape copy would make every such call run the launcher, about
    160 us of host time at 256x14336x4096, experiments/padhost_probe.py)."""
    M, K = x2.shape
    y = _launch.empty((M, K), x2.dtype, x2.device)
    if M and K:
        grid = (cdiv(M, PERMUTE_BLOCK_M), cdiv(K, PERMUTE_BLOCK_K))
        launch(_permute_x_kernel, grid, x2, y, M, K, x2.stride(0), x2.stride(1),
               GROUP=group_size, BLOCK_M=PERMUTE_BLOCK_M, BLOCK_K=PERMUTE_BLOCK_K,
               num_warps=4)  # fmt: skip
    return y


def _tracing(t: torch.Tensor) -> bool:
    """torch.compile / wrap_triton tracing, or fake / meta tensors (no real data to cache)."""
    from torch._subclasses.fake_tensor import FakeTensor

    from ._launch import _wrap_enabled

    if torch.compiler.is_compiling() or (_wrap_enabled is not None and _wrap_enabled()):
        return True
    return t.is_meta or isinstance(t, FakeTensor)


def _counters(device, tiles: int, tracing: bool = False) -> torch.Tensor:
    """Zeroed int32 counters, one per output tile; the reducing program resets its own to zero.
    Cached per (device, stream) outside tracing; a fresh zeroed tensor while tracing."""
    if tracing or tiles > MAX_FUSED_TILES:
        return torch.zeros(max(tiles, 1), dtype=torch.int32, device=device)
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream)
    buf = _COUNTERS.get(key)
    if buf is None:
        buf = _COUNTERS[key] = torch.zeros(MAX_FUSED_TILES, dtype=torch.int32, device=device)
        _launch.WORKSPACES[buf.data_ptr()] = stream  # a replay may pass it as a constant
    return buf


def fused_ok(tiles: int) -> bool:
    return tiles <= MAX_FUSED_TILES


def launch_tile(plan, grid, x2, packed, scales, y, part, group_size, upcast, asm):
    """Launch ``_int4_tile_kernel`` for ``plan`` (``kernel == "tile"``); the caller reduces the
    partials when ``plan.split_k > 1`` and the plan is not fused. Returns whether it reduced."""
    M, K = x2.shape
    N = packed.shape[0]
    w_as_b = plan.block_m <= 16
    xperm = not w_as_b
    xs = permute_x(x2, group_size) if xperm else x2
    fused = plan.split_k > 1 and plan.fused and fused_ok(grid[0])
    tracing = _tracing(x2)
    cnt = _counters(x2.device, grid[0], tracing) if fused else part
    xa, wa = xs, packed
    # TMA needs 16-byte aligned bases; traced graphs take the pointer loads (cp.async)
    if plan.tma and not tracing and packed.data_ptr() % 16 == 0:
        from triton.tools.tensor_descriptor import TensorDescriptor

        half = group_size // 2
        xa = TensorDescriptor(xs, [M, K], [K, 1], [plan.block_m, half])
        wa = TensorDescriptor(packed, [N, K // 2], [K // 2, 1], [plan.block_n, half])
    launch(_int4_tile_kernel, grid,
        xa, wa, scales, y, part, cnt, M, N, K, plan.split_k,
        xs.stride(0), xs.stride(1), packed.stride(0), scales.stride(0), y.stride(0), y.stride(1),
        GROUP=group_size, BLOCK_M=plan.block_m, BLOCK_N=plan.block_n, HAS_SPLIT=plan.split_k > 1,
        MODE=plan.mode, XPERM=xperm, W_AS_B=w_as_b, FUSED=fused, TMA=xa is not xs,
        X_BF16=x2.dtype == torch.bfloat16, UPCAST=upcast, ASM=asm, STAGES=plan.num_stages,
        num_warps=plan.num_warps, num_stages=plan.num_stages,
    )  # fmt: skip
    return fused


# --------------------------------------------------------------------------------------------
# The batch >= 2 rule (Int4Plan.for_shape calls it with the plan of the mm-kernel rule). Every
# threshold is from one H200 sweep, results/int4big-h200/int4big.json (cold us; "old" is the
# mm-kernel rule, the plan this function receives). Splits come from the SM count, never a list.
# Below SMALL_WEIGHT (N * K < 2^25, e.g. 4096 x 4096) fixed per-call costs decide: the x
# permutation's copy does not pay, and neither (measured again in int4s10) does the fused reduction.
SMALL_WEIGHT = 1 << 25
SMALL_WEIGHT_FUSED = False
# 2 <= M <= 16, N * K < SMALL_WEIGHT: the GEMV form with the old rule's tile and split, the
# split-K reduced by the reduction kernel (SMALL_WEIGHT_FUSED). int4big measured the fused
# reduction faster: 4096^2 batch 2 / 4 / 8 / 16 (128 rows, split 8) 12.5 / 12.5 / 12.4 / 12.9
# against 12.6 / 13.5 / 13.6 / 13.5 for the mm kernel (unfused: batch 4 / 16 13.1 / 13.2), in a
# cold lane whose flush left dirty lines in L2. With a clean flush (a write, then a read of 2x L2;
# results/int4s10-h200/round2) the unfused tile kernel was faster: batch 4 12.99 against 12.90
# for 64 rows x 2 warps and 13.41 fused, batch 16 13.06 against 14.11 fused; the batch-1 GEMV's
# in-kernel reduction lost by 1.6-2.2 us there too (round1). Larger weights keep the
# mm kernel: there the fused reduction cost 0.1-1.2 us (8192^2, 14336x4096; 1.1-2.7 us at split 16,
# 4096x14336) and the unfused GEMV form was within 1-3.5% of the mm kernel (25.3 / 25.5 / 22.4 /
# 22.8 against 25.6 / 25.8 / 22.9 / 23.6 at batch 4 / 16), measured at only 4 of its 17 points.
# 17 <= M <= 64, N * K >= SMALL_WEIGHT: the large-batch form, 4 warps, TMA loads, the split that
# reaches TILE_PROGRAMS_PER_SM programs per SM (>= 4 groups per split), the reduction kernel
# (TILE_SPLIT_FUSED; int4big's times below are of the fused reduction).
# batch 32: 32 x 64 tiles, 2 per SM: 14336x4096 32.1 (old 35.0), 8192^2 33.6 (37.4);
# batch 64: 64 x 64 tiles (127 registers, 57 KB shared: 3 programs per SM), 3 per SM:
# 4096x14336 43.6 (46.8), 14336x4096 40.2 (40.1), 8192^2 44.7 (44.4).
# 4096^2 lost at every tile (32: 18.8 against 15.1; 64: 21.7 against 17.4): the old plan stays.
TILE_PROGRAMS_PER_SM = {32: 2.0, 64: 3.0}
# The split-K of those tiles reduced by the reduction kernel, not fused in the tile kernel: in
# int4b11's sweep (results/int4b11-h200/sweep.jsonl, clean-flush graph timing, 7 model weights
# x batch 32 / 64, each tile plan timed fused and not) the separate reduction was faster in all
# 32 pairs, by 1.02-1.14x (geomean 1.057x at batch 32, 1.072x at batch 64); bit-identical
# results either way (the same additions in the same order).
TILE_SPLIT_FUSED = False
# 64 < M <= 256: 128 x 64 tiles, 4 warps, TMA, no split, when those tiles alone make at least
# TILE_WIDE_TILES_PER_SM per SM (448-4008 tiles measured, 1.14-1.22x the old plan: 256x14336x4096
# 75.3 (85.9), 128x28672x8192 139.7 (164.5), 256x28672x8192 265.0 (310.4), 256x128256x4096 514.5
# (626.9)). With fewer tiles every split of the tile kernel lost to the old plan (128x14336x4096:
# 51.5 at split 2 against 45.0; 256x8192^2 88.7 against 84.8), so the old plan stays there.
TILE_WIDE_TILES_PER_SM = 3
TILE_WIDE_MAX_M = 256


def _split(tiles, sm_count, per_sm, n_groups, min_groups=4, max_split=16) -> int:
    split = 1
    while tiles * split < per_sm * sm_count and n_groups >= 2 * split * min_groups:
        if split >= max_split:
            break
        split *= 2
    return split


def tile_rule(fields: dict, M: int, N: int, K: int, sm_count: int, group_size: int) -> dict:
    """The plan fields for batch ``M >= 2``: ``fields`` (the mm-kernel rule's plan) moved to the
    tile kernel where the H200 sweep measured it faster (the table above), else unchanged."""
    if M < 2 or group_size < 32 or group_size & (group_size - 1):
        return fields
    small = N * K < SMALL_WEIGHT
    if M <= 16:
        return dict(fields, kernel="tile", fused=SMALL_WEIGHT_FUSED) if small else fields
    n_groups = max(K // group_size, 1)
    n_cap = max(16, next_pow2(N))
    if M <= 64 and not small:
        bm = max(32, next_pow2(M))
        bn = min(64, n_cap)
        tiles = cdiv(M, bm) * cdiv(N, bn)
        split = _split(tiles, sm_count, TILE_PROGRAMS_PER_SM[bm], n_groups)
    elif 64 < M <= TILE_WIDE_MAX_M:
        bm, bn, split = 128, min(64, n_cap), 1
        if cdiv(M, bm) * cdiv(N, bn) < TILE_WIDE_TILES_PER_SM * sm_count:
            return fields
    else:
        return fields
    fused = TILE_SPLIT_FUSED if M <= 64 else True  # (the wide tiles have no split)
    return dict(block_m=bm, block_n=bn, groups_per_iter=1, split_k=split, num_warps=4,
                num_stages=3, pipeline=0, kernel="tile", fused=fused, tma=True)  # fmt: skip
