"""Backward of the fused residual add + RMSNorm (see ``rmsnorm.py`` for the contract).

Inputs: dy (grad of y), optional dh (grad flowing into the returned h), saved h and w. rstd is
recomputed from h. dx = rstd * (w*dy) - rstd^3 * h * sum(h*w*dy) / width (+ dh), shared by x and
residual. dw = sum over rows of dy * h * rstd.

Resident plans fuse dw into the main pass: each program takes a contiguous group of rows, keeps
per-column FP32 sums in registers, and writes one partial row; a finish kernel adds the groups'
partials in a fixed order (g = 0, 1, ...) and rounds once. Deterministic, no atomics. The number
of groups depends on the shape and the SM count only (``row_groups``), so the order of additions
is the same on every call. A shape small enough for one group writes dw directly: one kernel.
I/O: read h, dy (+ dh), w once; write dx, plus groups * width FP32 partials (written and read
once; groups ~ a few per SM and at most rows * width / TUNE.min_group_elems, so small next to
rows * width).
Looped plans compute dx and sum dw in a separate pass over h and dy (two more reads). Split plans
(few wide rows) of aligned widths fold dw into their write pass (``folds_dw``: programs own a row
group x a column block and write one FP32 partial row per group, added by the finish kernel in
a fixed order). With ``need_dw=False`` (a frozen weight) no dw work is done at all.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .._device import device_info
from ._launch import cdiv, empty, launch
from ._rows import plan_for
from .plans import RMS_BWD_GROUPS_PER_SM, RMS_BWD_PREFETCH_MAX, RowPlan, _warps


@triton.jit
def _dx_math(hf, dy, w, dh_ptr, idx, m, rstd, c, HAS_DH: tl.constexpr):
    dx = rstd * (w * dy - hf * ((c * rstd) * rstd))  # no rstd^3: it underflows for huge h
    if HAS_DH:
        dx += tl.load(dh_ptr + idx, mask=m, other=0.0).to(tl.float32)
    return dx


@triton.jit(do_not_specialize=["n_rows", "rows_per_prog"])
def _rms_bwd_resident(
    dy_ptr,
    dh_ptr,
    h_ptr,
    w_ptr,
    dx_ptr,
    dwp_ptr,
    dw_ptr,
    n_rows,
    rows_per_prog,
    eps,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
    HAS_DH: tl.constexpr,
    HAS_DW: tl.constexpr,
    PREFETCH: tl.constexpr,
    EARLY_DH: tl.constexpr = False,
):
    # Program g owns rows [g * rows_per_prog, (g + 1) * rows_per_prog), ROWS at a time, and
    # writes its dw partial (sum over its rows of dy * h * rstd) to row g of dwp; a grid of one
    # program writes dw itself (rounded once), so no finish kernel is launched.
    g = tl.program_id(0)
    r0 = g.to(tl.int64) * rows_per_prog
    r_end = tl.minimum(r0 + rows_per_prog, n_rows)
    offs = tl.arange(0, BLOCK)[None, :]
    cm = offs < N
    acc = tl.zeros([ROWS, BLOCK], tl.float32)
    if PREFETCH:
        # Software pipelining: the next rows' h, dy (and dh) are loaded before the current rows
        # are computed, so each program keeps two row blocks of loads in flight.
        w = tl.load(w_ptr + offs, mask=cm, other=0.0).to(tl.float32)
        rows = r0 + tl.arange(0, ROWS)
        m = (rows < r_end)[:, None] & cm
        idx = (rows * N)[:, None] + offs
        h_n = tl.load(h_ptr + idx, mask=m, other=0.0)
        dy_n = tl.load(dy_ptr + idx, mask=m, other=0.0)
        dh_n = tl.load(dh_ptr + idx, mask=m, other=0.0) if HAS_DH else h_n
        for _ in range(0, tl.cdiv(r_end - r0, ROWS)):
            hf = h_n.to(tl.float32)
            dy = dy_n.to(tl.float32)
            dhf = dh_n.to(tl.float32)
            cur_idx = idx
            cur_m = m
            rows += ROWS
            m = (rows < r_end)[:, None] & cm
            idx = (rows * N)[:, None] + offs
            h_n = tl.load(h_ptr + idx, mask=m, other=0.0)
            dy_n = tl.load(dy_ptr + idx, mask=m, other=0.0)
            if HAS_DH:
                dh_n = tl.load(dh_ptr + idx, mask=m, other=0.0)
            rstd = (1.0 / tl.sqrt(tl.sum(hf * hf, 1) / N + tl.cast(eps, tl.float32)))[:, None]
            c = (tl.sum(hf * w * dy, 1) / N)[:, None]
            dx = rstd * (w * dy - hf * ((c * rstd) * rstd))  # no rstd^3: it underflows for huge h
            if HAS_DH:
                dx += dhf
            tl.store(dx_ptr + cur_idx, dx.to(dx_ptr.dtype.element_ty), mask=cur_m)
            if HAS_DW:
                acc += dy * hf * rstd
    else:  # fewer live registers (wide rows): w re-read per row block (L1), no prefetch
        for i in range(0, tl.cdiv(r_end - r0, ROWS)):
            rows = r0 + i * ROWS + tl.arange(0, ROWS)
            m = (rows < r_end)[:, None] & cm
            idx = (rows * N)[:, None] + offs
            hf = tl.load(h_ptr + idx, mask=m, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + idx, mask=m, other=0.0).to(tl.float32)
            if EARLY_DH and HAS_DH:  # dh's load overlaps the two row reductions
                dh_e = tl.load(dh_ptr + idx, mask=m, other=0.0)
            w = tl.load(w_ptr + offs, mask=cm, other=0.0).to(tl.float32)
            rstd = (1.0 / tl.sqrt(tl.sum(hf * hf, 1) / N + tl.cast(eps, tl.float32)))[:, None]
            c = (tl.sum(hf * w * dy, 1) / N)[:, None]
            if EARLY_DH and HAS_DH:
                dx = rstd * (w * dy - hf * ((c * rstd) * rstd)) + dh_e.to(tl.float32)
            else:
                dx = _dx_math(hf, dy, w, dh_ptr, idx, m, rstd, c, HAS_DH)
            tl.store(dx_ptr + idx, dx.to(dx_ptr.dtype.element_ty), mask=m)
            if HAS_DW:
                acc += dy * hf * rstd
    if HAS_DW:
        part = tl.sum(acc, 0)[None, :]
        if tl.num_programs(0) == 1:  # runtime: a new row count never compiles a new kernel
            tl.store(dw_ptr + offs, part.to(dw_ptr.dtype.element_ty), mask=cm)
        else:
            tl.store(dwp_ptr + g.to(tl.int64) * N + offs, part, mask=cm)


@triton.jit(do_not_specialize=["n_rows"])
def _rms_bwd_tiny(
    dy_ptr,
    dh_ptr,
    h_ptr,
    w_ptr,
    dx_ptr,
    dw_ptr,
    n_rows,
    eps,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
    DW_ROWS: tl.constexpr,
    HAS_DH: tl.constexpr,
):
    # Tiny shapes, one launch (``TINY_FUSED_DW_MAX``): programs 0 .. G-1 write dx for ROWS rows
    # each; the last program sums dw over every row, DW_ROWS at a time in row order (its own
    # rstd, the same formula), and writes it rounded once: no partials, no finish kernel.
    g = tl.program_id(0)
    offs = tl.arange(0, BLOCK)[None, :]
    cm = offs < N
    if g == tl.num_programs(0) - 1:
        acc = tl.zeros([DW_ROWS, BLOCK], tl.float32)
        for r0 in range(0, n_rows, DW_ROWS):
            rows = r0 + tl.arange(0, DW_ROWS)
            m = (rows < n_rows)[:, None] & cm
            idx = (rows.to(tl.int64) * N)[:, None] + offs
            hf = tl.load(h_ptr + idx, mask=m, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + idx, mask=m, other=0.0).to(tl.float32)
            rstd = (1.0 / tl.sqrt(tl.sum(hf * hf, 1) / N + tl.cast(eps, tl.float32)))[:, None]
            acc += dy * hf * rstd
        tl.store(dw_ptr + offs, tl.sum(acc, 0)[None, :].to(dw_ptr.dtype.element_ty), mask=cm)
    else:
        rows = g.to(tl.int64) * ROWS + tl.arange(0, ROWS)
        m = (rows < n_rows)[:, None] & cm
        idx = (rows * N)[:, None] + offs
        hf = tl.load(h_ptr + idx, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + idx, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=cm, other=0.0).to(tl.float32)
        rstd = (1.0 / tl.sqrt(tl.sum(hf * hf, 1) / N + tl.cast(eps, tl.float32)))[:, None]
        c = (tl.sum(hf * w * dy, 1) / N)[:, None]
        dx = _dx_math(hf, dy, w, dh_ptr, idx, m, rstd, c, HAS_DH)
        tl.store(dx_ptr + idx, dx.to(dx_ptr.dtype.element_ty), mask=m)


@triton.jit
def _rms_bwd_looped(
    dy_ptr,
    dh_ptr,
    h_ptr,
    w_ptr,
    dx_ptr,
    rstd_ptr,
    eps,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    HAS_DH: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    ss = tl.zeros([BLOCK], tl.float32)
    dot = tl.zeros([BLOCK], tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        m = cols < N
        hf = tl.load(h_ptr + row * N + cols, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * N + cols, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        ss += hf * hf
        dot += hf * w * dy
    rstd = 1.0 / tl.sqrt(tl.sum(ss, 0) / N + tl.cast(eps, tl.float32))
    c = tl.sum(dot, 0) / N
    for start in range(0, N, BLOCK):
        cols = start + offs
        m = cols < N
        idx = row * N + cols
        hf = tl.load(h_ptr + idx, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + idx, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        dx = _dx_math(hf, dy, w, dh_ptr, idx, m, rstd, c, HAS_DH)
        tl.store(dx_ptr + idx, dx.to(dx_ptr.dtype.element_ty), mask=m)
    tl.store(rstd_ptr + row, rstd)


@triton.jit(do_not_specialize=["chunk", "n_chunks"])
def _rms_bwd_split_stats(
    dy_ptr, h_ptr, w_ptr, part_ptr, chunk, n_chunks, N: tl.constexpr, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    ss = tl.zeros([BLOCK], tl.float32)
    dot = tl.zeros([BLOCK], tl.float32)
    nb = chunk // BLOCK  # chunk is a multiple of BLOCK: lo keeps its divisibility (vectors)
    lo = c * nb * BLOCK
    for start in range(lo, lo + nb * BLOCK, BLOCK):
        cols = start + offs
        m = cols < N
        hf = tl.load(h_ptr + row * N + cols, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + row * N + cols, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        ss += hf * hf
        dot += hf * w * dy
    out = part_ptr + (row * n_chunks + c) * 2
    tl.store(out, tl.sum(ss, 0))
    tl.store(out + 1, tl.sum(dot, 0))


@triton.jit(do_not_specialize=["chunk", "n_chunks"])
def _rms_bwd_split_write(
    dy_ptr,
    dh_ptr,
    h_ptr,
    w_ptr,
    dx_ptr,
    rstd_ptr,
    part_ptr,
    eps,
    chunk,
    n_chunks,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    SPLIT_PAD: tl.constexpr,
    HAS_DH: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    k = tl.arange(0, SPLIT_PAD)
    pk = part_ptr + (row * n_chunks + k) * 2
    ss = tl.sum(tl.load(pk, mask=k < n_chunks, other=0.0), 0)
    cdot = tl.sum(tl.load(pk + 1, mask=k < n_chunks, other=0.0), 0) / N
    rstd = 1.0 / tl.sqrt(ss / N + tl.cast(eps, tl.float32))
    offs = tl.arange(0, BLOCK)
    nb = chunk // BLOCK  # chunk is a multiple of BLOCK: lo keeps its divisibility (vectors)
    lo = c * nb * BLOCK
    for start in range(lo, lo + nb * BLOCK, BLOCK):
        cols = start + offs
        m = cols < N
        idx = row * N + cols
        hf = tl.load(h_ptr + idx, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + idx, mask=m, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=m, other=0.0).to(tl.float32)
        dx = _dx_math(hf, dy, w, dh_ptr, idx, m, rstd, cdot, HAS_DH)
        tl.store(dx_ptr + idx, dx.to(dx_ptr.dtype.element_ty), mask=m)
    if c == 0:
        tl.store(rstd_ptr + row, rstd)


@triton.jit(do_not_specialize=["rows", "rows_per_group", "n_chunks"])
def _rms_bwd_split_write_dw(
    dy_ptr,
    dh_ptr,
    h_ptr,
    w_ptr,
    dx_ptr,
    part_ptr,
    dwp_ptr,
    dw_ptr,
    rows,
    rows_per_group,
    n_chunks,
    eps,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
    SPLIT_PAD: tl.constexpr,
    HAS_DH: tl.constexpr,
):
    # The split plan's write pass with dw folded in (``SPLIT_FOLD_DW``): program (g, cb) owns
    # columns [cb * BLOCK, (cb + 1) * BLOCK) of the rows of group g, ROWS rows per step; per row
    # it merges the stats kernel's n_chunks (sum h^2, sum h*w*dy) partials into rstd and c,
    # writes dx, and sums dy * h * rstd over its rows into dw's partial row g (or dw itself when
    # there is one group). No separate dw pass over h and dy; the partials are added in the
    # fixed order g = 0, 1, ... by the finish kernel (deterministic, no atomics).
    g = tl.program_id(0)
    cb = tl.program_id(1)
    cols = (cb * BLOCK + tl.arange(0, BLOCK))[None, :]
    cm = cols < N
    w = tl.load(w_ptr + cols, mask=cm, other=0.0).to(tl.float32)
    k = tl.arange(0, SPLIT_PAD)[None, :]
    km = k < n_chunks
    acc = tl.zeros([ROWS, BLOCK], tl.float32)
    r0 = g.to(tl.int64) * rows_per_group
    r_end = tl.minimum(r0 + rows_per_group, rows)
    for i in range(0, tl.cdiv(r_end - r0, ROWS)):
        rr = r0 + i * ROWS + tl.arange(0, ROWS)
        rm = rr < r_end
        pk = part_ptr + (rr[:, None] * n_chunks + k) * 2
        pm = rm[:, None] & km
        ss = tl.sum(tl.load(pk, mask=pm, other=0.0), 1)
        cdot = (tl.sum(tl.load(pk + 1, mask=pm, other=0.0), 1) / N)[:, None]
        rstd = (1.0 / tl.sqrt(ss / N + tl.cast(eps, tl.float32)))[:, None]
        m = rm[:, None] & cm
        idx = (rr * N)[:, None] + cols
        hf = tl.load(h_ptr + idx, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + idx, mask=m, other=0.0).to(tl.float32)
        dx = _dx_math(hf, dy, w, dh_ptr, idx, m, rstd, cdot, HAS_DH)
        tl.store(dx_ptr + idx, dx.to(dx_ptr.dtype.element_ty), mask=m)
        acc += dy * hf * rstd
    part = tl.sum(acc, 0)[None, :]
    if tl.num_programs(0) == 1:  # one row group: dw itself, no finish kernel
        tl.store(dw_ptr + cols, part.to(dw_ptr.dtype.element_ty), mask=cm)
    else:
        tl.store(dwp_ptr + g.to(tl.int64) * N + cols, part, mask=cm)


@triton.jit(do_not_specialize=["rows", "rows_per_group"])
def _rms_dw_partial(
    dy_ptr,
    h_ptr,
    rstd_ptr,
    part_ptr,
    dw_ptr,
    rows,
    rows_per_group,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    STEP: tl.constexpr,
):
    # Program (column block, row group) sums dy * h * rstd over its rows into FP32 partials,
    # STEP rows per iteration (a [STEP, BLOCK] tile keeps several rows of loads in flight).
    cb = tl.program_id(0)
    g = tl.program_id(1)
    cols = (cb * BLOCK + tl.arange(0, BLOCK))[None, :]
    m = cols < N
    acc = tl.zeros([STEP, BLOCK], tl.float32)
    r0 = g.to(tl.int64) * rows_per_group
    r_end = tl.minimum(r0 + rows_per_group, rows)
    for i in range(0, tl.cdiv(r_end - r0, STEP)):
        rr = r0 + i * STEP + tl.arange(0, STEP)
        mm = (rr < r_end)[:, None] & m
        idx = (rr * N)[:, None] + cols
        hf = tl.load(h_ptr + idx, mask=mm, other=0.0).to(tl.float32)
        dy = tl.load(dy_ptr + idx, mask=mm, other=0.0).to(tl.float32)
        rs = tl.load(rstd_ptr + rr, mask=rr < r_end, other=0.0)[:, None]
        acc += dy * hf * rs
    part = tl.sum(acc, 0)[None, :]
    if tl.num_programs(1) == 1:  # one row group: dw itself, no finish kernel
        tl.store(dw_ptr + cols, part.to(dw_ptr.dtype.element_ty), mask=m)
    else:
        tl.store(part_ptr + g.to(tl.int64) * N + cols, part, mask=m)


@triton.jit(do_not_specialize=["groups"])
def _rms_dw_finish(
    part_ptr, dw_ptr, groups, N: tl.constexpr, BLOCK: tl.constexpr, GROUPS: tl.constexpr
):
    # Adds the row groups' partials in a fixed order and rounds once: GROUPS partial rows per
    # step (summed in the tree order tl.sum fixes at compile time), steps in order g = 0, 1, ...
    # Several rows per step keep many loads in flight (one row per step is latency-bound).
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = cols < N
    gi = tl.arange(0, GROUPS)[:, None]
    acc = tl.zeros([BLOCK], tl.float32)
    for g0 in range(0, groups, GROUPS):
        g = g0 + gi
        tile = tl.load(part_ptr + g.to(tl.int64) * N + cols[None, :], mask=(g < groups) & m)
        acc += tl.sum(tl.where((g < groups) & m, tile, 0.0), 0)
    tl.store(dw_ptr + cols, acc.to(dw_ptr.dtype.element_ty), mask=m)


# The split plan with dw folded into its write pass (``_rms_bwd_split_write_dw``): tiles of
# SPLIT_FOLD_ROWS rows x SPLIT_FOLD_BLOCK columns, SPLIT_FOLD_WARPS warps, row groups sized so
# that groups x column blocks is about SPLIT_FOLD_PER_SM programs per SM (``_fold_groups``), for
# widths that are multiples of SPLIT_FOLD_ALIGN (rows on 16-byte boundaries in BF16/FP16).
# rmsfold13 sweep (results/rmsfold13-h200/, experiments/rmsfold13_sweep.py: backward alone, cold,
# graph replay, 21 interleaved samples, FP64-checked; 42 shapes of 1-128 rows x 20000-262144
# where the rule takes the split plan): 2048 x 2 rows, 8 warps, 8 per SM was the fastest of five
# folded tiles at 29 of the 42 shapes and 0.63-0.97x the separate dw pass's time at every aligned
# width (64x131072 42.5 us against 59.6; 128x262144 131.6 against 170.7; 1x131072 8.3 against
# 15.6). At the unaligned widths 32769 and 65537 every folded tile lost at 4-100 rows (32x32769:
# 20.9 against 17.2; 16x65537 20.5 against 18.2): their rows load without 16-byte vectors, and
# the separate pass's 8-row tiles hide that better. So only aligned widths fold.
# rmsbwd15 (results/rows15-h200/rmsbwd15/, experiments/rmsbwd15_sweep.py, session 15: the same
# timing with the write+read flush, 10 split cells of 1-128 rows x 20000-262144): the tile in 4
# warps instead of 8 (32 elements a thread per tensor), geometric mean 0.943x, faster at 9 of
# 10 cells: 64x131072 38.9 us vs 42.2, 16x262144 29.6 vs 32.4, 128x65544 38.3 vs 41.8, 4x262144
# 18.8 vs 20.6; 1x131072 is the loss, 8.6 vs 8.0. (2 warps, more rows or columns per program, 16
# programs per SM and other stats chunkings were slower in geometric mean.)
SPLIT_FOLD_DW = True
SPLIT_FOLD_ALIGN = 8
SPLIT_FOLD_BLOCK = 2048
SPLIT_FOLD_ROWS = 2
SPLIT_FOLD_WARPS = 4
SPLIT_FOLD_PER_SM = 8


def folds_dw(n: int, need_dw: bool = True) -> bool:
    """Whether the split backward of width ``n`` sums dw in its write pass (``SPLIT_FOLD_DW``)."""
    return need_dw and SPLIT_FOLD_DW and n % SPLIT_FOLD_ALIGN == 0


DW_BLOCK = 256  # columns per dw partial program (separate dw pass)
DW_STEP = 8  # rows per step of a dw partial program
# Finish kernel: 32 partial rows per step. One partial row per step made the finish kernel the
# bottleneck of the whole backward at 4096x4096 (R1: 68.7 us for 96 MB).
DW_FINISH_GROUPS = 32

# The measurements behind the resident backward's rule: results/rmsbwd-h200/sweep.jsonl ("S1",
# experiments/rmsbwd_sweep.py on the H200: BF16 with dh, CUDA-graph replay, inputs rotated past
# 3x L2, every candidate FP64-gated; us per backward).
# Rows per step for bodies up to 1024: a [rows, body] tile of ~2048 elements, 4 warps, 2 groups
# per SM. S1 r2/4 warps/k2 at width 768-1024: 1024x1024 8.0 vs 9.8 one row per step (old 28.8),
# 8192x1024 26.8 vs 36.8, 8192x768 23.2 vs 27.7, 32768x768 72.7 vs 83.8; within 6% of the best
# at 2048x768 (10.6 vs 10.0) and 2048x1024. Not measured below width 768: the same tile size.
SMALL_TILE = 2048
SMALL_TILE_MAX_ROWS = 16
# Tiny shapes (session 21, results/h200-session21/rmsbwd21: experiments/s21_rmsbwd_probe.py, the
# backward alone, warm, fixed-size graphs): where rows x launch block is at most TINY_ELEMS, one
# step of few rows per program in many groups of at least TINY_GROUP_ELEMS elements, then the dw
# finish kernel, beats the small tiles' few groups (one group: dw written directly). The plan
# this rule picks, against the old rule: 32x127 3.28 us (4 rows, 2 warps, 8 groups) vs 5.12;
# 128x127 3.62 vs 8.14; 64x512 3.17 (2 rows, 2 warps, 32 groups) vs 4.47; 32x1024 3.26 (2 rows,
# 4 warps, 16 groups) vs 3.68. The best forced plans were within 6% (32x127: 4 rows in 4 warps
# 3.11). Rows per step: TINY_TILE // block, at least 2; 2 warps up to 1024-element tiles, else 4
# (blocks below 128 and 256 are interpolated, unmeasured). A second plan per width: the rule
# picks it by rows, so once both ran a new row count compiles nothing new.
TINY_ELEMS = 32768
TINY_GROUP_ELEMS = 256
TINY_TILE = 512
# Tiny shapes of at most TINY_FUSED_DW_MAX elements (rows x block; 0: off) and dw to compute: one
# launch (``_rms_bwd_tiny``): the dx programs of the tiny plan, one program per step of rows, plus
# a last program that sums dw over all rows in TINY_DW_TILE-element steps, instead of dw partials
# and the finish kernel. Session 21 (results/h200-session21/s21f/fused21.json, the backward alone,
# warm, 200-call graphs), one launch against two: 32x127 2.81 us vs 3.28, 16x127 2.67 vs 3.16,
# 4x300 1.82 vs 3.14 (one dw step); two dw steps: 8x1024 2.16 vs 3.18 and 16x512 2.85 vs 3.09,
# but 64x127 4.54 vs 3.27. So one dw step only: TINY_FUSED_DW_MAX = TINY_DW_TILE.
TINY_DW_TILE = 4096
TINY_FUSED_DW_MAX = TINY_DW_TILE


@dataclass(frozen=True)
class BwdTune:
    """Knobs of the resident backward's row groups and dw finish (the module's ``TUNE``; the
    sweep experiments/rmsbwd_sweep.py swaps it to compare rules in one run).

    - ``min_group_elems``: every row group holds at least this many elements (rows * width), so
      small shapes launch few groups: fewer FP32 partials to write and add, and a single group
      writes dw directly (one kernel per backward). 0: off. S1: 4096 is best or within 3% at
      every 256-row shape (256x1024 6.05 us vs 7.67 at 8192 and 9.69 old; 256x2048 6.70 vs
      6.87 and 10.67 old).
    - ``min_rows_per_group``: above one group per SM, groups hold at least this many rows (the
      partials' traffic is groups / rows of the main pass's). S1 2048x2048: 256 groups 15.9 us,
      264 16.0, 512 18.2; 16384 rows keep 4 per SM (R2 16384x2048 80.9 us vs 88.9 at 2 per SM).
    - ``finish_cols``: columns per finish program; 0: the rule of ``finish_cols``.
    - ``early_dh``: plans without prefetch load dh with h and dy, before the row reductions
      (S1 2048x14336: 103.9 us vs 87.8 without: off).
    - ``legacy``: the rule before S1 (groups = programs_per_sm * SMs, 64 finish columns, the
      row plans' resident plan as is).
    """

    min_group_elems: int = 4096
    min_rows_per_group: int = 8
    finish_cols: int = 0
    early_dh: bool = False
    legacy: bool = False


TUNE = BwdTune()


def finish_cols(n: int, sm_count: int) -> int:
    """Columns per finish program: 64 once that leaves at least SM/2 programs (``n >= 32 * SMs``;
    S1 256x5120-8192: 64 columns 10.1-11.2 us vs 32 columns 10.5-11.8), else the largest of 16
    or 32 that gives about one program per SM (the old fixed 64 left 16 programs at width 1024)."""
    if TUNE.finish_cols:
        return TUNE.finish_cols
    if TUNE.legacy or n >= 32 * sm_count:
        return 64
    return 32 if n // max(sm_count, 1) >= 64 else 16


def row_groups(
    rows: int, n: int, rows_per_step: int, per_sm: int, sm_count: int, tiny: bool = False
) -> int:
    """Row groups of the resident backward (one program and one FP32 partial row each): at most
    ``per_sm`` per SM and one per step of rows, then ``TUNE``'s caps (``tiny``: the tiny plan's
    ``TINY_GROUP_ELEMS`` instead of ``TUNE.min_group_elems``). Depends on the shape and the SM
    count only, so every call adds the partials in the same order."""
    groups = max(1, min(cdiv(rows, rows_per_step), per_sm * sm_count))
    if not TUNE.legacy:
        min_elems = TINY_GROUP_ELEMS if tiny else TUNE.min_group_elems
        if min_elems:
            groups = min(groups, max(1, rows * n // min_elems))
        if TUNE.min_rows_per_group:
            groups = min(groups, max(sm_count, rows // TUNE.min_rows_per_group))
    rows_per_prog = cdiv(rows, groups)
    return cdiv(rows, rows_per_prog)


def _finish_dw(part, dw, groups: int, n: int, sm_count: int) -> None:
    fc = finish_cols(n, sm_count)
    launch(_rms_dw_finish, (cdiv(n, fc),), part, dw, groups,
        N=n, BLOCK=fc, GROUPS=DW_FINISH_GROUPS, num_warps=4 if fc >= 64 else 2)  # fmt: skip


def bwd_plan(rows: int, n: int, device, plan=None):
    """``plan`` if given, else the row plans' rule for ``rms_bwd`` (``plans.py``) with this
    module's resident refinement (``resident_rule``) on top."""
    p = plan_for(rows, n, device, plan, "rms_bwd")
    if plan is not None or p.kind != "resident" or TUNE.legacy:
        return p
    p = resident_rule(int(n), p)
    blk = p.resident_block(int(n), False)
    return tiny_plan(blk) if is_tiny(rows, blk) else p


