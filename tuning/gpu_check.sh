#!/bin/bash
# Row kernels on the H200, smallest useful first (run from the repository root, $OUT set).
#   1. GPU tests of the row files, 4 shards in parallel (~60 s wall, compile-bound).
#   2. (optional) the plan sweep with its FP64 gate on every plan (~55-100 s), then
#      python3 tuning/analyze.py "$OUT/row_tune.json" --rule 132
export PYTHONUNBUFFERED=1
T=tests/gpu/test_rows_gpu.py
i=0
for k in "full_size and bfloat16" "full_size and float16 and not bfloat16" \
         "full_size and float32" "not full_size"; do
  i=$((i+1))
  ( timeout 150 env PYTHONPATH=src python3 -m pytest -q -x -p no:cacheprovider "$T" -k "$k" \
      > "$OUT/rows_pytest_$i.log" 2>&1; echo "shard $i ($k): rc=$?" >> "$OUT/rows_pytest_$i.log" ) &
done
wait
for f in "$OUT"/rows_pytest_*.log; do tail -3 "$f"; done
if [ "${1:-}" = "--sweep" ]; then
  timeout 110 env PYTHONPATH=src python3 tuning/row_tune.py --out "$OUT/row_tune.json" --set all \
    --workers 14 --budget 100 2>&1 | grep -v "UserWarning\|warn_once" > "$OUT/row_tune_log.txt"
  echo "gate failures: $(grep -c FAIL "$OUT/row_tune_log.txt")"
  PYTHONPATH=src python3 tuning/analyze.py "$OUT/row_tune.json" --rule 132 | tail -8
fi
