#!/bin/bash
# gemm11b round (budget 130 s wall, one H200): the GEMM dispatch ("auto", the gemm11b rules: the
# "line" path for NT products whose operands both have rows off 128-byte lines, split-K reduced
# inside the split kernel) against cuBLAS (torch.mm on the same transposed views the autograd
# backward uses) and candidates, then every forward / dA (NT) / dB (TN) product of the default
# and training suites as guards (experiments/gemm11_cases.py: g11b_list). Cold lane: L2 flushed
# before each sample, one CUDA-graph replay timed with CUDA events, median (41 samples, 9 for
# >= 2^34 work); warm lane: a ~1 ms graph, median of 3. Every case is checked against an FP64
# reference (reference.compare, the BF16 tolerance) on a NaN-poisoned output before and after
# timing. Compile phase: 12 worker processes (compile + first-call time per case recorded); the
# GPU tests of the GEMM rules run during the compile phase only (timeout 42 s, before timing).
# Results: $OUT/g11b.json (rewritten after every case), summary table last.
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
git log -1 --format=%H 2>/dev/null >"$OUT/commit.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv >"$OUT/nvidia-smi.txt" 2>&1
cat "$OUT/nvidia-smi.txt"
T1="tests/gpu/test_gemm_rules_gpu.py"
T2="tests/gpu/test_gemm_int4_gpu.py"
NEW="line_path or fused_split"
( PYTHONPATH=src timeout -k 1 42 python3 -m pytest -q -p no:cacheprovider -rfE "$T1" -k "line_path" \
    >"$OUT/gputest_line.log" 2>&1; echo "pytest exit $?" >>"$OUT/gputest_line.log" ) &
( PYTHONPATH=src timeout -k 1 42 python3 -m pytest -q -p no:cacheprovider -rfE "$T1" -k "fused_split" \
    >"$OUT/gputest_fused.log" 2>&1; echo "pytest exit $?" >>"$OUT/gputest_fused.log" ) &
( PYTHONPATH=src timeout -k 1 42 python3 -m pytest -q -p no:cacheprovider -rfE "$T1" \
    -k "not tiny and not ($NEW)" >"$OUT/gputest_rules.log" 2>&1; echo "pytest exit $?" >>"$OUT/gputest_rules.log" ) &
( PYTHONPATH=src timeout -k 1 42 python3 -m pytest -q -p no:cacheprovider -rfE "$T2" \
    -k "bucket or backward_full" >"$OUT/gputest_gemm.log" 2>&1; echo "pytest exit $?" >>"$OUT/gputest_gemm.log" ) &
PYTHONPATH=src timeout -k 2 122 python3 experiments/gemm_shapes_sweep.py --out "$OUT" --set g11b \
  --tag g11b --budget 115 --warm-timeout 44 --nparts 12 2>&1 | tee "$OUT/sweep_log.txt"
echo "sweep rc=${PIPESTATUS[0]}"
wait
for f in "$OUT"/gputest_*.log; do echo "== $f"; tail -n 4 "$f"; done
rm -rf "$OUT/compiled"
echo "== summary (cold us; ratio = cuBLAS / ours)"
sed -n '/^group /,$p' "$OUT/sweep_log.txt"
