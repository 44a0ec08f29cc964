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

from dataclasses import dataclass, replace

from ._launch import cdiv, next_pow2

# Constants of the rule beyond the resident range, each with its measurement: plans_wide.py.
from .plans_wide import (
    COOP_CANDIDATES,
    COOP_FEW_NARROW,
    COOP_LOOP_MIN_WIDTH,
    COOP_MAX_CHUNKS_PER_SM,
    COOP_RMS,
    COOP_RMS_SMALL,
    COOP_SOFTMAX,
    COOP_SOFTMAX_FEW_PER_SM,
    COOP_SOFTMAX_LOOP,
    COOP_SOFTMAX_ONE_WARP,
    COOP_SOFTMAX_SMALL,
    RMS_COOP_LOOP_MIN_PER_SM,
    RMS_LOOPED_L2_SHARE,
    RMS_LOOPED_ROWS_PER_SM,
    RMS_W_EARLY_EDGE_MAX_BODY,
    RMS_W_EARLY_MIN_BODY,
    RMS_W_EARLY_ROWS_PER_SM,
    RMS_W_LATE_ROWS_PER_SM,
    SOFTMAX_BWD_CANDIDATES,
    SOFTMAX_BWD_COOP,
    SOFTMAX_BWD_COOP_LOOP,
    SOFTMAX_BWD_FEW_PER_SM,
    SOFTMAX_FAST_LOOP_CANDIDATES,
    SOFTMAX_LOOP_L2X,
    SOFTMAX_LOOP_WIDE,
    SOFTMAX_ONE_WARP_MAX_CHUNKS,
    SOFTMAX_ONE_WARP_MIN_PER_SM,
    SOFTMAX_PREFETCH_PER_SM,
    SOFTMAX_SMALL_L2_SHARE,
    SOFTMAX_SPLIT_MIN_CHUNKS,
    UNALIGNED_WARPS,
)  # fmt: skip

# Measurements behind the thresholds: results/row-tuning-h200/round1_tune.json ("R1") and
# round2_tune.json ("R2"), H200 sweeps of tuning/row_tune.py (BF16, CUDA-graph replay, inputs
# rotated past 3x L2, every plan gated against the FP64 reference; TB/s on compulsory bytes),
# and the earlier results/early-h200/row_sweep_bfloat16.json.

