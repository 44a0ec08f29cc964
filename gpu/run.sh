#!/usr/bin/env bash
# int4s10 GPU round: the batch 1-16 INT4 sweep (experiments/int4s10_sweep.py), then the
# tile-kernel tests on the GPU (BF16) if time is left. Everything under $OUT.
set -u
B=${BUDGET:-80}
T0=$(date +%s)
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw,memory.used \
  --format=csv > "$OUT/nvsmi_before.txt" 2>&1
GIT_REV=$(cat gpu/rev.txt 2>/dev/null) PYTHONPATH=src timeout -k 3 $((B - 10)) python3 \
  experiments/int4s10_sweep.py --out "$OUT" --budget $((B - 16)) --workers 12 --warm-timeout 16 \
  --rounds 41 --set r3 > "$OUT/sweep_stdout.txt" 2>&1
echo "sweep rc=$? at $(( $(date +%s) - T0 )) s"
LEFT=$(( B - 4 - ($(date +%s) - T0) ))
if [ "$LEFT" -gt 12 ]; then
  PYTHONPATH=src timeout -k 2 "$LEFT" python3 -m pytest -q -p no:cacheprovider -x \
    tests/test_int4_tile.py > "$OUT/pytest_tile.txt" 2>&1
  echo "pytest rc=$? (left ${LEFT} s)"; tail -n 3 "$OUT/pytest_tile.txt"
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv > "$OUT/nvsmi_after.txt" 2>&1
grep -E "compile phase|checks:|records|BAD|FAIL|ERROR|budget" "$OUT/int4s10_log.txt" | head -30
sed -n '/^shape/,$p' "$OUT/int4s10_log.txt" | head -90
