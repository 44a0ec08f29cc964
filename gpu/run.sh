#!/bin/bash
# rowsum10 GPU round 3 (final code): the row_sum rule against main's rule (on main's kernels),
# torch and torch.compile, side by side in one process (experiments/rowsum10_sweep.py --set r3),
# two cold lanes; then, in whatever time is left, the GPU tests of the rule.
export PYTHONUNBUFFERED=1
B=${BUDGET:-40}
T0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$OUT/nvsmi_before.csv" 2>&1
timeout $((B - 5)) env PYTHONPATH=src python3 experiments/rowsum10_sweep.py --set r3 --out "$OUT" \
  --budget $((B - 10)) --compile-share 0.66 --workers 4 > "$OUT/sweep_stdout.txt" 2>&1
echo "sweep rc=$?"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$OUT/nvsmi_after.csv" 2>&1
LEFT=$((B - 2 - $(date +%s) + T0))
if [ "$LEFT" -gt 3 ]; then
  PYTHONPATH=src timeout "$LEFT" python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_rowsum10_gpu.py > "$OUT/gpu_tests.txt" 2>&1
  echo "tests rc=$? (timeout ${LEFT}s)"; tail -n 4 "$OUT/gpu_tests.txt"
fi
grep -E "torch.compile|compile phase|copy ceiling|FAIL|ERR|budget|total" "$OUT/sweep_log.txt" | head -40
python3 experiments/rowsum10_analyze.py "$OUT/rowsum10.json" --copy 4.39 | cut -c1-200
