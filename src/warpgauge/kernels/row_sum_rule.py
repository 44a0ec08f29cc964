"""row_sum's row plan rule: ``RowPlan.for_shape(..., op="row_sum")`` returns ``row_sum_plan``.

The branches that session 9 left in plans.py (resident bodies, few-row resident, tiles of two
rows, cooperative chunks, split, looped) are unchanged; rowsum10 adds three things, each with
the measurement behind it. "R10": results/rowsum10-h200/ (experiments/rowsum10_sweep.py: BF16,
one call per CUDA-graph replay, FP64-gated, median of 30 samples per lane, providers
interleaved; lanes ``dirty``: a 4x-L2 write before each sample, as the harness's cold lane
does, and ``clean``: the same write, then a 2x-L2 read, so the written lines have left L2).
Times are dirty / clean, us.
"""

from __future__ import annotations

from dataclasses import replace

import triton

from .plans import (
    COOP_MAX_CHUNKS_PER_SM,
    COOP_ROW_SUM,
    RESIDENT_MAX,
    ROW_SUM_32K_WARPS,
    ROW_SUM_FEW_WARPS,
    ROW_SUM_TILE_BODY,
    ROW_SUM_TILE_MIN_ROWS_PER_SM,
    SPLIT_MIN_WIDTH,
    SPLIT_ROWS_PER_SM,
    RowPlan,
    _softmax_warps,
    body_block,
)

# x is read with evict_first (Inductor's choice for a load used once) while the input is at most
# this many times the device's L2 (read from the device; unknown: never). R10, dirty lane:
# 16384x4096 (2.1x L2) 38.5 vs 41.6, 8192x4096 22.2 vs 25.1, 16384x4097 38.2 vs 41.8,
# 256x131072 (looped) 23.3 vs 26.7, 1024x151936 (4.9x, coop) 83.3 vs 83.7; past it the hint
# costs: 32768x8192 (8.5x) 132.6 vs 127.1, 8192x32000 (8.3x) 128.6 vs 124.3. Clean lane: level
# everywhere (0.98-1.02x). The flag is a runtime argument, so both sides share one compile.
ROW_SUM_EVICT_MAX_L2X = 4
# Rows that fill a 4096 block (width 4096: aligned, no masked lanes) at 8 warps instead of 4.
# R10: 16384x4096 36.3 vs 38.5 (evict_first both) / 33.2 vs 33.5, 8192x4096 21.4 vs 22.2 /
# 19.0 vs 18.9; S9 (rotated inputs) 31.8 vs 32.4. Partly filled or unaligned 4096 bodies keep 4:
# S9 23301x2880 34.8 at 8 vs 32.2; R10 16384x4097 45.5 vs 38.2, S9 42.4 vs 32.7.
ROW_SUM_FULL_4096_WARPS = 8
# Wide rows (beyond the resident range) with ROW_SUM_LOOP_ROWS_PER_SM rows per SM: one looped
# program per row (8192-element chunks, 16 warps) instead of cooperative chunks. R10 at 131072:
# 32 rows 8.4 vs 10.2 (the session-9 rule's coop 16384/8) / 7.7 vs 9.1, 64 rows 10.2 vs 12.9 /
# 9.1 vs 11.2, 128 rows 14.3 vs 18.0 / 12.6 vs 14.9, 256 rows 23.3 vs 27.8 / 20.7 vs 22.5; at
# 1024x151936 (7.8 per SM) it is level (84.4 vs 83.7 / 75.3 vs 76.5: the cooperative plan stays);
# at 100x65537 (128 KB rows) it is not ahead (11.6 vs 11.3 coop / 10.6 vs 10.0), hence the width
# range. S9 (rotated inputs) agrees at 64-132 rows of 131072 (8.2 vs 8.9, 11.3 vs 13.4) and has
# the cooperative or split plans ahead at 64 x 262144. Fewer rows: the chunks or the split
# plan, as before (S9 16 x 131072 split 4.5 us).
ROW_SUM_LOOP_ROWS_PER_SM = (0.2, 2.0)
ROW_SUM_LOOP_WIDTHS = (98305, 131072)
ROW_SUM_LOOP = (8192, 16)


def row_sum_plan(rows: int, width: int, sm_count: int, l2_bytes: int = 0,
                 elem_bytes: int = 2) -> RowPlan:  # fmt: skip
    """The rule (plans.py's module docstring for the plan kinds): resident while the row's
    aligned body fits RESIDENT_MAX (32 warps at body 32768; ROW_SUM_FEW_WARPS for fewer rows
    than SMs wider than SPLIT_MIN_WIDTH; two-row tiles at body ROW_SUM_TILE_BODY from
    ROW_SUM_TILE_MIN_ROWS_PER_SM rows per SM; ROW_SUM_FULL_4096_WARPS for rows that fill a 4096
    block); beyond it one looped program per row in the ROW_SUM_LOOP_* range, else cooperative
    COOP_ROW_SUM chunks while they give at least one program per SM and fit
    COOP_MAX_CHUNKS_PER_SM, else split (fewer rows than SMs) or looped. Reads are evict_first
    up to ROW_SUM_EVICT_MAX_L2X times the L2 size."""
    plan = _plan(rows, width, sm_count)
    evict = 0 < rows * width * elem_bytes <= ROW_SUM_EVICT_MAX_L2X * l2_bytes
    return replace(plan, evict=evict) if evict else plan


def _plan(rows: int, width: int, sm: int) -> RowPlan:
    body = body_block(width)
    few = rows < SPLIT_ROWS_PER_SM * sm
    if body == 32768:
        return RowPlan.resident(width, num_warps=ROW_SUM_32K_WARPS)
    if few and width > SPLIT_MIN_WIDTH and body <= RESIDENT_MAX:
        return RowPlan.resident(width, num_warps=ROW_SUM_FEW_WARPS)
    if body <= RESIDENT_MAX:
        if body == ROW_SUM_TILE_BODY and rows >= ROW_SUM_TILE_MIN_ROWS_PER_SM * sm:
            return RowPlan.resident(width, rows=2, num_warps=4)
        if width == 4096:
            return RowPlan.resident(width, num_warps=ROW_SUM_FULL_4096_WARPS)
        return RowPlan.resident(width, num_warps=_softmax_warps(body))
    lo, hi = ROW_SUM_LOOP_ROWS_PER_SM
    w_lo, w_hi = ROW_SUM_LOOP_WIDTHS
    if lo * sm <= rows < hi * sm and w_lo <= width <= w_hi:
        return RowPlan.looped(*ROW_SUM_LOOP)
    chunks = triton.cdiv(width, COOP_ROW_SUM[0])
    if rows * chunks >= sm and chunks <= COOP_MAX_CHUNKS_PER_SM * sm:
        return RowPlan.coop(*COOP_ROW_SUM)
    if few:
        return RowPlan.split_for(rows, width, sm)
    return RowPlan.looped()
