#!/usr/bin/env bash
# The hardening and nn GPU runs (issues 12 and 14) on one GPU, by part; logs under OUT/<part>/.
#
#   scripts/hardening_gpu.sh OUT [PART ...]
#
# PARTs (default: all, in this order; wall times measured on the H200, cold Triton cache):
#   determinism  tests/gpu/test_determinism_gpu.py, 3 lanes              ~50 s
#   nn           tests/gpu/test_nn_gpu.py (torch.compile fullgraph)       ~60-90 s
#   hf           tests/gpu/test_transformers_gpu.py                        ~25 s
#   indexing     tests/gpu/test_indexing_gpu.py, 2 lanes, ~35 GB GPU mem   ~45 s
#   decode       examples/decode_tokens.py eager + CUDA graphs, ALONE      ~60-90 s
#   props        tests/gpu/test_properties_gpu.py, 500 per operator, 12 lanes   ~120-180 s
#   sanitize     memcheck (4 lanes), then racecheck + initcheck (tiny shapes)   ~4 min
#   decode-compiled  the decode example with torch.compile(reduce-overhead)     ~3-6 min
set -uo pipefail
out=${1:?usage: scripts/hardening_gpu.sh OUT [PART ...]}; shift
parts=${*:-determinism nn hf indexing decode props sanitize decode-compiled}
cd "$(dirname "$0")/.."
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
P="python3 -m pytest -q -p no:cacheprovider -rs"
lane() { local dir=$1 name=$2 t=$3; shift 3
  ( timeout -k 5 "$t" "$@" > "$dir/$name.log" 2>&1; echo "exit $?" >> "$dir/$name.log" ) & }
for part in $parts; do
  d="$out/$part"; mkdir -p "$d"; echo "[$(date -u +%T)] $part"
  case $part in
    determinism)
      lane "$d" rows 240 $P tests/gpu/test_determinism_gpu.py -k "rms or split_row"
      lane "$d" gemm 240 $P tests/gpu/test_determinism_gpu.py -k gemm
      lane "$d" int4 240 $P tests/gpu/test_determinism_gpu.py -k int4 ;;
    nn) lane "$d" nn 300 $P tests/gpu/test_nn_gpu.py ;;
    hf) lane "$d" hf 300 $P -s tests/gpu/test_transformers_gpu.py ;;
    indexing)
      lane "$d" rows 300 $P tests/gpu/test_indexing_gpu.py -k row_ops
      lane "$d" other 300 $P tests/gpu/test_indexing_gpu.py -k "not row_ops" ;;
    decode)
      timeout -k 5 300 python3 examples/decode_tokens.py --preset quick --modes eager,graphs \
        --variants hf,warpgauge-int4,torch-int4,warpgauge --tokens 32 --reps 5 \
        --out "$d/decode_tokens.json" > "$d/decode.log" 2>&1; echo "exit $?" >> "$d/decode.log" ;;
    decode-compiled)
      timeout -k 5 600 python3 examples/decode_tokens.py --preset quick --modes compiled \
        --variants hf,warpgauge-int4,torch-int4 --tokens 32 --reps 3 \
        --out "$d/decode_tokens_compiled.json" > "$d/decode.log" 2>&1; echo "exit $?" >> "$d/decode.log" ;;
    props)
      for spec in add:1 row_sum:1 int4_linear:1 softmax:2 add_rms_norm:3 gemm:4; do
        op=${spec%:*}; n=${spec#*:}
        for ((i = 0; i < n; i++)); do
          lane "$d" "$op-${i}of$n" 600 env WARPGAUGE_PROPERTY_COUNTS="$d/counts.$op.${i}of$n.json" \
            WARPGAUGE_GPU_PROPERTY_SHARD="$i/$n" $P "tests/gpu/test_properties_gpu.py::test_$op"
        done
      done ;;
    sanitize)
      for i in 0 1 2 3; do
        ( SANITIZE_TIMEOUT=400 SANITIZE_SHARD=$i/4 bash scripts/sanitize.sh "$d/memcheck-${i}of4" memcheck \
          > "$d/memcheck-${i}of4.txt" 2>&1 ) &
      done
      wait
      ( SANITIZE_TIMEOUT=400 SANITIZE_ONLY=softmax,add_rms_norm,row_sum bash scripts/sanitize.sh "$d/race" racecheck > "$d/racecheck.txt" 2>&1 ) &
      ( SANITIZE_TIMEOUT=400 bash scripts/sanitize.sh "$d/init" initcheck > "$d/initcheck.txt" 2>&1 ) & ;;
    *) echo "unknown part $part" >&2 ;;
  esac
  wait
done
echo "== summary ($(date -u +%T))"
for f in "$out"/*/*.log; do printf '%-40s %-8s | %s\n' "${f#"$out"/}" "$(tail -1 "$f")" \
  "$(grep -E '[0-9]+ (passed|failed)|cases passed|ERROR SUMMARY|RACECHECK SUMMARY' "$f" | tail -1)"; done
grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|cases passed" "$out"/sanitize/*/*.log 2>/dev/null
cat "$out"/props/counts.*.json 2>/dev/null | tr -d '\n '; echo
grep -h "tok/s\|eager\|graphs\|compiled" "$out"/decode*/decode.log 2>/dev/null | tail -12
