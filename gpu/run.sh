#!/bin/bash
# rows10 round 2: cold-lane sweep (write+read flush) of the software-pipelined looped
# cooperative softmax and of add_rms_norm chunk sizes, at the targets, generalization cells and a
# second pass of three cells.
set -u
T0=$(date +%s)
B=${BUDGET:-100}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $OUT/gpu_before.txt 2>&1
PYTHONPATH=src timeout $((B - 8)) python3 experiments/rows10_sweep.py --round 2 --out $OUT/rows10.json \
  --budget $((B - 22)) --compile-share 0.45 > $OUT/sweep_log.txt 2>&1
echo "sweep rc=$? after $(( $(date +%s) - T0 ))s"
grep -E "cells|compile|special|copy|us .* TB/s|FAIL|ERR|total|budget|done" $OUT/sweep_log.txt | cut -c1-190 | head -300
echo "done after $(( $(date +%s) - T0 ))s"
