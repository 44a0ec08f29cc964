#!/bin/bash
# claunch: warpgauge's C launcher on the H200 (budget 60 s wall).
# 1) bitwise check C vs Triton launcher, NaN-poisoned outputs, every op (in parallel with 2)
# 2) tests/gpu/test_host_path_gpu.py (C launcher on: the default)
# 3) host us/call A/B, C launcher off/on, interleaved; summary table last.
export PYTHONUNBUFFERED=1 PYTHONPATH=src
OUT=${OUT:-/tmp/claunch-out}; mkdir -p "$OUT"
echo "== claunch gpu.sh $(date -u +%T) at $(git rev-parse --short HEAD 2>/dev/null || echo archive)"
timeout 5 nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
echo "== bitwise + pytest (parallel) $(date -u +%T)"
WARPGAUGE_POISON_OUTPUTS=1 timeout 24 python3 scripts/clauncher_check.py bitwise \
  --out "$OUT/bitwise.json" > "$OUT/bitwise.log" 2>&1 &
BW=$!
timeout 20 python3 -m pytest -q -x -p no:cacheprovider tests/test_clauncher.py \
  > "$OUT/cputest.log" 2>&1 &
CT=$!
timeout 25 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_host_path_gpu.py \
  > "$OUT/gputest.log" 2>&1
echo "pytest exit $?"; tail -3 "$OUT/gputest.log"
wait $CT; echo "test_clauncher (Triton 3.6) exit $?"; tail -3 "$OUT/cputest.log"
wait $BW; echo "bitwise exit $?"; tail -25 "$OUT/bitwise.log"
echo "== host A/B $(date -u +%T)"
timeout 15 python3 scripts/clauncher_check.py host --calls 1000 --rounds 8 \
  --out "$OUT/host.json" > "$OUT/host.log" 2>&1
echo "host exit $?"; cat "$OUT/host.log" | tail -8
echo "== summary $(date -u +%T)"
python3 scripts/clauncher_check.py summary --out "$OUT/bitwise.json,$OUT/host.json"
