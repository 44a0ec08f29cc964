"""Constants of ``RowPlan.for_shape`` beyond the resident range (cooperative, looped and split
plans of wide rows, and the row_sum / add_rms_norm refinements measured with them), each with the
measurement behind it. ``plans.py`` imports every name; read them as ``plans.NAME``.
"""

# Cooperative plans (block, warps) beyond the resident range: results/rows-wide-h200/wide_r1.json
# ("W1", tuning/wide_tune.py: BF16, CUDA-graph replay, inputs rotated past 3x L2, FP64-gated).
# add_rms_norm 4096/4: 3.25-3.63 TB/s at 50257-262144 with 128-667 rows vs 2.35-3.49 for the
# looped rule (8192/8 within 2% at 128256-131072, 4-22% slower at ragged widths 151936/200003);
# few rows 128x50257 2.60 vs 1.85 split, 100x65537 2.61 vs 1.52, 64x131072 2.98 vs 2.80, and
# within 3.5% of split at 16x262144, 32x151936, 2x1048576. (4 warps until G16 below.)
# rows10 round 2 (results/rows10-h200/round2, "R10": cold lane, write+read flush, 30 samples,
# FP64-gated): add_rms_norm 2048/2 (32 elements a thread, as 4096/4) where a row has at most
# COOP_MAX_CHUNKS_PER_SM x SM chunks of 2048, else COOP_RMS. 4096x131072 1080.0 / 1078.0 us (two
# passes) vs 1123.9 / 1127.4 (4096/4), 256x131072 73.0 vs 76.3, 667x50257 80.0 vs 82.3; level
# (within 1.2%) at 220x151936 73.5 vs 72.9, 512x65537 78.4 vs 78.6, 128x262144 74.6 vs 74.3,
# 16x262144 16.0 vs 15.8, 64x131072 23.2 vs 23.3. (8192/4 was 4.6-5.1% ahead at 4096x131072 but
# 2.3-3.7% behind at 50257, 151936, 262144; 8192/8, 16384/8-16 and looped chunks lost more.)
# rows15 round 2 (results/rows15-h200/rows15, "S15": cold lane, write+read flush, 15 samples
# rotated, FP64-gated before and after timing): one warp instead of two (64 elements a thread):
# never slower in 8 cells, geometric mean 0.979x the 2048/2 plan: 667x50257 76.3 us vs 80.1,
# 16x262144 14.7 vs 15.5, 4096x131072 1072.2 vs 1079.4, 64x131072 22.5 vs 23.2, 1024x151936
# 322.8 vs 323.5 (4096/2 was ahead at 16x262144, 14.2, but behind at 667x50257, 81.9).
COOP_RMS_SMALL = (2048, 1)
# The plans grid on the S15 rule (results/20261202-185629-plans, "G16": 338 cells, cold lane,
# FP64-gated; docs/plans.md), rule changes chosen on its hash half 0 and scored on half 1:
# rows too wide for COOP_RMS_SMALL (past COOP_MAX_CHUNKS_PER_SM x SM chunks of 2048) took
# COOP_RMS at 4 warps, 12-16% behind the best plan at 4-128 x 1048576. 2 warps there (G16:
# 4x1048576 15.9 us vs 17.0, 16x 44.8 vs 49.5), and once the rows give RMS_COOP_LOOP_MIN_PER_SM
# programs per SM in 8192-wide chunks the looped cooperative chunks (COOP_SOFTMAX_LOOP's shape:
# the second read from L2): 16x1048576 45.1 us vs 49.5, 96x 228.0 vs 262.3 (half 1: 32x 79.1 vs
# 91.2, 64x 155.9 vs 180.7, 128x 301.6 vs 349.7).
COOP_RMS = (4096, 2)
RMS_COOP_LOOP_MIN_PER_SM = 8
# G16: add_rms_norm's resident rows with bodies of at least 8192 load the weight with x and r
# (``w_early``): half 0, 19 cells at 5120, 8193, 12288, 16384 and 32000: geometric mean 0.97x
# the time (128x8193 7.2 us vs 8.0, 192x8193 8.3 vs 9.1, 128x5120 6.0 vs 6.6, 256x32000 19.0 vs
# 19.9; 64x16384 7.7 vs 7.0 the loss); at body 4096 (2880) it is mixed (0.92-1.08x). Not for
# rows with an edge past a body wider than RMS_W_EARLY_EDGE_MAX_BODY (32769: 128 rows 17.2 us
# vs 14.9, 192 rows 25.7 vs 22.4; the edge's registers on top of the weight's).
RMS_W_EARLY_MIN_BODY = 8192
RMS_W_EARLY_EDGE_MAX_BODY = 16384
# The plans grid at latency-bound sizes (results/20261203-135200-plans_small19, "P19": warm and
# cold lanes, tuning/plans_small19.toml; read with the G16 grid's cold cells): bodies below
# RMS_W_EARLY_MIN_BODY load the weight early too where the rows are at most
# RMS_W_EARLY_ROWS_PER_SM x SM (one or two waves of programs): widths 127-4096 at 1-128 rows,
# time with / without faster in 37 of 40 cells, geometric mean 0.940, 0.76-1.03 (1x1024 warm
# 1.35 us vs 1.46, 8x2048 cold 4.80 vs 5.12, 128x4096 warm 2.12 vs 2.28; 32x4096 cold 5.41 vs
# 5.25 and 32x127, 128x127 cold the losses); G16 2880 at 1-256 rows 0.79-1.06 (96x2880 4.90 vs
# 6.22); at 1024 rows it loses (1024x4096 warm 8.18 vs 6.61, 1024x2880 cold 10.59 vs 9.55).
# Body 16384 in at most RMS_W_LATE_ROWS_PER_SM x SM rows keeps the late load: 1-32 x 16384
# faster in 7 of 8 cells, geometric mean 0.965 (8x16384 warm 3.06 us vs 3.26, 1x16384 warm 2.92
# vs 3.08); G16 cold 1-32 x 16384 0.95-1.00, at 12288 mixed (0.95-1.05).
# P21 (results/20261204-182223-plans_boundary21, tuning/plans_boundary21.toml: 264-1056 rows x
# widths 1024-4096, both lanes) moves the boundary from 2 to 4 rows per SM: warm, the early load is
# faster at 3 and 4 per SM in 11 of 12 cells (1.005-1.055x, geomean 1.035: 528x2048 1.055; 396x4096
# 0.993 the one loss), cold within the noise (0.93-1.05, geometric mean 0.99); at 6 per SM mixed
# (0.97-1.04 warm), at 8 per SM the late load wins (1056x4096 warm 0.82, 1056x3584 cold 0.90).
RMS_W_EARLY_ROWS_PER_SM = 4.0
RMS_W_LATE_ROWS_PER_SM = 0.25
# row_sum 16384/8: 4.01-4.17 TB/s at every width 50257-262144 (looped 4096/8: 3.49-4.32, worst
# at ragged widths); 128x50257 1.72 vs 0.79 split, 100x65537 1.76 vs 1.28. Needs rows * chunks
# >= SMs: 2x1048576 split 1.03 vs 0.89.
COOP_ROW_SUM = (16384, 8)
# softmax 4096/4 (one exp per element; results/rows-wide-h200/wide_r2.json, "W2", two passes)
# for fewer rows than SMs: 128x50257 1.93-1.96 vs 1.44 split in W1 (torch 1.61); W1 (two exps)
# 100x65537 2.00 vs 1.38. Below SM/2 rows: COOP_SOFTMAX_FEW_PER_SM. Many rows of widths past
# COOP_LOOP_MIN_WIDTH take COOP_SOFTMAX_LOOP instead (S5 below; it replaced W1/W2's coop 4096
# from 139264 and looped 16384/32 from 98304).
# S15 (above; experiments/rows15_sweep.py, 50 softmax cells: widths 50257-262144 x 16-4096
# rows and few-row cells of the resident range): the same 4096-wide chunks in 2 warps (64
# elements a thread, smaller programs, more of them per SM) are faster than 4 warps wherever the
# input is at least SOFTMAX_SMALL_L2_SHARE x L2: 4096x65536 277.9 us vs 303.3, 1024x128256
# 151.8 vs 166.8, 1024x100352 116.7 vs 131.8, 256x262144 81.6 vs 90.0, 1024x200064 241.5 vs
# 271.5. Smaller inputs (latency-bound, 16-64 rows) take 2048-wide chunks in 2 warps
# (COOP_SOFTMAX_SMALL): 16x65536 7.3 vs 7.9, 64x131072 15.0 vs 15.5, 16x262144 10.6 vs 10.8;
# 64x128256 15.3 vs 15.2 and 16x128256 9.3 vs 8.9 are the losses.
COOP_SOFTMAX = (4096, 2)
COOP_SOFTMAX_SMALL = (2048, 2)
SOFTMAX_SMALL_L2_SHARE = 0.5
# G16 (above; half 0 guiding, half 1 held out): 2048-wide chunks in one warp (64 elements a
# thread, ex2 exps) beat both where a row has at most SOFTMAX_ONE_WARP_MAX_CHUNKS of them and
# the rows give at least SOFTMAX_ONE_WARP_MIN_PER_SM programs per SM: half 0 128x32769 10.4 us
# vs 11.1 (2048/2), 96x65537 12.3 vs 13.3, 256x65536 22.4 vs 24.2 (4096/2), 512x65537 40.1 vs
# 42.8, 1024x65537 74.8 vs 80.2, 64x128256 15.2 vs 15.8; below that many programs 2 warps stay
# ahead (64x32769 8.5 vs 9.0, 64x50257 9.9 vs 10.1). Past 64 chunks (151936, 262144) it loses.
COOP_SOFTMAX_ONE_WARP = (2048, 1)
SOFTMAX_ONE_WARP_MAX_CHUNKS = 64
SOFTMAX_ONE_WARP_MIN_PER_SM = 14
# rows5 sweep (results/rows5-h200/rows5.json, "S5"; experiments/rows5_sweep.py: BF16,
# CUDA-graph replay, inputs rotated past 3x L2, FP64-gated; copy ceiling 4.20 TB/s there).
# Few rows of widths past SPLIT_MIN_WIDTH whose body still fits RESIDENT_MAX: row_sum (rows < SM)
# one resident program per row at 16 warps: S5 1-64 x 16385 2.9-3.5 us vs 4.4-6.0 split
# (1.47-1.79x), 99x16385 3.4 vs 4.1 at 8 warps, 1-64 x 32769 3.3-4.0 us vs 5.1-5.4 split
# (1.47-1.59x); softmax and add_rms_norm (rows < SM/2): cooperative 2048/4 chunks
# (softmax 64x32769 6.6 us vs 9.0 split, 16x16385 4.9 vs 5.2; add_rms_norm 1x16385 4.5 vs 5.1
# coop 4096, 4x32769 5.1 vs 5.4; within 2% where 4096 is ahead).
ROW_SUM_FEW_WARPS = 16
COOP_FEW_NARROW = (2048, 4)
# Many softmax rows (>= SM) wider than this: the looped cooperative plan (16384-wide chunks in
# 4096 slices, evict hints, no pipelining: the pipelined variants were 8-25% slower). S5 at
# DRAM-bound row counts: 4096x131072 651 us (3.30 TB/s) vs 713 looped, 1024x151936 224 vs 249
# (coop 4096), 1023x65537 96.0 vs 104.1, 512x131072 88.6 vs 92.9, 256x262144 89.8 vs 99.3,
# 441x151936 100.9 vs 113.9; 264 rows (inputs that fit L2): 0.97-1.12x the old rule (65537 and
# 128256 lose 6% / 3% to the looped plan, whose second read then hits L2). At 50257 it ties
# (1.02x), at 32769 the resident plan is 1.29x faster.
COOP_LOOP_MIN_WIDTH = 65536
# Few softmax rows beyond the resident range: cooperative 4096/4 once the rows' chunks give this
# many programs per SM, else split (two kernels). S5: 16x131072 6.6 us vs 7.1 split,
# 16x151936 7.5 vs 8.0, 16x262144 8.9 vs 10.4, 64x50257 8.1 vs 11.1; 1-4 rows of 131072-262144
# split 1.00-1.08x coop.
COOP_SOFTMAX_FEW_PER_SM = 2
# S15: the looped plan in 2 warps, 8192-wide chunks in 2048 slices, where the rule loops (past
# SOFTMAX_LOOP_L2X x L2): 4096x131072 593.4 us vs 634.5 (16384/8, sub 4096), 4096x151936 713.6
# vs 820.3, 4096x128256 605.8 vs 692.2, 4096x262144 1196.4 vs 1280.1, 1024x256000 299.7 vs
# 341.2 (the register 4096/2 chunks: 582.3, 770.7, 590.3, 1224.7, 313.1).
COOP_SOFTMAX_LOOP = dict(block=8192, num_warps=2, sub=2048, evict=True)
# The plans grid (results/20261201-153920-plans, 338 cells, docs/plans.md, "G8"): whether a
# softmax row set beyond the resident range fits the device's L2 (input bytes <= this share of
# the L2 size, read from the device) decides between the register cooperative plan and the
# looped one. Inputs that fit L2, rows >= SM: COOP_SOFTMAX (G8 192x50257 21.4 us vs 25.5
# looped, 192x65536 22.7 vs 28.2, 192x65537 24.6 vs 28.8 for COOP_SOFTMAX_LOOP, 256x65536
# 28.7 vs 30.1; level at 256-512x50257). Inputs larger than L2, any row count, widths past
# COOP_LOOP_MIN_WIDTH: COOP_SOFTMAX_LOOP (G8 32-128 x 1048576 1.07-1.19x faster than coop
# 4096, 128x262144 1.04x). Without a known L2 size the rule is S5's (rows >= SM). (Softmax:
# superseded by S9 below, whose ex2 kernels changed the balance.)
# rows9 sweep (results/rows9-h200/rows9.json, "S9"; experiments/rows9_sweep.py: BF16, CUDA-graph
# replay, inputs rotated past 3x L2, FP64-gated plus special rows; copy ceiling 4.17 TB/s there;
# 63 cells, widths 32000-262144 incl. 50257, 65537, 100003, 152064, 256000, rows 1 to 8192).
# The cooperative softmax plans with ex2 exps and a relaxed publish (fast_exp): coop 4096/4
# fast is best or within 2% in 47 of 63 cells (mean regret 1.4%); the rule below changes the
# plan in 54 cells, 0.96-1.25x the S5/G8 rule's plan there (two below 1: 16x131072 7.0 us vs
# 6.8, 1x32000 4.8 vs 4.7), for example 1335x50257 90.6 us vs 113.5 (looped), 264x100003 40.7 vs 48.9, 441x151936 92.0 vs 101.8
# (looped coop), 64x131072 13.9 vs 15.7 (coop 4096), 16x262144 8.4 vs 9.0, 64x128256 14.0 vs
# 15.5. The looped cooperative plan (fast) stays where the input is past SOFTMAX_LOOP_L2X x L2
# (4096x131072, 17x L2: 638 us vs 666 coop 4096 fast, 656 for the old looped coop; 1024x151936 at
# 5x L2: coop 4096 fast 203 vs 213) or rows wider than SOFTMAX_LOOP_WIDE past L2 (G8's 32-128 x
# 1048576, not re-measured with fast exps). Few rows (< 2 programs per SM) of at least
# SOFTMAX_SPLIT_MIN_CHUNKS chunks split (1x131072 5.3 vs 5.4, 1x151936 4.8 vs 5.0, 1x256000
# 5.0 vs 5.5); shorter rows stay cooperative (1x100003 4.7 vs 5.3 split, 1x65537 4.8 vs 5.4,
# 1x50257 4.6 vs 5.1, 1x128256 4.8 vs 4.8).
SOFTMAX_LOOP_L2X = 8
# G16: rows wider than SOFTMAX_LOOP_WIDE take the looped chunks at any row count the split plan
# does not take, inside L2 too (half 0: 16x1048576 27.1 us vs 32.9 for coop 4096/2, 4x1048576
# 12.2 vs 12.6); until G16 only past L2.
SOFTMAX_LOOP_WIDE = 262144
SOFTMAX_SPLIT_MIN_CHUNKS = 32
# G8 add_rms_norm: with 0.6-1 rows per SM (96 and 128 rows on 132 SMs) whose rows in flight fit
# RMS_LOOPED_L2_SHARE of L2, one looped program per row (16384/32, 1 per SM, evict hints: the
# second read hits L2) beats the cooperative chunks: 96x65536 18.3 us vs 20.7, 128x65536 21.7
# vs 25.0, 128x50257 21.7 vs 23.7, 128x65537 25.9 vs 28.2, 128x128256 39.8 vs 43.0; level at
# 96x151936; from 64 rows and at 96-128 x 262144 (rows of 512 KB: 50-67 MB in flight) the
# cooperative plan wins (coop 4096 0-11% ahead).
RMS_LOOPED_ROWS_PER_SM = 0.6
RMS_LOOPED_L2_SHARE = 0.75
# G8 row_sum at 32000 (body 32768): 32 warps beat 16 at every row count (1x32000 4.9 us vs 5.3,
# 16x 5.2 vs 5.8, 512x 15.4 vs 15.9, 4096x 70.0 vs 70.7).
ROW_SUM_32K_WARPS = 32
# G8 softmax, persistent resident body 32768 (SOFTMAX_PREFETCH_MIN_WIDTH): one program per SM
# beats two at 192-1024 rows (256x32000 14.1 us vs 16.2, 512x32769 25.6 vs 29.2, 1024x32769
# 43.0 vs 45.2) and ties at 4096x32000 (138.5 vs 138.6).
SOFTMAX_PREFETCH_PER_SM = 1
# Unaligned widths (aligned-body path) want fewer warps at the 8192 and 16384 bodies. W2:
# softmax 8193x8191 4.00 TB/s at 4 warps vs 3.87-3.90 at 8 (R2: aligned 8192-wide bodies keep 8:
# 5120/7168/8192 at 3.94-3.99 vs 3.88-3.93 at 4); RMSNorm 4096x8191 3.85-3.86 at 8 warps vs
# 3.68-3.69 at 16, 2047x16385 3.67-3.69 vs 3.41 (R2: aligned widths keep 16, 8 is 0.05 slower).
UNALIGNED_WARPS = {"softmax": 4, "rms": 8}
# A cooperative row needs all its programs resident at once (each waits for the others'
# statistics; one left unscheduled sends the waiting ones, after a bounded spin, to recompute
# the missing chunks themselves from DRAM). So the rule takes a coop plan only while a row has at
# most this many programs per SM: 1048576-wide rows (256 chunks of 4096) on 132 SMs qualify;
# 65 rows of 2^25 (8192 chunks each, found by the GPU indexing test, which then ran for minutes)
# go to split or looped plans.
COOP_MAX_CHUNKS_PER_SM = 2
# rowsum9 sweep (results/rowsum9-h200/rowsum9.json, "S9"; experiments/rowsum9_sweep.py: BF16,
# CUDA-graph replay, inputs rotated past 3x L2, FP64-gated). row_sum rows whose body is 1024
# (widths 520-1031), many rows: tiles of two rows (4 warps) instead of one row per program at
# 2 warps: S9 74898x896 33.4 us vs 49.4 (torch 44.6), 16384x896 10.1 vs 13.6; at 2048 rows
# (15 per SM) level (4.6 vs 4.3 us, within noise). Narrower bodies were not measured.
ROW_SUM_TILE_BODY = 1024
ROW_SUM_TILE_MIN_ROWS_PER_SM = 32
# Looped cooperative softmax variants the plan grid forces (fields over COOP_SOFTMAX_LOOP; S9:
# sub=8192 and fma_exp=1 lost in every cell, mean regret 30-34%, so they are not forced).
SOFTMAX_FAST_LOOP_CANDIDATES = (dict(fast_exp=True),)
# smbwd14 sweep (results/smbwd14-h200/, experiments/smbwd14_sweep.py, "B14": the softmax
# backward alone, BF16, cold lane with the write+read flush, one CUDA-graph replay per sample,
# 15 samples rotated, FP64-gated before and after timing; two rounds). Beyond the resident range
# the backward took the looped plan (one program per row: with hundreds of 500 KB rows of y and
# dy in flight its second pass misses L2) or split (few rows: two launches, y and dy read
# twice). Cooperative plans instead (``softmax_backward._softmax_bwd_coop``): the looped
# cooperative 8192-wide chunks in 2048 slices, 4 warps, evict hints, best or within 3% in 21 of
# 28 round-2 cells (geometric-mean regret 2.9%; the old rule 35.7%): 1024x128256 206.9 us vs
# 310.0, 4096x131072 770.1 vs 1243.0 (4.18 TB/s), 1024x65537 118.4 vs 223.3, 64x131072 18.8
# vs 22.3. Rows giving fewer than SOFTMAX_BWD_FEW_PER_SM programs per SM in those chunks take
# the register chunks of 4096 (one read): 16x65537 7.6 us vs 9.1 split, 64x20000 7.6 vs 8.4;
# rows of at least SOFTMAX_SPLIT_MIN_CHUNKS such chunks split there, as the forward does (B14
# confirm set: 1x1048576 7.6 us vs 8.9 coop 4096, 2x1048576 9.3 vs 10.2; 1x131072 6.4 vs 6.6;
# 8x131072 8.2 vs 7.9 and 8x151936 8.3 vs 7.9 are the losses, 0.3-0.4 us).
SOFTMAX_BWD_COOP_LOOP = dict(block=8192, num_warps=4, sub=2048, evict=True)
SOFTMAX_BWD_COOP = (4096, 4)
SOFTMAX_BWD_FEW_PER_SM = 2
# Cooperative backward plans the plan grid forces, next to the rule's own choice (B14).
SOFTMAX_BWD_CANDIDATES = (
    dict(block=4096, num_warps=4),
    dict(block=8192, num_warps=4, sub=2048, evict=True),
    dict(block=16384, num_warps=8, sub=4096, evict=True),
    dict(block=16384, num_warps=4, sub=4096, evict=True),
)
# Cooperative plans the plan grid forces (block, warps), next to the rule's own choice.
COOP_CANDIDATES = ((2048, 4), (4096, 4), (8192, 8), (2048, 1), (2048, 2), (4096, 2))
