#!/bin/bash
# gemm11 round (budget 130 s wall, one H200): the GEMM dispatch ("auto") against cuBLAS
# (torch.mm) and candidate schedules on forward and both backward products (dA = dC B^T: NT,
# dB = A^T dC: TN) of the default suite, misses first (experiments/gemm11_cases.py). Cold lane:
# L2 flushed before each sample, one CUDA-graph replay timed with events, median (41 samples,
# 9 for >= 2^34 FLOP-ish work); warm lane: a ~1 ms graph, median of 3. Every case is checked
# against an FP64 reference (reference.compare, the dtype's tolerance) on a NaN-poisoned output
# before and after timing. Compile phase: 12 worker processes, each records the first-call
# (compile + autotune) time and the tuning log per case. The GPU tests of the GEMM rules and the
# bucket-reuse test run during the compile phase only (killed before timing starts).
# Results: $OUT/g11.json (rewritten after every case), summary table last.
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv >"$OUT/nvidia-smi.txt" 2>&1
cat "$OUT/nvidia-smi.txt"
T1="tests/gpu/test_gemm_rules_gpu.py"
T2="tests/gpu/test_gemm_int4_gpu.py"
( PYTHONPATH=src timeout -k 1 42 python3 -m pytest -q -x -p no:cacheprovider -rfE "$T1" -k "not tiny" \
    >"$OUT/gputest_rules.log" 2>&1; echo "pytest exit $?" >>"$OUT/gputest_rules.log" ) &
( PYTHONPATH=src timeout -k 1 42 python3 -m pytest -q -p no:cacheprovider -rfE "$T1" -k "tiny" \
    >"$OUT/gputest_tiny.log" 2>&1; echo "pytest exit $?" >>"$OUT/gputest_tiny.log" ) &
( PYTHONPATH=src timeout -k 1 42 python3 -m pytest -q -p no:cacheprovider -rfE "$T2" \
    -k "bucket or backward_full" >"$OUT/gputest_gemm.log" 2>&1; echo "pytest exit $?" >>"$OUT/gputest_gemm.log" ) &
PYTHONPATH=src timeout -k 2 122 python3 experiments/gemm_shapes_sweep.py --out "$OUT" --set g11 \
  --tag g11 --budget 115 --warm-timeout 44 --nparts 12 2>&1
echo "sweep rc=$?"
wait
for f in "$OUT"/gputest_*.log; do echo "== $f"; tail -n 3 "$f"; done
