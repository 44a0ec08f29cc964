"""TMA GEMM schedules beyond ``gemm_tma.tma_kernel``: a persistent kernel with a flattened tile loop,
split-K, and the padded-row copy that makes unaligned operands TMA-eligible.

``persistent_kernel`` (dispatched, see ``gemm_tma.choose``)
    Program p runs tiles p, p + grid, ... in grouped order. ``FLATTEN`` merges the tile and K
    loops for Triton's pipeliner, so the next tile's first loads are issued under this tile's
    epilogue (Triton's persistent-matmul tutorial); ``WS`` asks for warp specialization of that
    loop; ``SUBTILE`` stores C in two column halves (half the epilogue's shared memory);
    ``C_PTR`` stores C through masked pointers instead of a TMA box, for a C whose rows TMA cannot
    address (an odd N). With a grid of one program per tile it is the non-persistent schedule.

``pad_rows``, ``padded_empty``, ``copy_rows`` (dispatched by the pad path)
    One Triton copy of a row-major operand into rows padded to 16 bytes (``pad_copy_kernel``), and
    back for an unaligned C. On the H200 the copies made 4095^3 273 us against 312 with torch's
    ``copy_`` (results/gemm-shapes-h200/round1.json). Rows already 16-byte aligned are copied in
    16-byte vectors (``VEC``).

``line_choice``, ``line_padded`` (dispatched by the line path)
    For an NT product whose operands both have rows off 128-byte lines, one operand copied onto
    128-byte rows when the cost model says it pays (see the comment above ``LINE_GAP``).

``split_kernel`` + ``split_reduce_kernel`` (dispatched for few output tiles with long K, see
``gemm_tma.split_count``), ``run_hybrid`` (swept, not dispatched)
    Split-K over some tiles into FP32 partials in a tile-local layout, added in the fixed order
    0..split-1 (no atomics, the same bits every run); ``run_hybrid`` runs whole waves persistent and
    splits only the last partial wave. Where K is short they lost on the H200 (round1.json):
    split-K 13.9-20.2 us at 1024^3 against 10.8 for 64x128 tiles; the split tail of 128x256 tiles
    238 us at 4096x4104x4096 against 209 for 256x128 tiles, which need no tail there. With K =
    16384 over a 1024x1024 output, 4 splits of 128x256 tiles won (gemm-95-h200/round1.json).
    ``run_split(fused=True)`` reduces inside ``split_kernel`` instead (the last split of each tile,
    same order, same bits); it lost at every product of the gemm11b round (gemm.SPLIT_FUSED).

Traffic (compulsory): read A (M*K) + B (K*N) + write C (M*N) elements; FLOPs 2*M*N*K; split-K
adds split*tiles*BLOCK_M*BLOCK_N FP32 written and read back; a padded copy reads and writes its
operand once more.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._launch import cdiv, empty, launch
from .gemm_tma import _desc, _tile_ids

__all__ = ["persistent_kernel", "run_persistent", "pad_rows", "padded_empty", "copy_rows",
           "pad_copy_kernel", "split_kernel", "split_reduce_kernel", "run_split", "run_hybrid",
           "run_transposed", "counters", "MAX_FUSED_TILES", "line_choice", "line_class",
           "line_padded"]  # fmt: skip


@triton.jit
def _acc(a_desc, b_desc, off_m, off_n, k0, k1, BLOCK_K: tl.constexpr, BLOCK_M: tl.constexpr,
         BLOCK_N: tl.constexpr, A_T: tl.constexpr, B_T: tl.constexpr, UPCAST: tl.constexpr,
         WS: tl.constexpr = False):  # fmt: skip
    """FP32 sum over K steps [k0, k1) of one tile (plain loop: the caller's loop is pipelined;
    ``WS`` warp-specializes this loop, for callers without an outer loop: split_kernel)."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in tl.range(k0, k1, warp_specialize=WS):
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
                BLOCK_N: tl.constexpr, SUBTILE: tl.constexpr, C_PTR: tl.constexpr,
                C_T: tl.constexpr = False):  # fmt: skip
    """One rounding, then a TMA store (whole or in two column halves) or a masked pointer store
    (C_PTR: for a C whose rows TMA cannot address, e.g. an odd N). C_T: the product is C^T, so
    the tile is stored transposed through a descriptor over the row-major C (box BN x BM)."""
    if C_T:
        c_desc.store([off_n, off_m], tl.trans(acc).to(c_desc.dtype))
    elif C_PTR:
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
    SUBTILE: tl.constexpr, C_PTR: tl.constexpr, UPCAST: tl.constexpr, C_T: tl.constexpr = False,
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
                    BLOCK_M, BLOCK_N, SUBTILE, C_PTR, C_T)  # fmt: skip


