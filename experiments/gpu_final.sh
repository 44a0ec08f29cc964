#!/bin/bash
# gemm-int4 final round: GPU tests (4 parallel pytest processes), then the final sweep of the public
# functions (gemm forward/backward, int4_linear) against cuBLAS / tinygemm / dense BF16.
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv | tee "$OUT/nvsmi.txt"
T=tests/gpu/test_gemm_int4_gpu.py
parts=(
  "gemm_full_size or gemm_layouts or bf16_rounding"
  "unaligned or skinny or backward_full or bucket"
  "int4_anchor or int4_every_path or ptx_decode"
  "other_group or split_k_bit or nd_and or batch_size or grad_input or launchers or frozen"
)
pids=()
for i in "${!parts[@]}"; do
  PYTHONPATH=src timeout ${TEST_TIMEOUT:-240} python3 -m pytest -q -p no:cacheprovider "$T" -k "${parts[$i]}" > "$OUT/tests_$i.txt" 2>&1 &
  pids+=($!)
done
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "tests part $i rc=$?"; tail -n 3 "$OUT/tests_$i.txt"; done
PYTHONPATH=src timeout ${SWEEP_TIMEOUT:-200} python3 experiments/gemm_int4_sweep.py --set final --tag final --out "$OUT" --budget ${SWEEP_BUDGET:-180} --warm-timeout 45 2>&1 | tee "$OUT/sweep_log.txt" | grep -v "^warm error" | tail -n 100
echo "rc=${PIPESTATUS[0]}"
for i in "${!parts[@]}"; do grep -E "passed|failed|error" "$OUT/tests_$i.txt" | tail -n 1; done
