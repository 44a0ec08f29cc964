"""row_sum's row plan rule: ``RowPlan.for_shape(..., op="row_sum")`` returns ``row_sum_plan``.

The branches that session 9 left in plans.py (resident bodies, few-row resident, tiles of two
rows, cooperative chunks, split, looped) are unchanged; rowsum10 adds one, with the measurement
behind it. "R10": results/rowsum10-h200/ (experiments/rowsum10_sweep.py: BF16, one call per
CUDA-graph replay, FP64-gated, median of 30 samples per lane, providers interleaved; lanes
``clean``: a 4x-L2 write, then a 2x-L2 read before each sample, so the written lines have left
L2 (the harness's cold lane since session 10), and ``dirty``: the write alone, as the
session-9 harness flushed).
"""

from __future__ import annotations

from ._launch import cdiv
from .plans import (
    COOP_MAX_CHUNKS_PER_SM,
    RESIDENT_MAX,
    SPLIT_MIN_WIDTH,
    SPLIT_ROWS_PER_SM,
    RowPlan,
    _softmax_warps,
    body_block,
)
from .plans_wide import (
    COOP_ROW_SUM,
    ROW_SUM_32K_WARPS,
    ROW_SUM_FEW_WARPS,
    ROW_SUM_TILE_BODY,
    ROW_SUM_TILE_MIN_ROWS_PER_SM,
)

# Wide rows (beyond the resident range) with ROW_SUM_LOOP_ROWS_PER_SM rows per SM and widths in
# ROW_SUM_LOOP_WIDTHS that are whole multiples of the chunk: one looped program per row
# (8192-element chunks, 16 warps, x read with evict_first, as Inductor reads a load used once)
# instead of cooperative 16384/8 chunks.
# R10 round 1 (clean / dirty lane, us) at 131072: 32 rows 7.7 / 8.4 vs 9.1 / 10.2 (the session-9
# rule), 64 rows 9.1 / 10.2 vs 11.2 / 12.9, 128 rows 12.6 / 14.3 vs 14.9 / 18.0, 256 rows 20.7 /
# 23.3 vs 22.5 / 27.8 (without the hint: level in the clean lane, 2-12% slower in the dirty
# one). Round 2 has torch.compile at 64x131072 at 10.35 / 11.54 (default; max-autotune 10.8 /
# 12.1) against the old rule's 11.2 / 12.6. Level at 1024x151936 (7.8 rows per SM: 75.3 vs
# 76.5 clean, 84.4 vs 83.7 dirty), behind at 100x65537 (128 KB rows: 10.6 vs 10.1 clean): the
# cooperative plan stays there. S9 (rotated inputs) agrees at 64-132 x 131072 (8.2 vs 8.9,
# 11.3 vs 13.4) and has the cooperative or split plans ahead at 64 x 262144. Round 3 (the final
# kernels) at 131072: 32 rows 8.0 / 8.6 vs 9.3 / 10.4, 64 rows 9.1 / 10.2 vs 11.1 / 12.6
# (torch.compile 10.5 / 11.7, max-autotune 10.8 / 12.1), 128 rows 12.6 / 14.5 vs 14.9 / 18.2,
# 256 rows 20.8 / 23.4 vs 22.5 / 27.8; but 128x128256 (a last chunk 2/3 full) 15.3 / 16.8 vs
# 14.6 / 18.0, 0.96x clean: hence whole chunks only (widths 106496, 114688, 122880, 131072).
ROW_SUM_LOOP_ROWS_PER_SM = (0.2, 2.0)
ROW_SUM_LOOP_WIDTHS = (98305, 131072)
ROW_SUM_LOOP = (8192, 16)


def row_sum_plan(rows: int, width: int, sm_count: int, l2_bytes: int = 0,
                 elem_bytes: int = 2) -> RowPlan:  # fmt: skip
    """The rule (plans.py's module docstring for the plan kinds): resident while the row's
    aligned body fits RESIDENT_MAX (32 warps at body 32768; ROW_SUM_FEW_WARPS for fewer rows
    than SMs wider than SPLIT_MIN_WIDTH; two-row tiles at body ROW_SUM_TILE_BODY from
    ROW_SUM_TILE_MIN_ROWS_PER_SM rows per SM); beyond it one looped program per row in the
    ROW_SUM_LOOP_* range (whole chunks), else cooperative COOP_ROW_SUM chunks while they give at
    least one program per SM and fit COOP_MAX_CHUNKS_PER_SM, else split (fewer rows than SMs)
    or looped. ``l2_bytes`` and
    ``elem_bytes`` are not used (the rule depends on the shape and the SM count)."""
    return _plan(rows, width, sm_count)


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
        return RowPlan.resident(width, num_warps=_softmax_warps(body))
    lo, hi = ROW_SUM_LOOP_ROWS_PER_SM
    w_lo, w_hi = ROW_SUM_LOOP_WIDTHS
    if lo * sm <= rows < hi * sm and w_lo <= width <= w_hi and width % ROW_SUM_LOOP[0] == 0:
        return RowPlan.looped(*ROW_SUM_LOOP, evict=True)
    chunks = cdiv(width, COOP_ROW_SUM[0])
    if rows * chunks >= sm and chunks <= COOP_MAX_CHUNKS_PER_SM * sm:
        return RowPlan.coop(*COOP_ROW_SUM)
    if few:
        return RowPlan.split_for(rows, width, sm)
    return RowPlan.looped()
