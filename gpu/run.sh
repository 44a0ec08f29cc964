#!/bin/bash
# rowsum10 GPU round 1: experiments/rowsum10_sweep.py (Inductor code dumps + plan sweep, two
# cold lanes). Everything goes to $OUT; a short summary to stdout.
export PYTHONUNBUFFERED=1
B=${BUDGET:-70}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > "$OUT/nvsmi_before.csv" 2>&1
export TORCHINDUCTOR_CACHE_DIR=/tmp/rowsum10_ind_cache
# GPU tests of the new cooperative kernel during the sweep's compile phase (dead before timing)
(TORCHINDUCTOR_CACHE_DIR=/tmp/rowsum10_test_cache PYTHONPATH=src timeout 30 nice -n 10 python3 -m pytest -q -x \
  -p no:cacheprovider tests/gpu/test_row_sum_arrive_gpu.py > "$OUT/gpu_tests.txt" 2>&1; echo "tests rc=$?" >> "$OUT/gpu_tests.txt") &
TPID=$!
timeout $((B - 5)) env PYTHONPATH=src python3 experiments/rowsum10_sweep.py --out "$OUT" \
  --budget $((B - 13)) --compile-share 0.6 --workers 8 > "$OUT/sweep_stdout.txt" 2>&1
echo "sweep rc=$?"
wait $TPID; tail -n 15 "$OUT/gpu_tests.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv > "$OUT/nvsmi_after.csv" 2>&1
grep -E "torch.compile|compile phase|copy ceiling|FAIL|ERR|budget|total" "$OUT/sweep_log.txt" | head -40
grep -E "^==| (dirty|clean) +(rule|rule_ev|public|compile|compile_ma|torch) " "$OUT/summary.txt" | head -150
du -sk "$TORCHINDUCTOR_CACHE_DIR" 2>/dev/null
tar czf "$OUT/ind_cache.tgz" -C /tmp rowsum10_ind_cache 2>/dev/null
if [ "$(stat -c %s "$OUT/ind_cache.tgz" 2>/dev/null || echo 0)" -gt 2500000 ]; then
  ls -l "$OUT/ind_cache.tgz"; rm -f "$OUT/ind_cache.tgz"
fi
ls -l "$OUT" | head -20
