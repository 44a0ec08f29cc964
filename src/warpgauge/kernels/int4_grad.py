"""INT4 grad-input at small batch as a streaming FMA kernel: ``dx[m] = sum_n dy[m, n] * W[n]``.

Prepared in session 21 (``int4.GRAD_GEMV``, off until timed on the GPU). The tile kernel of
``int4_kernels._int4_grad_input_kernel`` pads the batch to 16 rows for the tensor cores and reads
the weight at well under 1 TB/s at batch 1 (``results/int4grad20-h200/sweep3-a0a9969.json``:
1x28672x8192 163 us for 117 MB). This one is shaped like the forward's FMA GEMV, transposed: a
program owns ``GPP`` weight groups of K (their 32-bit words: 8 nibbles, columns ``8 w .. 8 w + 7``)
for one batch row and a chunk of N, and streams ``BLOCK_N`` weight rows per step:

- each word is offset to unsigned nibbles once (``w ^ 0x88888888``: ``u = q + 8``), and each nibble
  becomes the FP32 value ``1 + u / 16`` with one shift and one OR into the mantissa (bits 19-22 of
  ``1.0``), exact;
- ``ds = dy[m, n] * s[n, g]`` (FP32, the group scale folded into the output gradient) and ``acc
  += (v - 1.5) * ds``: ``v - 1.5 = q / 16`` exactly, so no large term is carried and cancelled at
  the end (an output gradient of one sign would make that lose ~N ulps); ``dx = 16 * sum_n acc``;
- chunks of N (grid axis 1) write FP32 partials that ``int4._reduce_partials`` adds in chunk order
  (deterministic); a single chunk writes dx rounded once.

Batch rows are a grid axis: each reads the weight again (from L2 when the programs of one chunk
run together), so the path is meant for ``M <= int4.GRAD_GEMV_MAX_M``.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["M", "N", "chunk"])
def _int4_grad_gemv_kernel(
    g_ptr,
    w_ptr,
    s_ptr,
    dx_ptr,
    part_ptr,
    M,
    N,
    K,
    chunk,
    stride_gm,
    stride_gn,
    stride_wn,
    stride_sn,
    stride_dm,
    GROUP: tl.constexpr,
    GPP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PARTIAL: tl.constexpr,
):
    WPG: tl.constexpr = GROUP // 8  # 32-bit words per group
    BLOCK_W: tl.constexpr = WPG * GPP
    pid = tl.program_id(0)
    ps = tl.program_id(1)
    n_wblocks = tl.cdiv(K // 8, BLOCK_W)
    m = pid // n_wblocks
    wb = pid % n_wblocks
    words = wb * BLOCK_W + tl.arange(0, BLOCK_W)
    wm = words < K // 8
    grp = words // WPG
    n0 = ps * chunk
    n_end = tl.minimum(n0 + chunk, N)
    shifts = 4 * tl.arange(0, 8)
    acc = tl.zeros([BLOCK_N, BLOCK_W, 8], tl.float32)
    for r in tl.range(n0, n_end, BLOCK_N, num_stages=3):
        rows = r + tl.arange(0, BLOCK_N)
        rm = rows < n_end
        m2 = rm[:, None] & wm[None, :]
        rows64 = rows.to(tl.int64)
        w = tl.load(w_ptr + rows64[:, None] * stride_wn + words[None, :], mask=m2, other=0)
        s = tl.load(s_ptr + rows64[:, None] * stride_sn + grp[None, :], mask=m2, other=0.0)
        gv = tl.load(g_ptr + m.to(tl.int64) * stride_gm + rows64 * stride_gn, mask=rm, other=0.0)
        ds = gv.to(tl.float32)[:, None] * s.to(tl.float32)  # 0 on masked rows and words
        u = w ^ -2004318072  # 0x88888888: two's complement nibbles -> q + 8
        nib = (u[:, :, None] >> shifts[None, None, :]) & 0xF
        v = ((nib << 19) | 0x3F800000).to(tl.float32, bitcast=True)  # 1 + (q + 8) / 16, exact
        acc += (v - 1.5) * ds[:, :, None]  # q / 16 * ds
    col = tl.sum(acc, 0) * 16.0  # [BLOCK_W, 8]: sum_n q * ds, column 8 w + j at [w, j]
    cols = (words[:, None] * 8 + tl.arange(0, 8)[None, :]).to(tl.int64)
    cm = wm[:, None] & (cols < K)
    if PARTIAL:
        tl.store(part_ptr + (ps * M + m).to(tl.int64) * K + cols, col, mask=cm)
    else:
        tl.store(
            dx_ptr + m.to(tl.int64) * stride_dm + cols, col.to(dx_ptr.dtype.element_ty), mask=cm
        )
