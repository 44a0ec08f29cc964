"""INT4 weight-only linear: ``y = x @ W.T`` with ``W`` held as packed INT4 + group scales.

``W`` is an :class:`warpgauge.quant.Int4Weight` (layout and contract in ``warpgauge/quant.py``):
``packed`` uint8 ``(N, K // 2)`` with group ``g`` of row ``n`` in ``group_size // 2`` contiguous
bytes, and ``scales`` ``(N, K // group_size)``. ``x`` is ``(..., K)`` in the scales' dtype (FP16 or
BF16); ``y`` is ``(..., N)`` in ``x.dtype``. All products accumulate in FP32 and round once.

Paths (chosen by :class:`Int4Plan`; tests can force any of them with ``plan=``)

- **GEMV, FMA** (``block_m == 1``; the plan uses it for M == 1 when ``group_size % 8 == 0``): one
  program owns ``BLOCK_N`` output features of one x row and streams their weight as 32-bit words
  (8 nibbles), ``GROUPS_PER_ITER`` groups per step, issuing the next step's loads before it computes
  the current one. Nibbles are decoded in place with the float exponent trick (see ``_nib``: one
  LOP3 and one FADD per value, no shifts and no int->float conversion, which runs at 1/8 rate on
  Hopper), multiplied with x by FFMA, summed per group, and each group's sum is multiplied by its
  scale. ~4.1 SASS instructions per weight value on sm_90. The batch-1 default runs the same step
  in the pipelined loop of ``int4_gemv.py`` (``Int4Plan.pipeline``; 32 rows x 4 groups per step).
- **GEMV, tensor cores** (``block_m == 16``; the plan uses it for 2 <= M <= 16) and **tiled**
  (``block_m`` 32..128 for M > 16): one program owns a ``BLOCK_N x BLOCK_M`` tile of ``y^T``. Per
  group it unpacks the ``BLOCK_N x group`` weight tile to exact 16-bit integers (exponent trick in
  FP16/BF16), runs ``tl.dot(W_q, x^T)`` with FP32 accumulation (the weight is the dot's M side, so
  it can stay in registers for wgmma), and adds ``partial * scale``. The dequantized weight exists
  only as a register tile; x is read in its own dtype (no FP32 copy); the weight is read once per
  M-tile (exactly once for M <= 16). The GEMV plans decode with PTX (``_DECODE_ASM``), make the
  weight the dot's B side and run each group as two dots, the low nibbles (even k) against
  x[even k] and the high nibbles against x[odd k] (``SPLIT_HALVES``), so the decoded values feed
  the dots without an interleave. ``_decode_flags`` maps the module flags to each path.
- **Split-K** (``split_k > 1``, any of the above): ``split_k`` programs per output tile each take a
  contiguous range of groups and write FP32 partials ``[split_k, M, N]``; a second kernel adds them
  in the fixed order ``0, 1, ..., split_k - 1`` and rounds once. No atomics: bit-identical run to
  run. The partials are the only scratch memory. (``fused`` plans add them in the same order in
  the kernel's last split per tile, with an int32 counter per tile: the same bits, one launch
  less, but slower on the H200 where measured: ``results/int4s10-h200/``.)

``int4_linear_grad_input(grad_out, W)`` computes ``grad_out @ W`` (frozen-weight adapter training)
with the same on-the-fly dequantization. There the scale varies along the reduction (over N), so it
cannot be applied after the dot; instead ``w = q * s`` (exact in FP32) is split into two 16-bit
parts ``hi = dtype(w)``, ``lo = dtype(w - hi)`` whose sum is exactly ``w`` (``q * s`` has at most
14 significant bits), and both go through ``tl.dot``: the product is that of the exact weight.

N and K (the weight's shape) keep Triton's divisibility specialization; M (the token count) is
never specialized, so a new batch size never compiles a new kernel.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .._checks import HALF_DTYPES, check_same_device, check_tensor
from .._device import device_info, interpreter_enabled
from ..quant import Int4Weight
from ._launch import cdiv, empty, launch, next_pow2
from .int4_checks import _as_rows, _check_act_dtype, _check_weight
from .int4_gemv import launch_pipelined
from .int4_kernels import (  # noqa: F401  (the decode strings: tests and experiments read them)
    _DECODE_BF16,
    _DECODE_F16,
    _MAGIC_F32,
    _int4_grad_input_kernel,
    _int4_mm_kernel,
    _splitk_reduce_kernel,
)
from .int4_tile import check_tile_fields, launch_tile, tile_rule
from .work import Work, esize

__all__ = [
    "Int4Plan",
    "int4_linear",
    "int4_linear_packed",
    "int4_linear_grad_input",
    "int4_linear_grad_input_packed",
    "work",
]

# --------------------------------------------------------------------------------------------
# Plan


# Thresholds. The instruction counts come from compiling for sm_90a and reading the SASS of the
# main loop (no GPU needed); the bandwidth numbers are H200 datasheet-level estimates. None is a
# timing yet: the lead's sweep on the H200 should confirm or move them.
GEMV_MAX_M = 16  # one 16-row tensor-core tile of x holds the whole batch: the weight is read once
# M == 1 runs on CUDA cores: ~4.5 SASS instructions per weight value (LOP3 + FADD + FFMA + x
# handling) with 64 rows x 2 warps per program, vs 8+ for the byte-wise decode it replaced.
FMA_MAX_M = 1
FMA_BLOCK_N = 64  # 64 rows / 64 threads: each thread decodes 4 rows per x value it converts
FMA_NUM_WARPS = 2  # 123 registers -> up to 8 programs per SM
FMA_K_PER_ITER = 128  # K values per FMA step: 64 rows x 64 B = 4 KB of weight per program per step
# The tiled path (M > 16) splits K to 0.75 programs per SM, or to 2 per SM when the output has
# fewer than SM / 4 tiles. On the H200 (results/int4-gemv-h200/r2.json, us by split):
# 64 tiles: 256x4096x4096 s1 46.9 / s2 29.4 / s4 33.5, 256x4096x14336 157.0 / 83.8 / 99.8,
# 128x8192x8192 79.5 / 48.0 / 66.2 (s4), 64x8192x8192 65.1 / 38.4 / 49.0 (s8);
# 112-224 tiles: no split won (256x14336x4096 90.2 against 103.1 at s2, 64x14336x4096 34.6 / 40.4);
# 32 tiles: 64x4096x14336 s1 118.9 / s2 64.3 / s8 40.9, 64x4096x4096 s2 21.1 / s4 13.8.
PROGRAMS_PER_SM = 0.75
FEW_TILES_PER_SM = 0.25
FEW_TILES_PROGRAMS_PER_SM = 2
# 64 < M <= 256: 128 x 64 tiles, 4 warps, split to 1.5 programs per SM (the work per SM of 0.75
# 128 x 128 tiles). H200, results/int4s-h200/int4s.json, cold us (128 x 128, 8 warps): 256x14336x
# 4096 85.3 (92.8), 256x4096x14336 80.3 (85.3), 256x4096x4096 30.2 (31.1), 128x4096x4096 20.9
# (21.3); 256 x 64, 64 x 128, the weight as B 1.1-2.4x slower. Larger M was not measured.
WIDE_M_BLOCK_N = 64
WIDE_M_NUM_WARPS = 4
WIDE_M_PROGRAMS_PER_SM = 1.5
WIDE_M_MAX_M = 256
MIN_GROUPS_PER_SPLIT = 8  # each split streams >= 8 groups: its prologue and partial stay small
MAX_SPLIT_K = 16
# The GEMV paths want more programs: on the H200 (results/gemm-tuning-h200/round1.json, FMA, 64
# rows x 2 warps) time fell with the program count up to ~900 (1x28672x8192: 448 programs 67.8
# us, 896 58.1, 1792 59.4; 1x14336x4096: 224 / 448 / 896 -> 28.9 / 20.4 / 18.8; 1x8192x8192:
# 128 / 256 / 512 -> 50.3 / 30.6 / 21.1; 1x4096x4096, 4 splits of 8 groups 8.9 us, 2 of 16 13.3),
# so they split up to 6 programs per SM.
GEMV_PROGRAMS_PER_SM = 6
# M == 1 now runs the pipelined FMA GEMV (int4_gemv.py): 32 rows x 4 groups (256 B of each row)
# per step, 2 warps, 3 stages, split K to the smallest power of two that gives >= 3 programs per
# SM (each split >= 2 steps). On the H200 (results/int4-pipe-h200/pipe.json, us, the old default
# in brackets): 1x28672x8192 52.1 (58.0), 1x128256x4096 96.7 (116.5), 1x4096x4096 8.4 (9.8),
# 1x14336x4096 17.5 (19.0), 1x4096x14336 17.5 (19.8). The same loop with 64 rows x 1 group per
# step ran as the old kernel (60.6 / 123.2 us): the longer per-row runs are what made it faster.
FMA_PIPELINE = 3  # 0: the old register double-buffered loop
# The pipelined FMA GEMV's decode: False = exact (magic 2**23, one FADD per value), True = the
# offset folded out of the loop (``int4_gemv._fma_step_fold``, ~20% fewer SASS instructions per
# weight value: experiments/int4one_sass.py).
FMA_FOLD = False
# The pipelined FMA GEMV with x read per nibble position straight from global memory
# (``int4_gemv._fma_step_xr``: no shared-memory round trip or barrier for x in the loop; needs
# fewer x elements per step than threads, e.g. 2 groups with 2 warps). Off: under test.
FMA_XR = False
FMA_PIPE_BLOCK_N = 32
FMA_PIPE_K_PER_ITER = 512  # 4 groups of 128: 256 B of each row per step
FMA_PIPE_PROGRAMS_PER_SM = 3
# The pipelined FMA GEMV's split-K: reduced inside the kernel (the last split of each output
# block adds the partials in the fixed order, as int4_tile's fused plans; one launch) and the
# fewest steps per split the rule allows.
FMA_PIPE_FUSED = False
FMA_PIPE_MIN_STEPS = 2
# The tensor-core GEMV (2 <= M <= 16): 256 rows x 4 warps per program, split K to the smallest
# power of two that gives >= 1.5 programs per SM, down to 2 groups per split. On the H200
# (results/int4-gemv-h200/r1.json, batch 4, us at 112-128 / 224-256 / 448-512 programs):
# 28672x8192 78.6 / 61.9 / 64.6, 8192x8192 23.9 / 21.9 / 25.0, 14336x4096 23.2 / 20.4 / 23.2,
# 4096x14336 23.2 / 20.8 (split 16, 7 groups each); batch 1 and 16 the same. More programs than
# ~2 per SM made every shape slower.
GEMV_DOT_BLOCK_N = 256
GEMV_DOT_PROGRAMS_PER_SM = 1.5
GEMV_DOT_MIN_GROUPS_PER_SPLIT = 2
GEMV_DOT_MAX_SPLIT_K = 16
# Fewer than 4 groups per split: 128-row tiles, split again. results/int4s-h200/int4s.json, cold
# us at 4096x4096, 128 rows split 8 (256 rows split 16 x 2 groups): batch 2 13.2 (14.0), 4 13.4
# (14.3), 8 13.2 (14.7); with >= 7 groups per split (4x14336x4096, 4x4096x14336) 256 rows held.
GEMV_DOT_FEW_GROUPS = 4
GEMV_DOT_FEW_GROUPS_BLOCK_N = 128
# The tensor-core GEMV (2 <= M <= 16) with the PTX nibble decode and the weight as the dot's B
# operand: on the H200 (results/gemm-tuning-h200/explore2.json, 128 rows, split 4) 56.4 us at
# 4x28672x8192 (tinygemm 91.0, the Triton-op decode with the weight as A 79.0) and 59.1 us at
# 16x28672x8192 (tinygemm 268, dense BF16 128). Both flags off under the interpreter (no PTX).
USE_ASM_DECODE = True
# M == 1 on the tensor-core paths: load x once per group and broadcast it (not 16 wrapped rows).
ONE_ROW_BROADCAST = False
# Tensor-core paths: the decoded weight as the dot's B operand (x the 16-row A side). Only the
# GEMV plans (block_m 16) use it and the PTX decode: the tiled plans (M > 16) were no faster with
# either (64x28672x8192: 131.4 us plain, 136.4 PTX decode; 256x28672x8192: 338.8 / 345.2).
WEIGHT_AS_B = True
# The tiled path (M > 16) with the PTX decode.
TILED_ASM_DECODE = False
# The tiled path (M > 16) with the weight as B (decoded into shared memory for wgmma, x the A side).
TILED_WEIGHT_AS_B = False
# Tensor-core paths: the even-k and odd-k halves of each group as two dots (no interleave). It
# cuts the GEMV loop from 3.55 to 2.79 SASS instructions per weight value (128 rows) and to 2.47
# (256 rows; experiments/int4_sass.py), but times moved within noise (r1.json): the loop is not
# issue-bound. Kept on the GEMV path, where it is never slower.
SPLIT_HALVES = True
# Tensor-core paths: decode to q + offset and correct each group by offset * sum(x).
FOLD_OFFSET = False
# The tiled path (M > 16) with the weight rounded once to x's dtype as q * scale before the dot
# (the numerics of dense F.linear on the dequantized weight): one accumulator across groups
# instead of a per-group product and rescale. Off: the INT4 contract multiplies the exact weight.
TILED_ROUND_WEIGHT = False


def _split(tiles, sm_count, per_sm, n_groups, min_groups, max_split) -> int:
    """Double split K while below per_sm * sm_count programs, >= min_groups per split."""
    split = 1
    while tiles * split < per_sm * sm_count and n_groups >= 2 * split * min_groups:
        if split >= max_split:
            break
        split *= 2
    return split


def _pow2_floor(n: int) -> int:
    return 1 << (max(int(n), 1).bit_length() - 1)


@dataclass(frozen=True)
class Int4Plan:
    """Launch parameters of :func:`int4_linear`.

    block_m: 1 = FMA GEMV, one x row per program; >= 16 (power of two) = tensor-core tiles of
        ``block_m`` x rows (16 is the GEMV path, more is the tiled large-batch path).
    block_n: output features per program (power of two >= 16).
    groups_per_iter: K step in groups (power of two) of the FMA path and of the pipelined
        tensor-core GEMV; the other tensor-core loops step one group at a time (ignored there).
    split_k: programs along K per output tile; > 1 adds FP32 partials and a fixed-order reduction.
    pipeline: 0 = the loops of ``int4_kernels`` (the FMA GEMV register double-buffered, the
        tensor-core paths one group per step). S >= 2 (GEMV plans only, block_m 1 or 16): the
        loops of ``int4_gemv``, pipelined by Triton in S stages (the loads of the next S - 1 steps
        in flight as asynchronous copies into shared memory while the current one computes);
        with block_m 16 that loop steps ``groups_per_iter`` groups at a time.
    kernel: "mm" (the kernels of ``int4_kernels`` / ``int4_gemv``) or "tile" (``int4_tile``:
        pipelined group loop, the GEMV form for block_m 16, x permuted once for larger tiles).
    mode, fused, tma: tile kernel only: 0 exact q / 1 exact hi + lo / 2 the weight rounded to x's
        dtype (not the INT4 contract); split-K reduced inside the kernel (also the pipelined FMA
        GEMV, block_m 1: measured slower, ``FMA_PIPE_FUSED``); TMA loads (block_m > 16).
    """

    block_m: int
    block_n: int
    groups_per_iter: int = 1
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3
    pipeline: int = 0
    kernel: str = "mm"
    mode: int = 0
    fused: bool = False
    tma: bool = False

    def __post_init__(self):
        def pow2(v):
            return isinstance(v, int) and v >= 1 and v & (v - 1) == 0

        if not (self.block_m == 1 or (pow2(self.block_m) and self.block_m >= 16)):
            raise ValueError(f"block_m must be 1 or a power of two >= 16, got {self.block_m}")
        if not (pow2(self.block_n) and self.block_n >= 16):
            raise ValueError(f"block_n must be a power of two >= 16, got {self.block_n}")
        if not pow2(self.groups_per_iter):
            raise ValueError(f"groups_per_iter must be a power of two, got {self.groups_per_iter}")
        if not (isinstance(self.split_k, int) and 1 <= self.split_k <= 64):
            raise ValueError(f"split_k must be an int in [1, 64], got {self.split_k}")
        if not pow2(self.num_warps):
            raise ValueError(f"num_warps must be a power of two, got {self.num_warps}")
        if not (isinstance(self.pipeline, int) and (self.pipeline == 0 or 2 <= self.pipeline <= 8)):
            raise ValueError(
                f"pipeline must be 0 (off) or a stage count in [2, 8], got {self.pipeline}"
            )
        if self.pipeline and self.block_m not in (1, 16):
            raise ValueError(
                f"pipeline={self.pipeline} is a GEMV loop (block_m 1 or 16), got block_m="
                f"{self.block_m}; the tiled path pipelines by num_stages"
            )
        check_tile_fields(self)

    @property
    def path(self) -> str:
        if self.block_m == 1:
            return "gemv_fma"
        return "gemv_dot" if self.block_m <= GEMV_MAX_M else "tiled"

    def tiles(self, M: int, N: int) -> int:
        return cdiv(M, self.block_m) * cdiv(N, self.block_n)

    @classmethod
    def for_shape(cls, M: int, N: int, K: int, sm_count: int, group_size: int = 128) -> Int4Plan:
        """The rule:

        1. M == 1 (and group_size % 8 == 0): the pipelined FMA GEMV (``FMA_PIPELINE`` = 3
           stages), ``block_n = 32`` with 2 warps, ``FMA_PIPE_K_PER_ITER`` (512) values of K
           per step (with ``FMA_PIPELINE = 0``: the old loop, 64 rows, 128 values per step).
           2 <= M <= 16: tensor-core GEMV, ``block_m = 16``, ``block_n = 256`` (4 warps), or
           ``GEMV_DOT_FEW_GROUPS_BLOCK_N`` (128) when step 2 leaves fewer than
           ``GEMV_DOT_FEW_GROUPS`` groups per split (then step 2 again).
           M > 16: tiled, ``block_m = min(128, next_pow2(M))``, ``block_n = 128``; for
           64 < M <= ``WIDE_M_MAX_M`` (256) ``WIDE_M_BLOCK_N`` (64) with ``WIDE_M_NUM_WARPS`` (4).
           ``block_n`` never exceeds ``next_pow2(N)`` (>= 16).
        2. Split K (doubling, at most ``MAX_SPLIT_K``) while the output tiles alone give fewer than
           ``PROGRAMS_PER_SM * sm_count`` programs (tiled; ``WIDE_M_PROGRAMS_PER_SM`` with the
           128 x 64 tiles; ``FEW_TILES_PROGRAMS_PER_SM`` when there are fewer than
           ``FEW_TILES_PER_SM * sm_count`` tiles) and every split keeps at least
           ``MIN_GROUPS_PER_SPLIT`` groups (pipelined FMA GEMV: ``FMA_PIPE_PROGRAMS_PER_SM``,
           at least 2 steps per split; the old FMA GEMV: ``GEMV_PROGRAMS_PER_SM``; the tensor-core
           GEMV: ``GEMV_DOT_PROGRAMS_PER_SM``, ``GEMV_DOT_MIN_GROUPS_PER_SPLIT``, at most
           ``GEMV_DOT_MAX_SPLIT_K``).
        3. M >= 2: ``int4_tile.tile_rule`` moves the plan to the tile kernel where the H200 sweep
           measured that faster (``results/int4big-h200``; the rule and its numbers are there).
        """
        # A symbolic M (torch.compile, dynamic shapes) is made concrete: the plan depends on it,
        # so the compiled graph guards on it (a new M recompiles rather than picking a wrong plan).
        M, N, K = int(M), int(N), int(K)
        n_groups = max(K // group_size, 1)
        n_cap = max(16, next_pow2(N))
        if M <= FMA_MAX_M and group_size % 8 == 0:
            k_step, bn = (FMA_PIPE_K_PER_ITER, FMA_PIPE_BLOCK_N) if FMA_PIPELINE else (
                FMA_K_PER_ITER, FMA_BLOCK_N
            )  # fmt: skip
            gpi = min(_pow2_floor(max(1, k_step // group_size)), next_pow2(n_groups))
            plan = dict(
                block_m=1,
                block_n=min(bn, n_cap),
                groups_per_iter=gpi,
                num_warps=FMA_NUM_WARPS,
                num_stages=1,
                pipeline=FMA_PIPELINE,
            )
        elif M <= GEMV_MAX_M:
            plan = dict(block_m=16, block_n=min(GEMV_DOT_BLOCK_N, n_cap), num_stages=3)
        else:
            bm = min(128, max(16, next_pow2(M)))
            # 8 warps from 64 rows up: 64x128 with 4 warps spills (255 registers) on sm_90.
            bn, warps = (128, 8 if bm >= 64 else 4)
            if bm == 128 and M <= WIDE_M_MAX_M:
                bn, warps = WIDE_M_BLOCK_N, WIDE_M_NUM_WARPS
            plan = dict(block_m=bm, block_n=min(bn, n_cap), num_warps=warps, num_stages=3)
        tiles = cdiv(max(M, 1), plan["block_m"]) * cdiv(N, plan["block_n"])
        if plan["block_m"] == 16:
            per_sm, min_groups, max_split = (
                GEMV_DOT_PROGRAMS_PER_SM, GEMV_DOT_MIN_GROUPS_PER_SPLIT, GEMV_DOT_MAX_SPLIT_K
            )  # fmt: skip
        elif plan["block_m"] == 1 and FMA_PIPELINE:  # >= FMA_PIPE_MIN_STEPS steps per split
            per_sm, min_groups = FMA_PIPE_PROGRAMS_PER_SM, FMA_PIPE_MIN_STEPS * gpi
            max_split = MAX_SPLIT_K
        elif plan["block_m"] == 1:
            per_sm, min_groups, max_split = GEMV_PROGRAMS_PER_SM, MIN_GROUPS_PER_SPLIT, MAX_SPLIT_K
        else:
            few = tiles < FEW_TILES_PER_SM * sm_count
            wide = plan["block_m"] == 128 and M <= WIDE_M_MAX_M  # the 128 x 64 tiles
            per_sm = WIDE_M_PROGRAMS_PER_SM if wide else PROGRAMS_PER_SM
            per_sm = FEW_TILES_PROGRAMS_PER_SM if few else per_sm
            min_groups, max_split = MIN_GROUPS_PER_SPLIT, MAX_SPLIT_K
        split = _split(tiles, sm_count, per_sm, n_groups, min_groups, max_split)
        if plan["block_m"] == 16 and split > 1 and n_groups < GEMV_DOT_FEW_GROUPS * split:
            bn = min(GEMV_DOT_FEW_GROUPS_BLOCK_N, plan["block_n"])
            tiles = cdiv(N, bn) * cdiv(max(M, 1), 16)
            plan["block_n"] = bn
            split = _split(tiles, sm_count, per_sm, n_groups, min_groups, max_split)
        if plan["block_m"] == 1 and plan["pipeline"] and split > 1 and FMA_PIPE_FUSED:
            plan["fused"] = True
        return cls(**tile_rule(dict(plan, split_k=split), M, N, K, sm_count, group_size))


# --------------------------------------------------------------------------------------------
# Launchers

REDUCE_BLOCK = 1024
# Reduction step (rows of W) of the grad-input kernel: 128 beat 64 at 13 of 14 shapes (level at
# the 14th), 1-256 rows (experiments/int4grad20_sweep.py, results/int4grad20-h200: f4n128 vs f4)
GRAD_BLOCK_N = 128
GRAD_PROGRAMS_PER_SM = 4  # grad-input programs per SM below which N is split (grad_input_split)
GRAD_MAX_SPLIT = 32
# BF16 grad-input: the group scale folded into grad_out (exact hi/lo halves of g * s) instead
# of into the decoded weight (FP16 keeps the weight form: g * s could leave FP16's range)
GRAD_FOLD_SCALES = True
# The folded path's nibble decode: 0 int -> float conversions; 1 the BF16 bit trick in Triton ops
# (the default); 2 the PTX decode (int4_kernels._dequant_halves, as the forward's tensor-core
# paths). Offline sm_90 SASS (experiments/compile_sm90.py int4grad dec=N): 1 and 2 drop the
# loop's 128 I2F (quarter rate) per thread and step. Timed (results/int4grad20-h200/sweep3-a0a9969.json, the kernel
# alone, warm): 1 is the fastest or level at 14 of 14 shapes, 1-256 rows: 1x28672x8192 163 us
# against 189 for 0 and 167 for 2, 1x128256x4096 348 vs 433 / 353, 16x14336x4096 38.4 vs 47.6
# / 39.9, 1x4096x4096 17.6 vs 20.0 / 17.7; 2 loses at 64-256 rows (64x14336x4096 206 vs 177).
GRAD_DECODE = 1
# Batch <= GRAD_GEMV_MAX_M: the streaming FMA grad-input (kernels/int4_grad.py, prepared in
# session 21, off: not yet timed on the GPU); GPP groups of K per program, BLOCK_N rows per step.
GRAD_GEMV = False
GRAD_GEMV_MAX_M = 2
GRAD_GEMV_GPP = 1
GRAD_GEMV_BLOCK_N = 32
GRAD_GEMV_WARPS = 4


def _alloc(shape, dtype, device) -> torch.Tensor:
    """Output / scratch allocation (NaN-poisoned under WARPGAUGE_POISON_OUTPUTS; a seam tests
    can also patch)."""
    return empty(shape, dtype, device)


def _half_pad(group_size: int) -> int:
    # Lanes per group half, a power of two >= 8 so that a group is >= 16 dot lanes.
    return max(8, next_pow2(group_size // 2))


@functools.lru_cache(maxsize=4096)
def _plan_for(M: int, N: int, K: int, sm_count: int, group_size: int) -> Int4Plan:
    return Int4Plan.for_shape(M, N, K, sm_count, group_size)  # ~12 us per call uncached


def _check_plan(plan, M, N, K, group_size, sm_count) -> Int4Plan:
    if plan is None:
        if all(type(v) is int for v in (M, N, K)):  # SymInts (tracing) are not cached
            return _plan_for(M, N, K, sm_count, group_size)
        return Int4Plan.for_shape(M, N, K, sm_count, group_size)
    if not isinstance(plan, Int4Plan):
        raise TypeError(f"plan must be an Int4Plan (or None), got {type(plan).__name__}")
    return plan


def _decode_flags(plan: Int4Plan, M: int, group_size: int) -> dict:
    """The tensor-core paths' decode options (module flags, per path) as kernel constexprs."""
    if plan.block_m == 1:
        return dict(ASM=False, ONE_ROW=False, W_AS_B=False, HALVES=False, FOLD=False, ROUND=False)
    gemv = plan.block_m <= GEMV_MAX_M
    w_as_b = WEIGHT_AS_B if gemv else TILED_WEIGHT_AS_B
    round_w = TILED_ROUND_WEIGHT and not gemv
    return dict(
        ASM=(USE_ASM_DECODE if gemv else TILED_ASM_DECODE) and not interpreter_enabled(),
        ONE_ROW=ONE_ROW_BROADCAST and M == 1,
        W_AS_B=w_as_b,
        # on the tiled path the halves go with the weight-as-B form only (with the weight as
        # wgmma's register A they were slower: r1.json, 64x28672x8192 175.9 us against 134.2)
        HALVES=SPLIT_HALVES and (gemv or w_as_b) and _half_pad(group_size) >= 16,
        FOLD=FOLD_OFFSET and not round_w,
        ROUND=round_w,
    )