def is_tiny(rows: int, blk: int) -> bool:
    """Whether a resident backward of ``rows`` rows in launch blocks ``blk`` takes the tiny
    plan (``TINY_ELEMS``; small-tile blocks only)."""
    return blk <= SMALL_TILE // 2 and rows * blk <= TINY_ELEMS and not TUNE.legacy


@functools.lru_cache(maxsize=64)
def tiny_plan(blk: int) -> RowPlan:
    """The tiny shapes' resident backward for launch block ``blk`` (see ``TINY_ELEMS``)."""
    r = min(SMALL_TILE_MAX_ROWS, max(2, TINY_TILE // blk))
    return RowPlan("resident", blk, 2 if r * blk <= 1024 else 4, rows=r, programs_per_sm=2,
                   prefetch=True)  # fmt: skip


def fused_tiny(rows: int, n: int, p, plan, need_dw: bool) -> bool:
    """Whether this backward runs as one ``_rms_bwd_tiny`` launch (``TINY_FUSED_DW_MAX``)."""
    blk = p.resident_block(n, False)
    return (plan is None and need_dw and p.kind == "resident" and is_tiny(rows, blk)
            and rows * blk <= TINY_FUSED_DW_MAX)  # fmt: skip


def _groups(rows: int, n: int, p, sm: int, plan) -> int:
    tiny = plan is None and is_tiny(rows, p.resident_block(n, False))
    return row_groups(rows, n, p.rows, p.programs_per_sm or RMS_BWD_GROUPS_PER_SM, sm, tiny)


@functools.lru_cache(maxsize=4096)
def resident_rule(n: int, p):
    """The resident backward plan for width ``n`` given the row plans' one (``p``); the width
    alone decides (a new row count never compiles a new kernel):

    - a row whose launch block is wider than its body's (an unaligned width such as 4097: the
      backward reads it without the aligned-body path, block 8192) takes that block's warps and
      groups per SM, and prefetches only up to ``RMS_BWD_PREFETCH_MAX`` (S1 512x4097: 16 warps,
      1 group per SM 14.5 us vs 18.7 with 8 warps and 2; 16384-wide prefetch spills, R2);
    - launch blocks up to 1024: ``SMALL_TILE``-element tiles of several rows (see there)."""
    blk = p.resident_block(n, False)
    if blk <= SMALL_TILE // 2:
        r = min(SMALL_TILE_MAX_ROWS, SMALL_TILE // blk)
        return RowPlan("resident", blk, 4, rows=r, programs_per_sm=2, prefetch=True)
    if blk > p.block:
        pf = blk <= RMS_BWD_PREFETCH_MAX
        per_sm = max(1, RMS_BWD_PREFETCH_MAX // blk) if pf else 1
        return RowPlan("resident", blk, _warps(blk), programs_per_sm=per_sm, prefetch=pf)
    return p


def backward_kernels(rows: int, n: int, device, plan=None, need_dw: bool = True) -> int:
    """Kernels one backward launches at this shape (for the sweep's and the tests' counts)."""
    if rows == 0:
        return 1 if need_dw else 0  # dw.zero_()
    p = bwd_plan(rows, n, device, plan)
    sm = device_info(device).sm_count
    if p.kind == "resident":
        if fused_tiny(rows, n, p, plan, need_dw):
            return 1
        return 1 + int(need_dw and _groups(rows, n, p, sm, plan) > 1)
    main = 1 if p.kind == "looped" else 2
    if not need_dw:
        return main
    if p.kind == "split" and folds_dw(n):
        return main + int(_fold_groups(rows, n, sm) > 1)
    return main + 1 + int(_dw_groups(rows, n, sm) > 1)


def _fold_groups(rows: int, n: int, sm: int) -> int:
    """Row groups of the folded split write (``SPLIT_FOLD_DW``): about ``SPLIT_FOLD_PER_SM``
    programs per SM over the column blocks and groups, at most one group per row; from the shape
    and the SM count only, so every call adds the dw partials in the same order."""
    col_blocks = cdiv(n, SPLIT_FOLD_BLOCK)
    groups = max(1, min(rows, cdiv(SPLIT_FOLD_PER_SM * sm, col_blocks)))
    return cdiv(rows, cdiv(rows, groups))


def _dw_groups(rows: int, n: int, sm: int) -> int:
    """Row groups of the separate dw pass (looped and split plans): about 8 programs per SM over
    the column blocks and row groups, at most 1024 groups; one group writes dw itself (the old
    rule, ``TUNE.legacy``, always used two, or one for a single row, and the finish kernel)."""
    col_blocks = cdiv(n, DW_BLOCK)
    groups = max(1, min(cdiv(rows, DW_STEP), cdiv(8 * sm, col_blocks), 1024))
    if TUNE.legacy:
        groups = max(2, groups)
    return cdiv(rows, cdiv(rows, groups))


def add_rms_norm_backward(
    dy, dh, h, weight, eps: float, need_dx: bool = True, need_dw: bool = True, plan=None
):
    """Gradients (dx, dw): dx is shared by x and residual (and includes dh, the gradient that
    flowed into the returned h); dw is deterministic (fixed-order FP32 partials, no atomics)."""
    n = h.shape[-1]
    rows = h.numel() // n
    dy = dy.contiguous()
    h = h.contiguous()
    dh = dh.contiguous() if dh is not None else None
    dx = empty(h.shape, h.dtype, h.device) if need_dx else None
    dw = empty(weight.shape, weight.dtype, weight.device) if need_dw else None
    if rows == 0:
        if dw is not None:
            dw.zero_()
        return dx, dw
    p = bwd_plan(rows, n, h.device, plan)
    if p.kind == "coop":
        raise ValueError(
            "plan: cooperative (coop) plans are forward-only; pass a resident, looped or split "
            "plan, or plan=None for the rule"
        )
    sm = device_info(h.device).sm_count
    has_dh = dh is not None
    dh_arg = dh if has_dh else dy  # never read when HAS_DH is False
    dx_arg = dx if dx is not None else empty(h.shape, h.dtype, h.device)
    dw_arg = dw if dw is not None else dx_arg  # never written when HAS_DW is False
    if p.kind == "resident" and fused_tiny(rows, n, p, plan, need_dw):
        blk = p.resident_block(n, False)
        launch(_rms_bwd_tiny, (cdiv(rows, p.rows) + 1,),
            dy, dh_arg, h, weight, dx_arg, dw, rows, eps, N=n, BLOCK=blk, ROWS=p.rows,
            DW_ROWS=max(1, TINY_DW_TILE // blk), HAS_DH=has_dh, num_warps=4,
        )  # fmt: skip
        return dx, dw
    if p.kind == "resident":
        # Row groups: a few per SM (dw partials stay small), at most one per ROWS rows, and
        # (TUNE.min_group_elems) at least that many elements each.
        groups = _groups(rows, n, p, sm, plan)
        rows_per_prog = cdiv(rows, groups)
        # One group writes dw itself; dwp stays an FP32 pointer (never written then) so that
        # the kernel's specialization, and its compiled binary, does not depend on the row count.
        dwp = empty((groups if need_dw and groups > 1 else 1, n), torch.float32, h.device)
        launch(_rms_bwd_resident, (groups,),
            dy, dh_arg, h, weight, dx_arg, dwp, dw_arg, rows, rows_per_prog, eps,
            N=n, BLOCK=p.resident_block(n, False), ROWS=p.rows, HAS_DH=has_dh, HAS_DW=need_dw,
            PREFETCH=p.prefetch, EARLY_DH=TUNE.early_dh and not p.prefetch and not TUNE.legacy,
            num_warps=p.num_warps,
        )  # fmt: skip
        if need_dw and groups > 1:
            _finish_dw(dwp, dw, groups, n, sm)
        return dx, dw
    rstd = empty((rows,), torch.float32, h.device)  # per-row 1/rms for the separate dw pass
    if p.kind == "looped":
        launch(_rms_bwd_looped, (rows,),
            dy, dh_arg, h, weight, dx_arg, rstd, eps, N=n, BLOCK=p.block, HAS_DH=has_dh,
            num_warps=p.num_warps,
        )  # fmt: skip
    else:
        chunk, n_chunks = p.chunk(n), p.n_chunks(n)
        part = empty((rows, n_chunks, 2), torch.float32, h.device)
        launch(_rms_bwd_split_stats, (rows, n_chunks),
            dy, h, weight, part, chunk, n_chunks, N=n, BLOCK=p.block, num_warps=p.num_warps,
        )  # fmt: skip
        if folds_dw(n, need_dw):  # dx and dw in one pass over h and dy
            groups = _fold_groups(rows, n, sm)
            col_blocks = cdiv(n, SPLIT_FOLD_BLOCK)
            dwp = empty((groups if groups > 1 else 1, n), torch.float32, h.device)
            launch(_rms_bwd_split_write_dw, (groups, col_blocks),
                dy, dh_arg, h, weight, dx_arg, part, dwp, dw, rows, cdiv(rows, groups),
                n_chunks, eps, N=n, BLOCK=SPLIT_FOLD_BLOCK, ROWS=SPLIT_FOLD_ROWS,
                SPLIT_PAD=p.split_pad(n), HAS_DH=has_dh, num_warps=SPLIT_FOLD_WARPS,
            )  # fmt: skip
            if groups > 1:
                _finish_dw(dwp, dw, groups, n, sm)
            return dx, dw
        launch(_rms_bwd_split_write, (rows, n_chunks),
            dy, dh_arg, h, weight, dx_arg, rstd, part, eps, chunk, n_chunks, N=n, BLOCK=p.block,
            SPLIT_PAD=p.split_pad(n), HAS_DH=has_dh, num_warps=p.num_warps,
        )  # fmt: skip
    if need_dw:
        col_blocks = cdiv(n, DW_BLOCK)
        groups = _dw_groups(rows, n, sm)
        rows_per_group = cdiv(rows, groups)
        part = empty((groups, n), torch.float32, h.device)  # FP32 even when unused (1 group)
        launch(_rms_dw_partial, (col_blocks, groups), dy, h, rstd, part, dw, rows,
            rows_per_group, N=n, BLOCK=DW_BLOCK, STEP=DW_STEP, num_warps=4)  # fmt: skip
        if groups > 1:
            _finish_dw(part, dw, groups, n, sm)
    return dx, dw
