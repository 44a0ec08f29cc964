#!/usr/bin/env bash
# The Nsight Compute profiles and the design experiments on an idle GPU, smallest useful stage
# first (docs/profiling.md and docs/experiments.md, "Reproduce"). Stages run one at a time (DRAM
# counters are device-wide: nothing else may run on the GPU meanwhile), each under a time limit;
# every stage writes its own artifact directory under OUT, so a stopped stage loses only itself.
#
#   bash scripts/roofline_evidence.sh [STAGE...]     (default: all, in this order)
#   stages: fwd0 (~1-2 min)  exp-a (~70 s)  rest0 (~3 min)  exp-b (~80 s)  exp-c (~40 s)  rank1 (~4 min)
#   OUT=results (default)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-results}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(fwd0 exp-a rest0 exp-b exp-c rank1)
run() {  # run LIMIT_S CMD...
  local limit=$1; shift
  echo "[$(date -u +%H:%M:%S)] $*"
  timeout -k 10 "$limit" "$@"; echo "[$(date -u +%H:%M:%S)] exit $?"
}
for s in "${stages[@]}"; do
  case "$s" in
    fwd0) run 300 $PY -m warpgauge profile --rank 0 --no-peers \
            --targets softmax.,add_rms_norm.,row_sum.,int4_linear.,add. \
            --out "$OUT" --profile-id h200-profile-fwd0 --group-size 13 --group-timeout 280 ;;
    rest0) run 600 $PY -m warpgauge profile --rank 0 --targets gemm,torch,cublas,tinygemm,_bwd,_grad \
            --out "$OUT" --profile-id h200-profile-rest0 --group-size 8 --group-timeout 290 ;;
    rank1) run 900 $PY -m warpgauge profile --rank 1 --out "$OUT" --profile-id h200-profile-rank1 \
            --group-size 10 --group-timeout 290 ;;
    exp-a) run 240 $PY -m warpgauge experiment clock-ramp specialization inductor \
            --out "$OUT/h200-experiments" ;;
    exp-b) run 300 $PY -m warpgauge experiment warps chunks gemm-grouping --out "$OUT/h200-experiments" ;;
    exp-c) run 240 $PY -m warpgauge experiment compile-cost --out "$OUT/h200-experiments" ;;
    *) echo "unknown stage $s (fwd0 exp-a rest0 exp-b exp-c rank1)"; exit 2 ;;
  esac
done
for d in "$OUT"/h200-profile-*/; do
  [ -f "$d/profile.json" ] && $PY -m warpgauge profile --validate "$d"
done