def _launch_mm(plan, grid, x2, w, scales, y, part, M, N, K, group_size, dtype, upcast):
    launch(_int4_mm_kernel, grid,
        x2, w, scales, y, part, M, N, K, _MAGIC_F32,
        x2.stride(0), x2.stride(1), w.stride(0), scales.stride(0), y.stride(0), y.stride(1),
        GROUP=group_size, HALF_PAD=_half_pad(group_size),
        WPAD=next_pow2(max(group_size // 8, 1)), BLOCK_M=plan.block_m,
        BLOCK_N=plan.block_n, GPI=plan.groups_per_iter, SPLIT_K=plan.split_k,
        X_BF16=dtype == torch.bfloat16, UPCAST=upcast, **_decode_flags(plan, M, group_size),
        num_warps=plan.num_warps, num_stages=plan.num_stages,
    )  # fmt: skip


def int4_linear_packed(
    x: torch.Tensor,
    packed: torch.Tensor,
    scales: torch.Tensor,
    group_size: int,
    plan: Int4Plan | None = None,
) -> torch.Tensor:
    """``x @ W.T`` with ``W`` given as its tensors (the form to register with torch.library)."""
    check_tensor("x", x, HALF_DTYPES)
    N, K = _check_weight(packed, scales, group_size)
    check_same_device([("x", x), ("packed", packed)])
    _check_act_dtype("x", x, scales)
    x2 = _as_rows("x", x, K, "the weight's K")
    M = x2.shape[0]
    y = _alloc((M, N), x.dtype, x.device)
    out = y.view(*x.shape[:-1], N)
    if M == 0:
        return out
    plan = _check_plan(plan, M, N, K, group_size, device_info(x.device).sm_count)
    if plan.block_m == 1 and group_size % 8:
        raise ValueError(
            f"the FMA GEMV path (plan.block_m == 1) reads whole 32-bit words per group and needs "
            f"group_size % 8 == 0, got {group_size}; use a plan with block_m >= 16"
        )
    upcast = interpreter_enabled() and x.dtype == torch.bfloat16
    grid = (plan.tiles(M, N), plan.split_k)
    part = y if plan.split_k == 1 else _alloc((plan.split_k, M, N), torch.float32, x.device)
    w = packed
    if plan.block_m == 1:
        try:
            w = packed.view(torch.int32)  # 8 nibbles per load element (K % 8 == 0 here)
        except RuntimeError:
            raise ValueError(
                "packed must start at a 4-byte aligned offset for the FMA GEMV path; pass "
                "packed.clone() or a plan with block_m >= 16"
            ) from None
    reduced = False
    if plan.kernel == "tile":
        if group_size < 32 or group_size & (group_size - 1):
            raise ValueError(
                f"kernel='tile' needs a power-of-two group_size >= 32, got {group_size}; use a "
                "plan with kernel='mm'"
            )
        asm = USE_ASM_DECODE and not interpreter_enabled()
        reduced = launch_tile(plan, grid, x2, packed, scales, y, part, group_size, upcast, asm)
    elif plan.pipeline:
        asm = USE_ASM_DECODE and not interpreter_enabled()
        reduced = launch_pipelined(plan, grid, x2, w, scales, y, part, group_size, upcast, asm,
                                   FOLD_OFFSET, FMA_FOLD, FMA_XR)  # fmt: skip
    else:
        _launch_mm(plan, grid, x2, w, scales, y, part, M, N, K, group_size, x.dtype, upcast)
    if plan.split_k > 1 and not reduced:
        _reduce_partials(part, y, M * N, plan.split_k)
    return out


def _reduce_partials(part, y, total, split) -> None:
    """y = the sum of the ``split`` FP32 partials ``part[s]`` (contiguous, ``total`` each), in
    split order (deterministic), rounded once to y's dtype; y contiguous."""
    launch(_splitk_reduce_kernel, (cdiv(total, REDUCE_BLOCK),),
        part, y, total, SPLIT_K=split, BLOCK=REDUCE_BLOCK, num_warps=4)  # fmt: skip


def int4_linear(
    x: torch.Tensor, qweight: Int4Weight, *, plan: Int4Plan | None = None
) -> torch.Tensor:
    """``y = x @ W.T`` (like ``F.linear(x, W)``) for an INT4 weight ``W`` of shape ``(N, K)``.

    ``x``: ``(..., K)``, FP16 or BF16, the same dtype as ``qweight.scales``; any strides.
    Returns ``(..., N)`` in ``x.dtype``; FP32 accumulation, one rounding. ``plan`` overrides
    :meth:`Int4Plan.for_shape` (tests use it to force a path).
    """
    if not isinstance(qweight, Int4Weight):
        raise TypeError(
            f"qweight must be a warpgauge.quant.Int4Weight (from quantize_int4), got "
            f"{type(qweight).__name__}"
        )
    return int4_linear_packed(x, qweight.packed, qweight.scales, qweight.group_size, plan)


def int4_linear_grad_input_packed(
    grad_out: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group_size: int
) -> torch.Tensor:
    """``grad_out @ W`` with ``W`` given as its tensors (the form to register with torch.library)."""
    check_tensor("grad_out", grad_out, HALF_DTYPES)
    N, K = _check_weight(packed, scales, group_size)
    check_same_device([("grad_out", grad_out), ("packed", packed)])
    _check_act_dtype("grad_out", grad_out, scales)
    g2 = _as_rows("grad_out", grad_out, N, "the weight's N")
    M = g2.shape[0]
    dx = _alloc((M, K), grad_out.dtype, grad_out.device)
    out = dx.view(*grad_out.shape[:-1], K)
    if M == 0:
        return out
    if GRAD_GEMV and M <= GRAD_GEMV_MAX_M:
        _grad_input_gemv(g2, packed, scales, dx, group_size)
        return out
    block_m, warps = (16, 4) if M <= GEMV_MAX_M else (64, 8)  # 64 rows x 4 warps: 188 registers
    tiles = cdiv(M, block_m) * (K // group_size)
    split, chunk = grad_input_split(M, N, tiles, device_info(grad_out.device).sm_count)
    part = dx if split == 1 else _alloc((split, M, K), torch.float32, grad_out.device)
    launch(_int4_grad_input_kernel, (tiles, split),
        g2, packed, scales, dx, part, M, N, K, chunk,
        g2.stride(0), g2.stride(1), packed.stride(0), scales.stride(0), dx.stride(0), dx.stride(1),
        GROUP=group_size, HALF_PAD=_half_pad(group_size), BLOCK_M=block_m, BLOCK_N=GRAD_BLOCK_N,
        PARTIAL=split > 1, X_BF16=grad_out.dtype == torch.bfloat16,
        UPCAST=interpreter_enabled() and grad_out.dtype == torch.bfloat16,
        FOLD=GRAD_FOLD_SCALES and grad_out.dtype == torch.bfloat16,
        DECODE=GRAD_DECODE,  # the interpreter's UPCAST decode never reaches the PTX
        num_warps=warps, num_stages=3,
    )  # fmt: skip
    if split > 1:
        _reduce_partials(part, dx, M * K, split)
    return out


def _grad_input_gemv(g2, packed, scales, dx, group_size: int) -> None:
    """dx = g2 @ W through ``int4_grad._int4_grad_gemv_kernel`` (``GRAD_GEMV``): programs of
    GRAD_GEMV_GPP groups x batch rows, N split by ``grad_input_split`` into FP32 partials."""
    from .int4_grad import _int4_grad_gemv_kernel

    M, N = g2.shape
    K = dx.shape[1]
    programs = M * cdiv(K // group_size, GRAD_GEMV_GPP)
    split, chunk = grad_input_split(M, N, programs, device_info(dx.device).sm_count)
    part = dx if split == 1 else _alloc((split, M, K), torch.float32, dx.device)
    words = packed.view(torch.int32)  # 8 nibbles a word: K % 16 == 0 (group_size % 16 == 0)
    launch(_int4_grad_gemv_kernel, (programs, split),
        g2, words, scales, dx, part, M, N, K, chunk,
        g2.stride(0), g2.stride(1), words.stride(0), scales.stride(0), dx.stride(0),
        GROUP=group_size, GPP=GRAD_GEMV_GPP, BLOCK_N=GRAD_GEMV_BLOCK_N, PARTIAL=split > 1,
        num_warps=GRAD_GEMV_WARPS,
    )  # fmt: skip
    if split > 1:
        _reduce_partials(part, dx, M * K, split)


def grad_input_split(M: int, N: int, tiles: int, sm_count: int) -> tuple[int, int]:
    """``(split, chunk)`` of the grad-input kernel: its ``tiles`` programs (row tiles x weight
    groups) reduce over N in ``split`` chunks of ``chunk`` rows (a multiple of GRAD_BLOCK_N) when
    they alone would leave the GPU idle (fewer than GRAD_PROGRAMS_PER_SM per SM): at batch 1 a
    4096-wide K gives 32 programs, each a serial loop over all of N. Bounded so the FP32
    partials' traffic (split * M * K * 8 B, written and read) stays below the packed weight's
    N * K / 2 B, and by GRAD_MAX_SPLIT (the reduce kernel's unrolled loop)."""
    blocks = cdiv(N, GRAD_BLOCK_N)
    want = cdiv(GRAD_PROGRAMS_PER_SM * sm_count, tiles)
    split = max(1, min(want, blocks, GRAD_MAX_SPLIT, N // (16 * M)))
    per = cdiv(blocks, split)
    return cdiv(blocks, per), per * GRAD_BLOCK_N


def int4_linear_grad_input(grad_out: torch.Tensor, qweight: Int4Weight) -> torch.Tensor:
    """``grad_x = grad_out @ W`` for ``y = x @ W.T`` with a frozen INT4 ``W`` (never materialized).

    ``grad_out``: ``(..., N)`` in the scales' dtype. Returns ``(..., K)`` in that dtype.
    """
    if not isinstance(qweight, Int4Weight):
        raise TypeError(
            f"qweight must be a warpgauge.quant.Int4Weight (from quantize_int4), got "
            f"{type(qweight).__name__}"
        )
    return int4_linear_grad_input_packed(
        grad_out, qweight.packed, qweight.scales, qweight.group_size
    )


def work(M: int, N: int, K: int, group_size: int, dtype: torch.dtype) -> Work:
    """Compulsory traffic of ``y[M, N] = x[M, K] @ W.T``: packed weight N*K/2 B, scales
    N*K/group_size elements, x M*K and y M*N elements of ``dtype``; FLOPs 2*M*N*K."""
    e = esize(dtype)
    return Work(
        bytes=N * K // 2 + N * (K // group_size) * e + M * K * e + M * N * e,
        flops=2 * M * N * K,
    )
