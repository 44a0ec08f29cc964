#!/bin/bash
# int4b11 (issue 11): one GPU sweep of INT4 linear plans at batch 32-256 on model shapes.
# Run from the repository root:  OUT=<folder> bash experiments/int4b11.sh
# Writes $OUT/int4b11/ (sweep.jsonl, summary.txt, summary.json, log.txt, nvsmi.txt) and
# $OUT/int4b11.tgz. SWEEP_ARGS adds sweep options (a CPU check: SWEEP_ARGS="--dry --rounds 2").
set -u
: "${OUT:?set OUT to the output folder}"
export PYTHONPATH=src PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
D="$OUT/int4b11"
mkdir -p "$D"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv \
  > "$D/nvsmi.txt" 2>&1 || true
export GIT_REV="${GIT_REV:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
# the sweep stops itself at --budget seconds (then writes its summary); timeout is the backstop
timeout -k 5 190 python3 experiments/int4b11_sweep.py --out "$D" --budget 165 ${SWEEP_ARGS:-} \
  2>&1 | tee "$D/log.txt" | tail -n 120
echo "sweep rc=${PIPESTATUS[0]}" | tee -a "$D/log.txt"
tar czf "$OUT/int4b11.tgz" -C "$OUT" int4b11