# Rows whose aligned body is up to 32768 elements are held in registers by one program: R1 at
# 1048x32000 RMSNorm resident 3.83 TB/s vs 3.49 best looped; softmax 2097x32000 3.04 vs 2.95.
RESIDENT_MAX = 32768
# Few rows wider than 16384 split instead of staying resident: R1 softmax 4x32769 split 4.68 us
# vs resident 6.08; 128x32769 resident 8.75 us vs split 13.7 (rows >= SM/2 stay resident).
RESIDENT_WIDE_MIN_ROWS_PER_SM = 0.5
# Width above which few rows split: R1 softmax 8x16384 resident 3.87 us beats every split (4.14+).
SPLIT_MIN_WIDTH = 16384
# Default chunk width for a looped plan built without arguments (RowPlan.looped()).
CHUNK = 8192
# Split when one program per row leaves the GPU under-filled: fewer rows than SMs (R1: looped
# loses to split at 64x131072 and 128x262144; the seeds' grid agrees below ~1 row per SM).
SPLIT_ROWS_PER_SM = 1.0
# Programs the split plan aims for in total: 8 per SM. R1: softmax 64x131072 split=17 (8/SM)
# 15.35 us vs 20.13 at 2/SM; RMSNorm 4x32769 4.88 us vs 6.30; 2x1048576 softmax 6.85 vs 7.42.
SPLIT_TARGET_PER_SM = 8
MAX_SPLIT = 256
# Split block: 2048 up to this width, 4096 above. R1: 4x32769 softmax 4.68 us at 2048 vs 4.96 at
# 4096 (RMSNorm 4.88 vs 6.30); 64x131072 softmax 15.35 at 4096 vs 15.90; 2x1048576 softmax 6.85
# at 4096 vs 7.35 (RMSNorm 8.85 vs 9.64).
SPLIT_NARROW_MAX = 65536
# Softmax rows whose body is a full 32768 block and wider than this: persistent resident plan
# (32 warps, 2 per SM) that prefetches the next row. R2: 2097x32000 3.64 TB/s vs 3.02 plain
# resident, 2047x32769 3.51 vs 2.82; at 2730x24576 and 3640x18432 plain resident wins (3.84,
# 3.76 vs 3.51, 3.23).
SOFTMAX_PREFETCH_MIN_WIDTH = 28672
# Looped plans (rows >= SMs, rows wider than 32768): persistent grid with eviction hints.
# R1 softmax: 8192/16 warps at 2 programs/SM best at 50257 and 65537 (2.36, 2.53 TB/s vs 2.17,
# 2.31 one program per row); 16384/32 at 2/SM best at 100000-151936 (2.27-2.68 vs 1.92-2.10).
# R1 RMSNorm: 16384/32 at 1/SM best at every width 32769-151936 (3.08-3.46 vs 2.54-2.90).
# R2 softmax: per-lane statistics on 16384/32 win from 128256 up (2.74, 2.81, 2.14 TB/s at
# 128256, 131072, 200003 vs 2.65, 2.44, 1.88) and tie at 100000-151936; they lose at 50257.
# R2 row_sum: looped 4096/8 warps, one program per row: 3.61-4.39 TB/s at 50257-262144 (a
# split into 16k chunks measured 2.35-2.99).
LOOPED_WIDE = 98304
# Elements one resident program holds at most (rows * block): ptxas for sm_90 (triton 3.9, BF16)
# keeps a 32768-element softmax/RMSNorm row without spills at 16-32 warps (47-116 registers);
# 65536 spills 160-504 bytes of stack even at 32 warps.
MAX_RESIDENT_ELEMS = 32768
# add_rms_norm backward (resident): row groups per SM = 8192 // block (at least 1). R2 with dh:
# 16384x2048 80.9 us at 4/SM vs 117.1 at 1; 8192x2880 58.8 at 2 vs 74.5 at 1; 4096x4096 42.8 at
# 2 vs 46.4; 8192x8192 136.9 at 1 (3.92 TB/s) best. (Launcher default when a plan says 0: 1.)
RMS_BWD_GROUPS_PER_SM = 1
# Widest block the backward prefetches the next rows for (ptxas, sm_90: 128 registers and no
# spills at 8192/16 warps; 16384 spills 496 bytes at 16 warps). Block 16384: 16 warps without
# prefetch (R2 4096x14336 174 us vs 197 at 32 warps, 1720 with prefetch). Block 32768 spills
# even so (R2 1024x32000 377 us): the backward loops there.
RMS_BWD_PREFETCH_MAX = 8192
RMS_BWD_RESIDENT_MAX = 16384
# Softmax backward, resident, rows that leave part of their block masked (a body of 4096-16384
# wider than the row's 8-aligned width): the forward's warps (``_softmax_warps``: 4, 8, 8)
# instead of the generic table's (8, 16, 16). smbwd14 res set (results/smbwd14-h200,
# smbwd14res.jsonl): 2048x14336 41.2 us vs 46.8, 8192x14336 161.2 vs 176.8, 8192x5120 56.5 vs
# 67.1, 2048x5120 17.1 vs 18.9, 8192x7168 80.3 vs 82.8, 2048x2880 11.6 vs 11.8. Full blocks
# keep the generic warps (8192x4096 46.6 us vs 47.5 at 4 warps, 8192x16384 188.8 vs 192.5 at 8).
SOFTMAX_BWD_PARTIAL_BODIES = (4096, 8192, 16384)


def _warps(block: int) -> int:
    """Warps for a block: <=128 -> 1, <=512 -> 2, <=2048 -> 4, 4096 -> 8, 8192+ -> 16."""
    for limit, warps in ((128, 1), (512, 2), (2048, 4), (4096, 8)):
        if block <= limit:
            return warps
    return 16