@triton.jit(do_not_specialize=["M", "K", "TILE0", "TILES", "STEPS", "M_BUCKET", "K_BUCKET",
                               "LAYOUT", "SPLIT", "stride_cm"])  # fmt: skip
def split_kernel(
    a_desc, b_desc, p_ptr, M, N, K, TILE0, TILES, STEPS, M_BUCKET, K_BUCKET, LAYOUT,
    cnt_ptr, c_ptr, stride_cm, SPLIT,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    A_T: tl.constexpr, B_T: tl.constexpr, UPCAST: tl.constexpr, WS: tl.constexpr = False,
    FUSED: tl.constexpr = False, ROWS: tl.constexpr = 16, FSPLIT: tl.constexpr = 1,
):  # fmt: skip
    """Split-K over tiles [TILE0, TILE0 + TILES) (grouped order): program pid = s * TILES + t sums
    K steps [s * STEPS, (s + 1) * STEPS) of tile TILE0 + t into FP32 block pid of p (tile-local
    BLOCK_M x BLOCK_N layout, no masks); split_reduce_kernel adds the splits in a fixed order.
    ``FUSED``: instead, the last of the SPLIT programs of a tile to finish (an int32 counter per
    tile, ``cnt_ptr[t]``, counted with an acq_rel atomic and reset to 0 by that program) adds the
    SPLIT blocks in the order 0, 1, ..., SPLIT - 1, ROWS rows at a time, and stores C: the same
    additions in the same order as split_reduce_kernel (bit-identical), one launch less. FSPLIT
    (== SPLIT when FUSED) unrolls that sum, so a chunk's SPLIT loads are all in flight at once:
    one SM reads SPLIT * BLOCK_M * BLOCK_N FP32 from L2 there, so it is latency-bound otherwise."""
    # I/O: read A, B panels of STEPS * BLOCK_K; write BLOCK_M * BLOCK_N FP32 (FUSED, last split:
    # read SPLIT * BLOCK_M * BLOCK_N FP32, write BLOCK_M * BLOCK_N elements of C).
    pid = tl.program_id(0)
    t = pid % TILES
    s = pid // TILES
    pid_m, pid_n = _tile_ids(TILE0 + t, tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    k0 = s * STEPS
    k1 = tl.minimum(k0 + STEPS, tl.cdiv(K, BLOCK_K))
    acc = _acc(a_desc, b_desc, pid_m * BLOCK_M, pid_n * BLOCK_N, k0, k1, BLOCK_K, BLOCK_M,
               BLOCK_N, A_T, B_T, UPCAST, WS)  # fmt: skip
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(p_ptr + pid.to(tl.int64) * (BLOCK_M * BLOCK_N) + offs, acc)
    if FUSED:
        tl.debug_barrier()  # every thread's partial is stored before the counter moves
        done = tl.atomic_add(cnt_ptr + t, 1, sem="acq_rel", scope="gpu")
        if done == SPLIT - 1:  # the last split of this tile: reduce in the fixed order
            cols = tl.arange(0, BLOCK_N)
            on = pid_n * BLOCK_N + cols
            for r0 in range(0, BLOCK_M, ROWS):
                rows = r0 + tl.arange(0, ROWS)
                roffs = rows[:, None] * BLOCK_N + cols[None, :]
                out = tl.load(p_ptr + t.to(tl.int64) * (BLOCK_M * BLOCK_N) + roffs,
                              cache_modifier=".cg")  # fmt: skip
                for sp in tl.static_range(1, FSPLIT):
                    blk = (sp * TILES + t).to(tl.int64) * (BLOCK_M * BLOCK_N)
                    out += tl.load(p_ptr + blk + roffs, cache_modifier=".cg")
                om = pid_m * BLOCK_M + rows
                ptrs = c_ptr + om[:, None].to(tl.int64) * stride_cm + on[None, :]
                mask = (om[:, None] < M) & (on[None, :] < N)
                tl.store(ptrs, out.to(c_ptr.dtype.element_ty), mask=mask)  # one rounding
            tl.atomic_xchg(cnt_ptr + t, 0)  # ready for the next call


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
def pad_copy_kernel(src, dst, R, C, s_r, d_r, BR: tl.constexpr, BC: tl.constexpr,
                    VEC: tl.constexpr = 1):  # fmt: skip
    """dst[:R, :C] = src[:R, :C] for row-major src/dst (dst rows padded to 16 bytes). ``VEC``: C
    and both row strides are multiples of VEC elements (16 bytes), so loads and stores (and
    their masks) come in 16-byte vectors although the sizes are not specialized."""
    # I/O: read R*C + write R*C elements.
    if VEC > 1:
        C = tl.multiple_of(C, VEC)
        s_r = tl.multiple_of(s_r, VEC)
        d_r = tl.multiple_of(d_r, VEC)
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
    if c is not None and meta.get("C_T"):  # c is the product's C^T view: describe row-major C
        cd = _desc(c.t(), False)
        cd.block_shape = [bn, bm]
    elif c is not None and not meta.get("C_PTR"):
        cd = _desc(c, False)
        cd.block_shape = [bm, bn // 2] if meta.get("SUBTILE") else [bm, bn]
    return ad, bd, cd, a_t, b_t


def _opts(meta: dict) -> dict:
    return dict(num_warps=meta.get("num_warps", 8), num_stages=meta.get("num_stages", 3))


def run_persistent(a, b, c, meta: dict, sms: int, keys=(1, 1, 0), tile_end=None, upcast=False):
    """c = a @ b (tiles [0, tile_end)) through ``persistent_kernel`` with config ``meta``
    (BLOCK_M/N/K, FLATTEN, WS, SUBTILE, C_PTR, C_T, num_warps, num_stages). With ``C_T`` ``c`` is
    a transposed view of a row-major tensor (see ``run_transposed``)."""
    M, K = a.shape
    N = b.shape[1]
    bm, bn = meta["BLOCK_M"], meta["BLOCK_N"]
    ad, bd, cd, a_t, b_t = _boxes(a, b, c, meta)
    end = cdiv(M, bm) * cdiv(N, bn) if tile_end is None else tile_end
    launch(
        persistent_kernel, (min(end, sms),), ad, bd, cd, c, c.stride(0), M, N, K, end, *keys,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=meta["BLOCK_K"], GROUP_M=8, A_T=a_t, B_T=b_t,
        FLATTEN=bool(meta.get("FLATTEN")), WS=bool(meta.get("WS")),
        SUBTILE=bool(meta.get("SUBTILE")), C_PTR=bool(meta.get("C_PTR")), UPCAST=upcast,
        C_T=bool(meta.get("C_T")),
        **_opts(meta),
    )  # fmt: skip


def run_transposed(a, b, c, meta: dict, sms: int, keys=(1, 1, 0), upcast=False):
    """c = a @ b computed as the product c^T = b^T a^T (tiles over (N, M)), each tile stored
    transposed into the row-major ``c``: a tile that is wide in M (``meta``'s BLOCK_M x BLOCK_N
    over the swapped product) fits an N that does not fill whole wide tiles (N = 8 mod 16: 4104
    in 33 tiles of 128 instead of 17 of 256). Operand roles swap, so A_T / B_T flip too."""
    meta = dict(meta, C_T=True, SUBTILE=False, C_PTR=False)
    run_persistent(b.t(), a.t(), c.t(), meta, sms, keys, upcast=upcast)


MAX_FUSED_TILES = 4096  # counters per (device, stream); more tiles take the reduction kernel
_COUNTERS: dict = {}


def counters(device: torch.device) -> torch.Tensor:
    """Zeroed int32 counters for the fused split-K reduction, one per tile, cached per (device,
    stream): each reducing program resets its counter to 0, so the buffer is zero between calls
    (also inside CUDA graphs, which replay the same resets)."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream)
    buf = _COUNTERS.get(key)
    if buf is None:
        buf = _COUNTERS[key] = torch.zeros(MAX_FUSED_TILES, dtype=torch.int32, device=device)
    return buf


def run_split(a, b, c, meta: dict, split: int, tile0=0, tiles=None, keys=(1, 1, 0), upcast=False,
              fused=False):  # fmt: skip
    """Tiles [tile0, tile0 + tiles) of c = a @ b as ``split`` K ranges each, FP32 partials, then
    the fixed-order reduction: a second kernel, or with ``fused`` the last split of each tile
    (``split_kernel`` ``FUSED``; at most MAX_FUSED_TILES tiles). C must be row-major (any row
    stride). Both reductions add the same values in the same order: the same bits."""
    M, K = a.shape
    N = b.shape[1]
    bm, bn, bk = meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]
    if tiles is None:
        tiles = cdiv(M, bm) * cdiv(N, bn) - tile0
    ad, bd, _, a_t, b_t = _boxes(a, b, None, meta)
    steps = cdiv(cdiv(K, bk), split)
    part = empty((split * tiles, bm, bn), torch.float32, a.device)
    fused = fused and split > 1 and tiles <= MAX_FUSED_TILES
    cnt = counters(a.device) if fused else part
    rows = max(1, min(bm, 4096 // bn))
    launch(
        split_kernel, (split * tiles,), ad, bd, part, M, N, K, tile0, tiles, steps, *keys,
        cnt, c, c.stride(0), split,
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, A_T=a_t, B_T=b_t, UPCAST=upcast,
        WS=bool(meta.get("WS")), FUSED=fused, ROWS=rows, FSPLIT=split if fused else 1,
        **_opts(meta),
    )  # fmt: skip
    if fused:
        return
    launch(
        split_reduce_kernel, (tiles, bm // rows), part, c, M, N, c.stride(0), tile0, tiles, split,
        BLOCK_M=bm, BLOCK_N=bn, GROUP_M=8, ROWS=rows, num_warps=4,
    )  # fmt: skip


def run_hybrid(a, b, c, meta: dict, split: int, sms: int, keys=(1, 1, 0), upcast=False):
    """Whole waves persistent, the last partial wave's tiles split ``split`` ways along K."""
    M, K = a.shape
    N = b.shape[1]
    tiles = cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"])
    main = tiles // sms * sms
    if main:
        run_persistent(a, b, c, meta, sms, keys, main, upcast)
    if tiles > main:
        run_split(a, b, c, meta, split, main, tiles - main, keys, upcast)


def pad_rows(t: torch.Tensor) -> torch.Tensor:
    """A row-major copy of row-major ``t`` whose rows are padded to 16 bytes (one Triton copy)."""
    buf = padded_empty(t)
    copy_rows(t, buf)
    return buf


def padded_empty(t: torch.Tensor) -> torch.Tensor:
    """An uninitialised (R, C) view of ``t``'s dtype whose rows are padded to 16 bytes."""
    R, C = t.shape
    return empty((R, cdiv(C, 8) * 8), t.dtype, t.device)[:, :C]


def copy_rows(src: torch.Tensor, dst: torch.Tensor) -> None:
    """dst[:] = src for row-major tensors of one shape, any row strides (one Triton copy)."""
    R, C = src.shape
    vec = 16 // src.element_size()
    sizes = (C, src.stride(0), dst.stride(0), src.data_ptr() // src.element_size(),
             dst.data_ptr() // dst.element_size())  # fmt: skip
    vec = vec if all(x % vec == 0 for x in sizes) else 1  # 16-byte rows: vector copies
    launch(pad_copy_kernel, (cdiv(R, 16), cdiv(C, 256)), src, dst, R, C,
           src.stride(0), dst.stride(0), BR=16, BC=256, VEC=vec, num_warps=4)  # fmt: skip


# Both operands contiguous along K with row strides that are 16- but not 128-byte multiples (an NT
# product with K = 8 mod 64, e.g. dA = dC B^T of a layer with N = 4104): every 128-byte row of
# every TMA box of A and of B spans two 128-byte lines. 4096x4096x4104 NT ran 228.9 us against
# cuBLAS 184.4 (0.81x; the gap is LINE_GAP of cuBLAS's time), while the same misalignment in one
# operand costs little (fwd 4096x4104x4096 0.96x). Copying an operand onto 128-byte lines
# (``line_padded``) removes the share of the gap that its box rows carry: B's 256 of the 384 rows
# of a 128x256 tile. Measured (gemm11b round, results/gemm11b-h200/g11b.json, cold us, copy
# included): B copied 213.0, A copied 226.7, both 226.9, neither 228.9. So ``line_choice`` copies
# the operand whose gain (its rows' share of LINE_GAP of the product's time at LINE_FLOPS) beats
# its copy (its bytes read and written at LINE_COPY_BPS plus LINE_COPY_US) by the most, if any.
LINE_GAP = 0.24  # (228.9 - 184.4) / 184.4
LINE_FLOPS = 750e12  # BF16 dense rate cuBLAS reached there (2 * 4096^2 * 4104 / 184 us)
LINE_COPY_BPS = 3.0e12  # a read + a write stream of one copy kernel
LINE_COPY_US = 3.0


def _k_rows_misaligned(t: torch.Tensor, k_dim: int) -> bool:
    """``t``'s unit stride is along its K dimension and its row stride is not a 128-byte multiple."""
    row = t.stride(1 - k_dim)
    return t.stride(k_dim) == 1 and (row * t.element_size()) % 128 != 0


def line_class(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The layout class above: A and B both contiguous along K, both rows off 128-byte lines."""
    return _k_rows_misaligned(a, 1) and _k_rows_misaligned(b, 0)


def line_choice(a: torch.Tensor, b: torch.Tensor, block_m: int, block_n: int) -> str | None:
    """For ``a @ b`` in ``block_m x block_n`` tiles: "a" or "b" (the operand to copy onto lines)
    in ``line_class`` when the cost model says the copy pays, else None."""
    if not line_class(a, b):
        return None
    M, K = a.shape
    N = b.shape[1]
    gap_us = LINE_GAP * 2.0 * M * N * K / LINE_FLOPS * 1e6
    net = {}
    for name, t, rows in (("b", b, block_n), ("a", a, block_m)):  # ties: B (the weight side)
        copy_us = 2 * t.numel() * t.element_size() / LINE_COPY_BPS * 1e6 + LINE_COPY_US
        net[name] = gap_us * rows / (block_m + block_n) - copy_us
    best = max(net, key=net.get)
    return best if net[best] > 0 else None


def line_padded(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` (either major order) whose rows start on 128-byte lines, same view."""
    st = t if t.stride(1) == 1 else t.t()  # the row-major storage
    R, C = st.shape
    per_line = 128 // t.element_size()
    width = cdiv(C, per_line) * per_line
    flat = empty((R * width + per_line,), t.dtype, t.device)  # CUDA bases are on lines; CPU not
    skip = (-flat.data_ptr() % 128) // t.element_size()
    buf = flat[skip : skip + R * width].view(R, width)[:, :C]
    copy_rows(st, buf)
    return buf if t.stride(1) == 1 else buf.t()
