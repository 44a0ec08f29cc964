#!/bin/bash
# rows10 round 1: cold-lane sweep of the BF16-held / register-capped cooperative plans, then ncu
# physical DRAM bytes of the looped cooperative plan at 4096x131072.
set -u
T0=$(date +%s)
B=${BUDGET:-130}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $OUT/gpu_before.txt 2>&1
PYTHONPATH=src timeout $((B - 32)) python3 experiments/rows10_sweep.py --out $OUT/rows10.json \
  --budget $((B - 48)) --compile-share 0.42 > $OUT/sweep_log.txt 2>&1
echo "sweep rc=$? after $(( $(date +%s) - T0 ))s"
grep -E "cells|compile|special|copy|us .* TB/s|FAIL|ERR|total|budget" $OUT/sweep_log.txt | cut -c1-170 | head -120
LEFT=$(( B - ($(date +%s) - T0) - 4 ))
if [ $LEFT -gt 12 ] && command -v ncu >/dev/null; then
  PYTHONPATH=src timeout $LEFT ncu --clock-control none -k regex:softmax_coop --launch-skip 3 --launch-count 3 \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_srcunit_tex_op_read_lookup_hit.sum,lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed \
    python3 experiments/rows10_ncu_case.py 4096 131072 \
    "coop(16384,8,sub=4096,evict=True,fast_exp=True)" "coop(4096,4,fast_exp=True,hold_x=True,maxnreg=48)" \
    "coop(4096,4,fast_exp=True)" \
    > $OUT/ncu.txt 2>&1
  echo "ncu rc=$?"; grep -E "dram__|lts__|gpu__time|sm__warps|coop\(|RowPlan" $OUT/ncu.txt | head -30
fi
echo "done after $(( $(date +%s) - T0 ))s"