def _softmax_warps(block: int) -> int:
    """Resident warps for softmax and row_sum: more elements per thread than the generic table.
    R1/R2 softmax: 2880 and 4097 (block 4096) 4.01 / 3.97 TB/s at 4 warps vs 3.67 / 3.22 at 8;
    5120 (8192) 4.01 at 8 vs 3.26 at 16; 14336 (16384) 3.88 at 8 vs 3.63 at 16; 2048 at 2 warps
    4.09 vs 3.96 at 4. R2 row_sum: 4097 4.31 at 4 warps vs 3.31 at 8; 5120 4.39 at 8 vs 3.83."""
    if block <= 512:
        return _warps(block)
    return {1024: 2, 2048: 2, 4096: 4, 8192: 8, 16384: 8}.get(block, 16)


def body_block(width: int) -> int:
    """Smallest power-of-two block covering a row's 8-aligned body (``width // 8 * 8`` elements
    at most; the stray elements of an unaligned row go through the scalar edge)."""
    return next_pow2(max(width // 8 * 8, 1))


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
      pass and the writes ask to drop them (``evict_first``). row_sum, every kind: x is read with
      ``evict_first`` (the rule's looped plan for wide rows, ``row_sum_rule.py``).
    - ``lane_stats``: looped softmax only; per-lane running max and sum (two exps per element,
      no block-wide reduction per chunk) instead of one block reduction per chunk.
    - ``prefetch``: add_rms_norm backward, resident: load the next rows while the current ones
      are computed (two row blocks of loads in flight; more registers).
    - ``programs_per_sm`` with a resident plan: softmax and add_rms_norm forward (``rows ==
      1``; add_rms_norm: aligned rows) run a persistent grid that loads the next row while it
      computes the current one; row_sum (any ``rows``, any alignment) a persistent grid of
      ``[rows, block]`` tiles that loads the next tile while it reduces the current one;
      add_rms_norm's backward uses it as row groups per SM (0: ``RMS_BWD_GROUPS_PER_SM``);
      with a register ``coop`` plan, softmax runs a persistent cooperative grid (at most
      ``k * SMs`` programs, a whole number of rows' chunks, all resident at once) whose programs
      walk rows lane, lane + lanes, ... and load the next row's chunk (``stages`` 2: the next
      two rows' chunks) before the statistics exchange (``softmax_coop._softmax_coop_pf``;
      the launcher lowers ``k`` to what the compiled kernel's registers let an SM hold);
      others ignore it.
    - ``align``: allow the aligned-body path for unaligned rows (``_rows.py``); off forces
      scalar access (a tuning control, never worth choosing).
    - ``stages``: looped softmax and row_sum only; ``k > 0`` asks Triton to software-pipeline
      the chunk loops ``k`` deep (``tl.range(num_stages=k)``: the next chunks' loads are issued
      before the current one is reduced); 0 leaves the loops as plain ranges. Also the slice
      loops of a looped cooperative softmax (``sub``).
    - ``w_early``: add_rms_norm forward, resident (without ``programs_per_sm``) and register
      cooperative plans: load the weight together with x and r (resident) or before the
      statistics exchange (cooperative), so its latency hides behind theirs; off loads it after
      the row's reduction. Others ignore it.
    - ``sub``: cooperative softmax and add_rms_norm forward; ``s > 0`` walks each program's
      ``block``-wide chunk in ``s``-wide slices twice (statistics, then after the exchange a
      second read, from L2, and the write: ``softmax_coop.py``, ``rmsnorm_coop.py``) instead of
      holding the chunk in registers; ``evict`` adds the L2 hints. row_sum ignores it.
    - ``fma_exp``: cooperative softmax with ``sub`` only; the first ``k`` slices of each chunk's
      statistics pass compute their exps with a polynomial on the FMA pipe instead of the MUFU
      (``softmax_coop._exp2_fma``): the two passes need two exps per element, about all the
      MUFU issues at DRAM speed.
    - ``fast_exp``: cooperative and persistent resident softmax; exps as one ``ex2.approx.ftz`` instruction each with
      the scaling folded into one multiply-add (``softmax_coop.ex2``) instead of ``tl.exp``'s
      range fix-ups (the kernels were issue-bound: ~24 instructions per element in the looped
      cooperative kernel on sm_90); cooperative plans also publish their statistics with a
      relaxed atomic (no memory barrier).
    - ``hold_x``: register cooperative softmax; hold the chunk as loaded (16-bit: half the
      registers of FP32 exps) across the exchange and compute its exps again after it.
    - ``nap``: cooperative softmax; nanoseconds of ``nanosleep`` between polls of the slots.
    - ``maxnreg``: cooperative plans; a register cap for ptxas (0: none), for more programs per SM.
    """

    kind: str  # "resident" | "looped" | "split"
    block: int
    num_warps: int
    split: int = 1
    rows: int = 1
    programs_per_sm: int = 0
    evict: bool = False
    lane_stats: bool = False
    prefetch: bool = True
    align: bool = True
    stages: int = 0
    sub: int = 0
    w_early: bool = False
    fma_exp: int = 0
    fast_exp: bool = False
    hold_x: bool = False
    nap: int = 0
    maxnreg: int = 0

    def __post_init__(self):
        if self.kind not in ("resident", "looped", "split", "coop"):
            raise ValueError(
                f"plan kind must be resident, looped, split or coop, got {self.kind!r}"
            )
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
        if self.sub and (self.kind != "coop" or self.sub & (self.sub - 1) or self.sub > self.block):
            raise ValueError(
                f"sub must be 0 or a power of two up to block ({self.block}) on a coop plan, "
                f"got {self.sub} on a {self.kind} plan"
            )
        slices = self.block // self.sub if self.sub else 0
        if self.fma_exp and not (0 < self.fma_exp <= slices):
            raise ValueError(
                f"fma_exp must be 0 or up to block // sub ({self.block} // {self.sub}) slices on "
                f"a coop plan with sub, got {self.fma_exp}"
            )
        if self.fast_exp and not (
            self.kind == "coop" or (self.kind == "resident" and self.programs_per_sm)
        ):
            raise ValueError(
                f"fast_exp needs a coop plan or a persistent resident one, got a {self.kind} plan"
            )
        if self.hold_x and not (self.kind == "coop" and not self.sub):
            raise ValueError("hold_x needs a register coop plan (no sub)")
        if self.kind == "coop" and self.programs_per_sm and (self.sub or self.hold_x or self.nap):
            raise ValueError(
                "programs_per_sm on a coop plan (the persistent cooperative softmax) takes no "
                f"sub, hold_x or nap, got sub={self.sub}, hold_x={self.hold_x}, nap={self.nap}"
            )
        if not 0 <= self.stages <= 8:
            raise ValueError(f"stages must be 0 (no pipelining) to 8, got {self.stages}")
        if self.num_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"num_warps must be a power of two up to 32, got {self.num_warps}")

    def chunk(self, width: int) -> int:
        """Elements each split program covers (a multiple of ``block``)."""
        per = cdiv(width, self.split)
        return cdiv(per, self.block) * self.block

    def split_pad(self, width: int) -> int:
        """Power of two covering any chunk count this width can have (depends on the width and
        block only, so a new row count never compiles a new merge kernel)."""
        return next_pow2(min(cdiv(width, self.block), MAX_SPLIT))

    def coop_chunks(self, width: int, aligned_path: bool) -> int:
        """Programs per row of a cooperative plan: blocks covering the row's body (at most
        ``width // 8 * 8`` elements on the aligned path, whose edge goes with chunk 0)."""
        return cdiv(width // 8 * 8 if aligned_path else width, self.block)

    def n_chunks(self, width: int) -> int:
        return cdiv(width, self.chunk(width)) if self.kind == "split" else 1

    def programs(self, rows: int, sm_count: int) -> int:
        """Programs along the row axis of the grid."""
        if self.kind == "resident":
            return cdiv(rows, self.rows)
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
            return next_pow2(width)
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
        stages: int = 0,
    ) -> RowPlan:
        return RowPlan(
            "looped",
            block,
            num_warps or _warps(block),
            programs_per_sm=programs_per_sm,
            evict=evict,
            lane_stats=lane_stats,
            stages=stages,
        )

    @staticmethod
    def coop(
        block: int,
        num_warps: int | None = None,
        sub: int = 0,
        stages: int = 0,
        evict: bool = False,
        fma_exp: int = 0,
        fast_exp: bool = False,
        hold_x: bool = False,
        nap: int = 0,
        maxnreg: int = 0,
        programs_per_sm: int = 0,
    ) -> RowPlan:
        """Cooperative split: ``block``-wide chunks of a row, one program each, the chunk held
        in registers while the row's statistics are exchanged through global memory (softmax
        with ``sub``: the chunk walked in slices twice instead; softmax with
        ``programs_per_sm``: a persistent grid that prefetches; see the class docstring)."""
        w = num_warps or _softmax_warps(sub or block)
        return RowPlan("coop", block, w, sub=sub, stages=stages, evict=evict, fma_exp=fma_exp,
                       fast_exp=fast_exp, hold_x=hold_x, nap=nap, maxnreg=maxnreg,
                       programs_per_sm=programs_per_sm)  # fmt: skip

    @staticmethod
    def split_for(
        rows: int,
        width: int,
        sm_count: int,
        block: int | None = None,
        per_sm: int = SPLIT_TARGET_PER_SM,
        num_warps: int | None = None,
    ) -> RowPlan:
        """About ``per_sm * sm_count`` programs in all. Without ``block``: 2048 up to width
        ``SPLIT_NARROW_MAX``, else 4096 (the width alone decides, so a new row count never
        compiles a new kernel)."""
        target = max(2, cdiv(per_sm * sm_count, max(rows, 1)))
        if block is None:
            block = 2048 if width <= SPLIT_NARROW_MAX else 4096
        split = max(1, min(target, cdiv(width, block), MAX_SPLIT))
        return RowPlan("split", block, num_warps or _warps(block), split)

    @classmethod
    def for_shape(
        cls, rows: int, width: int, sm_count: int, op: str = "", l2_bytes: int = 0,
        elem_bytes: int = 2,
    ) -> RowPlan:  # fmt: skip
        """The rule. ``op`` is one of ``softmax``, ``softmax_bwd``, ``rms``, ``rms_bwd``,
        ``row_sum`` (``""``: the generic rule: resident, split or looped as the forward RMSNorm
        rule had it before the cooperative plans; the launchers always pass their op). row_sum's
        rule is ``row_sum_rule.row_sum_plan``.

        - resident when the row's aligned body fits ``RESIDENT_MAX``, unless the row is wider
          than ``SPLIT_MIN_WIDTH`` and there are fewer than ``RESIDENT_WIDE_MIN_ROWS_PER_SM *
          sm_count`` rows; softmax and add_rms_norm take ``COOP_FEW_NARROW`` cooperative chunks
          there;
        - otherwise cooperative (``coop``), while a row has at most ``COOP_MAX_CHUNKS_PER_SM *
          sm_count`` chunks: add_rms_norm at any row count (``COOP_RMS_SMALL`` chunks, or
          ``COOP_RMS`` where those are too many); softmax (ex2 exps, ``fast_exp``) with
          ``COOP_SOFTMAX`` chunks at any row count (``COOP_SOFTMAX_SMALL`` for inputs below
          ``SOFTMAX_SMALL_L2_SHARE`` x L2), ``COOP_SOFTMAX_LOOP`` (looped chunks, L2 re-read) for rows
          wider than ``COOP_LOOP_MIN_WIDTH`` whose input is past ``SOFTMAX_LOOP_L2X`` x L2 (or
          past L2 and wider than ``SOFTMAX_LOOP_WIDE``), and split instead for few rows of at
          least ``SOFTMAX_SPLIT_MIN_CHUNKS`` chunks short of ``COOP_SOFTMAX_FEW_PER_SM``
          programs per SM; softmax's backward with ``SOFTMAX_BWD_COOP_LOOP`` (looped chunks),
          or, where the rows' looped chunks give fewer than ``SOFTMAX_BWD_FEW_PER_SM`` programs
          per SM, ``SOFTMAX_BWD_COOP`` (register chunks; split for rows of at least
          ``SOFTMAX_SPLIT_MIN_CHUNKS`` of them);
        - otherwise split when there are fewer rows than ``SPLIT_ROWS_PER_SM * sm_count``;
        - otherwise looped on a persistent grid (softmax; add_rms_norm's backward).

        ``l2_bytes`` (the device's L2 size; 0: unknown) and ``elem_bytes`` (the input's element
        size) refine softmax and add_rms_norm beyond the resident range by whether the rows
        fit L2 (softmax: ``SOFTMAX_LOOP_L2X``; add_rms_norm: ``RMS_LOOPED_L2_SHARE``).
        """
        if op == "row_sum":  # row_sum's rule and its measurements: row_sum_rule.py
            from .row_sum_rule import row_sum_plan

            return row_sum_plan(rows, width, sm_count, l2_bytes, elem_bytes)
        body = body_block(width)
        few = rows < SPLIT_ROWS_PER_SM * sm_count
        resident_max = RMS_BWD_RESIDENT_MAX if op == "rms_bwd" else RESIDENT_MAX
        wide_few = width > SPLIT_MIN_WIDTH and rows < RESIDENT_WIDE_MIN_ROWS_PER_SM * sm_count
        in_bytes = rows * width * elem_bytes

        def coop_fits(block: int) -> bool:
            return cdiv(width, block) <= COOP_MAX_CHUNKS_PER_SM * sm_count

        def softmax_coop() -> RowPlan:  # register chunks: smaller ones for inputs well inside L2
            small = l2_bytes > 0 and in_bytes < SOFTMAX_SMALL_L2_SHARE * l2_bytes
            one_warp = cdiv(width, COOP_SOFTMAX_ONE_WARP[0])
            if (
                one_warp <= SOFTMAX_ONE_WARP_MAX_CHUNKS
                and rows * one_warp >= SOFTMAX_ONE_WARP_MIN_PER_SM * sm_count
                and coop_fits(COOP_SOFTMAX_ONE_WARP[0])
            ):
                return cls.coop(*COOP_SOFTMAX_ONE_WARP, fast_exp=True)
            if small and coop_fits(COOP_SOFTMAX_SMALL[0]):
                return cls.coop(*COOP_SOFTMAX_SMALL, fast_exp=True)
            return cls.coop(*COOP_SOFTMAX, fast_exp=True)

        if body <= RESIDENT_MAX and wide_few and op == "softmax":
            return cls.coop(*COOP_FEW_NARROW, fast_exp=True)
        if body <= RESIDENT_MAX and wide_few and op == "rms":
            return cls.coop(*COOP_FEW_NARROW)
        if body <= resident_max and not wide_few:
            if op == "softmax" and body == 32768 and width > SOFTMAX_PREFETCH_MIN_WIDTH:
                # S9: SM/2 to SM rows, the cooperative chunks win; G16: at any row count for
                # rows with an edge past the body (192x32769 13.1 us vs 15.5, 256x 15.0 vs 15.8)
                if rows < sm_count or width > body:
                    return softmax_coop()
                return RowPlan("resident", body, 32, programs_per_sm=SOFTMAX_PREFETCH_PER_SM)
            unaligned = width % 8 != 0  # contiguous rows take the aligned-body path (_rows.py)
            if op == "softmax" and unaligned and body == 8192:
                return cls.resident(width, num_warps=UNALIGNED_WARPS["softmax"])
            if op == "softmax":
                return cls.resident(width, num_warps=_softmax_warps(body))
            if op == "rms":  # G16: the weight loaded with x and r from 8192-wide bodies
                warps = UNALIGNED_WARPS["rms"] if unaligned and body in (8192, 16384) else None
                plan = cls.resident(width, num_warps=warps)
                edge = width > body and body > RMS_W_EARLY_EDGE_MAX_BODY
                if body >= RMS_W_EARLY_MIN_BODY:  # P19: not at 16384 with few rows
                    few = rows <= RMS_W_LATE_ROWS_PER_SM * sm_count
                    early = not edge and not (body == 16384 and few)
                else:  # P19: narrower bodies in at most RMS_W_EARLY_ROWS_PER_SM x SM rows
                    early = rows <= RMS_W_EARLY_ROWS_PER_SM * sm_count
                return replace(plan, w_early=early)
            if op == "softmax_bwd" and body in SOFTMAX_BWD_PARTIAL_BODIES and width < body:
                return cls.resident(width, num_warps=_softmax_warps(body))
            if op == "rms_bwd":
                if body > RMS_BWD_PREFETCH_MAX:
                    return RowPlan("resident", body, 16, programs_per_sm=1, prefetch=False)
                per_sm = max(1, RMS_BWD_PREFETCH_MAX // body)
                return RowPlan("resident", body, _warps(body), programs_per_sm=per_sm)
            return cls.resident(width)

        if op == "softmax_bwd" and coop_fits(SOFTMAX_BWD_COOP_LOOP["block"]):
            chunks = cdiv(width, SOFTMAX_BWD_COOP_LOOP["block"])
            if rows * chunks < SOFTMAX_BWD_FEW_PER_SM * sm_count:
                if cdiv(width, SOFTMAX_BWD_COOP[0]) >= SOFTMAX_SPLIT_MIN_CHUNKS:
                    return cls.split_for(rows, width, sm_count)
                if coop_fits(SOFTMAX_BWD_COOP[0]):
                    return cls.coop(*SOFTMAX_BWD_COOP)
            return cls.coop(**SOFTMAX_BWD_COOP_LOOP)
        if (
            op == "rms"
            and l2_bytes > 0
            and RMS_LOOPED_ROWS_PER_SM * sm_count <= rows <= sm_count
            and in_bytes <= RMS_LOOPED_L2_SHARE * l2_bytes
        ):
            return cls.looped(16384, 32, programs_per_sm=1, evict=True)
        if op == "rms" and coop_fits(COOP_RMS_SMALL[0]):  # beyond resident, any row count
            return cls.coop(*COOP_RMS_SMALL)
        if op == "rms" and coop_fits(COOP_SOFTMAX_LOOP["block"]):  # > 2 x SM chunks of 2048
            loop_chunks = cdiv(width, COOP_SOFTMAX_LOOP["block"])
            if rows * loop_chunks >= RMS_COOP_LOOP_MIN_PER_SM * sm_count:
                return cls.coop(**COOP_SOFTMAX_LOOP)
            if coop_fits(COOP_RMS[0]):
                return cls.coop(*COOP_RMS)
        if op == "softmax":
            chunks = cdiv(width, COOP_SOFTMAX[0])
            past_l2 = in_bytes > l2_bytes if l2_bytes > 0 else not few
            huge = l2_bytes > 0 and in_bytes > SOFTMAX_LOOP_L2X * l2_bytes
            split = rows * chunks < COOP_SOFTMAX_FEW_PER_SM * sm_count and (
                chunks >= SOFTMAX_SPLIT_MIN_CHUNKS
            )
            wide = width > SOFTMAX_LOOP_WIDE and (past_l2 or (l2_bytes > 0 and not split))
            loop = width > COOP_LOOP_MIN_WIDTH and (huge or wide)
            fits = coop_fits(COOP_SOFTMAX[0])
            if coop_fits(COOP_SOFTMAX_LOOP["block"]) and (loop or (not few and not fits)):
                return cls.coop(**COOP_SOFTMAX_LOOP, fast_exp=True)
            if fits and not split:
                return softmax_coop()
        if few:
            return cls.split_for(rows, width, sm_count)
        if op == "softmax":
            if width >= LOOPED_WIDE:
                return cls.looped(16384, 32, programs_per_sm=2, evict=True, lane_stats=True)
            return cls.looped(8192, 16, programs_per_sm=2, evict=True)
        if op in ("rms", ""):
            return cls.looped(16384, 32, programs_per_sm=1, evict=True)
        return cls.looped()

    @classmethod
    def candidates(
        cls, rows: int, width: int, sm_count: int, op: str = "", l2_bytes: int = 0,
        elem_bytes: int = 2,
    ) -> list[RowPlan]:  # fmt: skip
        """Every plan worth forcing for a (rows, width) cell, the rule's choice (for ``op``)
        first; each is launchable through the launchers' ``plan=`` argument. Fields that only
        one op reads (``programs_per_sm`` and ``prefetch`` of a resident plan: add_rms_norm's
        backward; ``lane_stats``: softmax) are varied only for that op."""
        out: list[RowPlan] = [cls.for_shape(rows, width, sm_count, op, l2_bytes, elem_bytes)]
        body = body_block(width)
        if body <= MAX_RESIDENT_ELEMS:
            for w in (2, 4, 8, 16, 32):
                if 32 * w <= body and body // (32 * w) <= 64:
                    out.append(cls.resident(width, num_warps=w))
            for r in (2, 4, 8, 16):
                if r * body <= 4096 and r <= rows:
                    out.append(cls.resident(width, rows=r))
            if op == "row_sum" and body <= 16384:  # persistent tiles with prefetch (S9)
                w = _softmax_warps(body)
                out.append(RowPlan("resident", body, w, programs_per_sm=max(1, 32 // w)))
            if op == "rms" and body >= 4096:  # 32768 spills at 16 warps (ptxas): use 32
                w = _warps(body) if body <= 16384 else 32
                for k in (1, 2):
                    out.append(RowPlan("resident", body, w, programs_per_sm=k))
            if op in ("softmax", "") and body >= 4096:
                for w in (_softmax_warps(body), 2 * _softmax_warps(body)):
                    for k in (1, 2):
                        if w <= 32:
                            out.append(RowPlan("resident", body, w, programs_per_sm=k))
                            if op == "softmax":
                                out.append(RowPlan("resident", body, w, programs_per_sm=k,
                                                   fast_exp=True))  # fmt: skip
            if op == "rms_bwd":
                for w in (_warps(body), 2 * _warps(body)):
                    for k in (1, 2, 4):
                        for pf in (True, False):
                            if w <= 32:
                                out.append(RowPlan("resident", body, w, programs_per_sm=k,
                                                   prefetch=pf))  # fmt: skip
        if width > 1024 and op != "rms_bwd":
            for block, warps in ((4096, 8), (8192, 16), (16384, 32)):
                if block <= next_pow2(width):
                    for k in (0, 1, 2):
                        out.append(cls.looped(block, warps, programs_per_sm=k, evict=k > 0))
                    if op in ("softmax", ""):
                        out.append(cls.looped(block, warps, 2, evict=True, lane_stats=True))
        if width > 2048 and op not in ("rms_bwd", "softmax_bwd"):
            for block, warps in COOP_CANDIDATES:
                if block < width:
                    out.append(cls.coop(block, warps))
                    if op == "softmax":  # the same with ex2 exps
                        out.append(cls.coop(block, warps, fast_exp=True))
            if op in ("softmax", "rms", "") and width > 2 * COOP_SOFTMAX_LOOP["block"]:
                out.append(cls.coop(**COOP_SOFTMAX_LOOP))  # looped chunks (sub)
            if op == "softmax" and width > 2 * COOP_SOFTMAX_LOOP["block"]:
                for extra in SOFTMAX_FAST_LOOP_CANDIDATES:
                    out.append(cls.coop(**{**COOP_SOFTMAX_LOOP, **extra}))
        if width > 2048 and op == "softmax_bwd":
            for kw in SOFTMAX_BWD_CANDIDATES:
                if kw["block"] < width:
                    out.append(cls.coop(**kw))
        if width > 2048 and rows < 2 * sm_count and op not in ("rms_bwd", "softmax_bwd"):
            out.append(cls.split_for(rows, width, sm_count))
            for block in (2048, 4096, 8192):
                for per_sm in (4, 8, 16):
                    if block < width:
                        out.append(cls.split_for(rows, width, sm_count, block, per_sm))
        first = out[0]
        if op == "row_sum":  # the rule's plan with the other eviction choice (rowsum10)
            out.append(replace(first, evict=not first.evict))
        if (
            op == "rms"
            and first.kind in ("resident", "coop")
            and not (first.programs_per_sm or first.sub)
        ):
            out.append(replace(first, w_early=not first.w_early))  # the weight's load (S9)
        seen: set[RowPlan] = set()
        return [p for p in out if not (p in seen or seen.add(p))]
