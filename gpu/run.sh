#!/bin/bash
# rows10 round 3 (the final commit): add_rms_norm's new rule (2048/2 chunks) against the old
# (4096/4) and the unchanged softmax rule, cold lane (write+read flush), 30 samples per plan.
set -u
T0=$(date +%s)
B=${BUDGET:-70}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $OUT/gpu_before.txt 2>&1
PYTHONPATH=src timeout $((B - 6)) python3 experiments/rows10_sweep.py --round 3 --out $OUT/rows10.json \
  --budget $((B - 16)) --compile-share 0.4 > $OUT/sweep_log.txt 2>&1
echo "sweep rc=$? after $(( $(date +%s) - T0 ))s"
grep -E "cells|compile|special|copy|us .* TB/s|FAIL|ERR|total|budget|done" $OUT/sweep_log.txt | cut -c1-190 | head -200
echo "done after $(( $(date +%s) - T0 ))s"
