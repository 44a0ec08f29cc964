"""Row plans shared by the row operators (row_sum, softmax, add_rms_norm and their backwards).

Three ways to cover a row of ``width`` elements:

- ``resident``: a program holds ``rows`` whole rows in registers as a ``[rows, block]`` block and
  reads each once. ``block`` covers the row's 8-aligned body (see ``_rows.py``): 4096 for a
  4097-wide contiguous row, whose one stray element goes through the scalar edge.
- ``looped``: a program walks a row in ``block``-wide chunks (online max/sum for softmax, a
  running sum of squares for RMSNorm) and makes a second pass to write. With
  ``programs_per_sm > 0`` the grid is persistent (``programs_per_sm * SMs`` programs, each taking
  rows pid, pid + programs, ...), so few rows are in flight and the second pass reads from L2.
- ``split``: each row is cut into ``split`` chunks handled by different programs; a statistics
  kernel writes a few floats per chunk, and a merge-and-write kernel has every program merge its
  row's statistics and write its chunk. This keeps the GPU busy when there are few, wide rows.

``RowPlan.for_shape`` is the documented rule; ``RowPlan.candidates`` lists every plan worth
forcing for a cell (the harness's plan grid scores the rule against them by regret). Any plan is
forced by passing it as ``plan=`` to a launcher.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton

# Rows up to 32768 elements are held in registers by one program. H200 row sweep
# (results/early-h200/row_sweep_bfloat16.json): at 8192x32000 BF16 the resident plan moved 3.30
# (softmax) / 4.18 (RMSNorm) TB/s against 2.62 / 3.32 looped, and at 8x16384 it beat split too.
RESIDENT_MAX = 32768
# Chunk width for the looped plan: 8192 with 16 warps (same sweep: RMSNorm 4096x131072 3.31 TB/s
# against 3.19 with 4096/8 warps; softmax within 2%).
CHUNK = 8192
# Chunk width for split plans: 4096 with 8 warps keeps 16 elements per thread.
SPLIT_CHUNK = 4096
# Split when one program per row leaves the GPU under-filled: fewer rows than SMs (the seeds'
# grid: splitting wins clearly below ~32 rows on 80 SMs and is within a few percent up to ~2x).
SPLIT_ROWS_PER_SM = 1.0
# Programs the split plan aims for in total: about two per SM.
SPLIT_TARGET_PER_SM = 2
MAX_SPLIT = 256
# Elements one resident program holds at most (rows * block): ptxas for sm_90 (triton 3.9, BF16)
# keeps a 32768-element softmax/RMSNorm row without spills at 16-32 warps (47-116 registers);
# 65536 spills 160-504 bytes of stack even at 32 warps.
MAX_RESIDENT_ELEMS = 32768


def _warps(block: int) -> int:
    """Warps for a block: <=128 -> 1, <=512 -> 2, <=2048 -> 4, 4096 -> 8, 8192+ -> 16."""
    for limit, warps in ((128, 1), (512, 2), (2048, 4), (4096, 8)):
        if block <= limit:
            return warps
    return 16


def body_block(width: int) -> int:
    """Smallest power-of-two block covering a row's 8-aligned body (``width // 8 * 8`` elements
    at most; the stray elements of an unaligned row go through the scalar edge)."""
    return triton.next_power_of_2(max(width // 8 * 8, 1))


@dataclass(frozen=True)
class RowPlan:
    """How a row operator covers its rows. Fields:

    - ``kind``: ``"resident"``, ``"looped"`` or ``"split"`` (module docstring).
    - ``block``: elements a program touches per row per step (a power of two). Resident: covers
      the row's aligned body (``body_block(width)``); rows that cannot take the aligned path (a
      strided, unaligned row) are launched with ``next_power_of_2(width)`` instead.
    - ``num_warps``: warps per program.
    - ``split``: programs per row (split plan only).
    - ``rows``: rows per program (resident only; a power of two, ``[rows, block]`` blocks).
    - ``programs_per_sm``: looped only; 0 launches one program per row, ``k > 0`` a persistent
      grid of ``k * SMs`` programs.
    - ``evict``: looped only; first-pass reads ask L2 to keep lines (``evict_last``), the second
      pass and the writes ask to drop them (``evict_first``).
    - ``lane_stats``: looped softmax only; per-lane running max and sum (two exps per element,
      no block-wide reduction per chunk) instead of one block reduction per chunk.
    - ``align``: allow the aligned-body path for unaligned rows (``_rows.py``); off forces
      scalar access (a tuning control, never worth choosing).
    """

    kind: str  # "resident" | "looped" | "split"
    block: int
    num_warps: int
    split: int = 1
    rows: int = 1
    programs_per_sm: int = 0
    evict: bool = False
    lane_stats: bool = False
    align: bool = True

    def __post_init__(self):
        if self.kind not in ("resident", "looped", "split"):
            raise ValueError(f"plan kind must be resident, looped or split, got {self.kind!r}")
        if self.block < 1 or self.block & (self.block - 1):
            raise ValueError(f"plan block must be a power of two, got {self.block}")
        if self.rows < 1 or self.rows & (self.rows - 1):
            raise ValueError(f"plan rows must be a power of two, got {self.rows}")
        if self.rows > 1 and self.kind != "resident":
            raise ValueError("rows > 1 needs the resident plan")
        if self.kind == "split" and self.split < 1:
            raise ValueError("split plan needs split >= 1")
        if self.programs_per_sm < 0:
            raise ValueError(f"programs_per_sm must be >= 0, got {self.programs_per_sm}")
        if self.num_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"num_warps must be a power of two up to 32, got {self.num_warps}")

    def chunk(self, width: int) -> int:
        """Elements each split program covers (a multiple of ``block``)."""
        per = triton.cdiv(width, self.split)
        return triton.cdiv(per, self.block) * self.block

    def split_pad(self, width: int) -> int:
        """Power of two covering any chunk count this width can have (depends on the width and
        block only, so a new row count never compiles a new merge kernel)."""
        return triton.next_power_of_2(min(triton.cdiv(width, self.block), MAX_SPLIT))

    def n_chunks(self, width: int) -> int:
        return triton.cdiv(width, self.chunk(width)) if self.kind == "split" else 1

    def programs(self, rows: int, sm_count: int) -> int:
        """Programs along the row axis of the grid."""
        if self.kind == "resident":
            return triton.cdiv(rows, self.rows)
        if self.kind == "looped" and self.programs_per_sm:
            return max(1, min(rows, self.programs_per_sm * sm_count))
        return rows

    def resident_block(self, width: int, aligned_path: bool) -> int:
        """The block a resident launch uses: ``block``, or ``next_power_of_2(width)`` when the
        row cannot take the aligned path and ``block`` covers only its body."""
        need = width // 8 * 8 if aligned_path else width
        if self.block >= need:
            return self.block
        if self.block >= width // 8 * 8:
            return triton.next_power_of_2(width)
        raise ValueError(
            f"resident plan block {self.block} is narrower than the row ({width}); use "
            f"RowPlan.resident({width})"
        )

    @staticmethod
    def resident(width: int, rows: int = 1, num_warps: int | None = None) -> RowPlan:
        block = body_block(width)
        return RowPlan("resident", block, num_warps or _warps(block * rows), rows=rows)

    @staticmethod
    def looped(
        block: int = CHUNK,
        num_warps: int | None = None,
        programs_per_sm: int = 0,
        evict: bool = False,
        lane_stats: bool = False,
    ) -> RowPlan:
        return RowPlan(
            "looped",
            block,
            num_warps or _warps(block),
            programs_per_sm=programs_per_sm,
            evict=evict,
            lane_stats=lane_stats,
        )

    @staticmethod
    def split_for(
        rows: int,
        width: int,
        sm_count: int,
        block: int = SPLIT_CHUNK,
        per_sm: int = SPLIT_TARGET_PER_SM,
        num_warps: int | None = None,
    ) -> RowPlan:
        target = max(2, triton.cdiv(per_sm * sm_count, max(rows, 1)))
        split = max(1, min(target, triton.cdiv(width, block), MAX_SPLIT))
        return RowPlan("split", block, num_warps or _warps(block), split)

    @classmethod
    def for_shape(cls, rows: int, width: int, sm_count: int) -> RowPlan:
        """The rule: resident when the row fits one block; otherwise split when there are fewer
        rows than ``SPLIT_ROWS_PER_SM * sm_count``; otherwise looped."""
        if width <= RESIDENT_MAX:
            return cls.resident(width)
        if rows < SPLIT_ROWS_PER_SM * sm_count:
            return cls.split_for(rows, width, sm_count)
        return cls.looped()

    @classmethod
    def candidates(cls, rows: int, width: int, sm_count: int) -> list[RowPlan]:
        """Every plan worth forcing for a (rows, width) cell, the rule's choice included; each is
        launchable through the launchers' ``plan=`` argument."""
        out: list[RowPlan] = [cls.for_shape(rows, width, sm_count)]
        body = body_block(width)
        if body <= MAX_RESIDENT_ELEMS:
            for w in (4, 8, 16, 32):
                if 32 * w <= body * 4 and body // (32 * w) <= 128:
                    out.append(cls.resident(width, num_warps=w))
            for r in (2, 4, 8, 16):
                if r * body <= 4096 and r <= rows:
                    out.append(cls.resident(width, rows=r))
        if width > 1024:
            for block, warps in ((2048, 4), (4096, 8), (8192, 16), (8192, 8), (16384, 32)):
                if block <= triton.next_power_of_2(width):
                    for k in (0, 1, 2):
                        out.append(cls.looped(block, warps, programs_per_sm=k, evict=k > 0))
                    out.append(cls.looped(block, warps, 2, evict=True, lane_stats=True))
            for block in (2048, 4096, 8192):
                for per_sm in (2, 4, 8):
                    if block < width:
                        out.append(cls.split_for(rows, width, sm_count, block, per_sm))
        seen: set[RowPlan] = set()
        return [p for p in out if not (p in seen or seen.add(p))]
