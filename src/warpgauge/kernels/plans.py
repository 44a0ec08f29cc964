"""Row plans shared by the row operators (row_sum, softmax, add_rms_norm and their backwards).

Three ways to cover a row of ``width`` elements:

- ``resident``: the whole row fits one block; one program per row reads it once.
- ``looped``: one program per row walks the row in ``block``-wide chunks (online max/sum for
  softmax, a running sum of squares for RMSNorm) and then makes a second pass to write.
- ``split``: each row is cut into ``split`` chunks handled by different programs; a statistics
  kernel writes a few floats per chunk, and a merge-and-write kernel has every program merge its
  row's statistics and write its chunk. This keeps the GPU busy when there are few, wide rows.

``RowPlan.for_shape`` is the documented rule; tests and sweeps force any plan by building a
``RowPlan`` directly and passing it as ``plan=`` to a launcher.
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


def _warps(block: int) -> int:
    """Warps for a block: <=128 -> 1, <=512 -> 2, <=2048 -> 4, 4096 -> 8, 8192+ -> 16."""
    for limit, warps in ((128, 1), (512, 2), (2048, 4), (4096, 8)):
        if block <= limit:
            return warps
    return 16


@dataclass(frozen=True)
class RowPlan:
    kind: str  # "resident" | "looped" | "split"
    block: int  # elements one program touches per step (power of two)
    num_warps: int
    split: int = 1  # programs per row (split plan only)

    def __post_init__(self):
        if self.kind not in ("resident", "looped", "split"):
            raise ValueError(f"plan kind must be resident, looped or split, got {self.kind!r}")
        if self.block < 1 or self.block & (self.block - 1):
            raise ValueError(f"plan block must be a power of two, got {self.block}")
        if self.kind == "split" and self.split < 1:
            raise ValueError("split plan needs split >= 1")

    def chunk(self, width: int) -> int:
        """Elements each split program covers (a multiple of ``block``)."""
        per = triton.cdiv(width, self.split)
        return triton.cdiv(per, self.block) * self.block

    def n_chunks(self, width: int) -> int:
        return triton.cdiv(width, self.chunk(width)) if self.kind == "split" else 1

    @staticmethod
    def resident(width: int) -> RowPlan:
        block = triton.next_power_of_2(width)
        return RowPlan("resident", block, _warps(block))

    @staticmethod
    def looped(block: int = CHUNK) -> RowPlan:
        return RowPlan("looped", block, _warps(block))

    @staticmethod
    def split_for(rows: int, width: int, sm_count: int, block: int = SPLIT_CHUNK) -> RowPlan:
        target = max(2, triton.cdiv(SPLIT_TARGET_PER_SM * sm_count, max(rows, 1)))
        split = max(1, min(target, triton.cdiv(width, block), MAX_SPLIT))
        return RowPlan("split", block, _warps(block), split)

    @classmethod
    def for_shape(cls, rows: int, width: int, sm_count: int) -> RowPlan:
        """The rule: resident when the row fits one block; otherwise split when there are fewer
        rows than ``SPLIT_ROWS_PER_SM * sm_count``; otherwise looped."""
        if width <= RESIDENT_MAX:
            return cls.resident(width)
        if rows < SPLIT_ROWS_PER_SM * sm_count:
            return cls.split_for(rows, width, sm_count)
        return cls.looped()
