#!/usr/bin/env bash
# The committed H200 evidence of one session, in three device calls made back to back (each
# within the 30 s a machine stays warm): the peers' wheels are larger than one transfer with the
# tree, so they travel in three parts (.peers/a and .peers/b: the two halves of the CUTLASS DSL
# wheel, ../shared/peers/README.md; .peers/c: the other peer wheels).
#
#   OUT=... WARPGAUGE_GIT_COMMIT=<sha> bash scripts/gpu_evidence.sh one    # carry .peers/a .whl
#   OUT=... WARPGAUGE_GIT_COMMIT=<sha> bash scripts/gpu_evidence.sh two    # carry .peers/b
#   OUT=... WARPGAUGE_GIT_COMMIT=<sha> bash scripts/gpu_evidence.sh three  # carry .peers/c
#
# one: the GPU tests (parallel lanes, correctness only), then host mode. two: the default suite's
# gemm, int4_linear and add cases. three: the peers installed, then the default suite's row
# operators (softmax, add_rms_norm, row_sum, with QuACK and Liger), then a quick training-step run.
# Every part has its own time limit and is packed into $OUT/<part>.tgz as soon as it ends, so what
# finished comes back even if a later part is cut off. Timing parts run alone on the GPU.
#
# Since session 6 the tree is ~49 MB and the two wheel halves no longer fit beside it. QuACK's
# CUTLASS DSL cu13 libraries travel instead as .peers/x1 .. .peers/x4 (the wheel's files as one
# tar.xz, 64 MB, in four 16 MB parts), made here once with
#   bash scripts/gpu_evidence.sh prep-quack PATH/nvidia_cutlass_dsl_libs_cu13-4.8.1-...whl
# then four device calls back to back, `stash` carrying .peers/x1, x2, x3, x4 in turn, and the
# timing call (final6, final6b) carrying .whl and .peers/c unpacks them (`install_peers`).
# When the tree leaves less room (it was 57.5 MiB of the 64 MiB after session 7): make smaller
# parts (PART_BYTES=5000000 bash scripts/gpu_evidence.sh prep-quack WHEEL gives .peers/x1..x13),
# move the peer wheels into .peers/c1, .peers/c2, ... (each a few MB) and carry every one in its
# own `stash` call too; install_peers then takes the wheels from the stage, and the timing call
# carries only .whl.
# Session 12: the tracked tree had grown to ~53 MB (results/ ~50 MB), and even 12 MB parts
# (.peers/x1 .. x6, re-split from the same tar.xz, same sha256) did not fit beside it. Those
# staging calls ran with results/ out of the index (`git rm -r --cached -q results` and
# `/results/` in .git/info/exclude; the device runs need no committed results), x1-x4 in one
# `stash` call and x5 with .whl and .peers/c in the timing call; afterwards `git reset -q
# results` and the exclude line removed restored the index. Check `git status` is clean after.
# Restore the index BEFORE ANY COMMIT (`git reset -q results && sed -i '\#^/results/$#d'
# .git/info/exclude`): a commit made while results/ is out of the index deletes every committed
# run (590c324 did; 0f24eb6 restored them).
set -uo pipefail
[ "${1:-}" = prep-quack ] && [ -n "${2:-}" ] && set -- "$1" "$(realpath "$2")"
cd "$(dirname "$0")/.."
if [ "${1:-}" = prep-quack ]; then  # here, not on the device: .peers/x1..x4 from the cu13 wheel
  whl=$(realpath "${2:?usage: gpu_evidence.sh prep-quack WHEEL}"); tmp=$(mktemp -d)
  python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$whl" "$tmp/x"
  tar -cf - -C "$tmp/x" . | xz -T2 -9e >"$tmp/cu13.tar.xz"
  split -b "${PART_BYTES:-16000000}" -d -a 2 "$tmp/cu13.tar.xz" "$tmp/cu13x.part"
  i=1; for f in "$tmp"/cu13x.part*; do mkdir -p ".peers/x$i"; mv "$f" ".peers/x$i/"; i=$((i + 1)); done
  echo $((i - 1)) >.peers/x1/cu13x.count
  sha256sum "$tmp/cu13.tar.xz" | cut -d' ' -f1 >.peers/x1/cu13x.sha256
  rm -rf "$tmp"; ls -la .peers/x*; exit 0
fi

: "${OUT:?OUT must name the output folder}"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export WARPGAUGE_GIT_DIRTY="${WARPGAUGE_GIT_DIRTY:-0}"
site=/tmp/wg-site
stage=/tmp/wg-stage
export PYTHONPATH="$PWD/src:$site:$site/nvidia_cutlass_dsl/dsl_packages"
stamp() { date -u +%H:%M:%S; }
pack() { tar -czf "$OUT/$1.tgz" -C "$OUT" "$1" && rm -rf "${OUT:?}/$1"; echo "[$(stamp)] packed $1"; }
wg() { python3 -m warpgauge "$@"; }

install_wheels() {  # jsonschema (+ its deps) and whatever peers are staged
  mkdir -p "$site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl "$@" >"$OUT/pip.log" 2>&1 || echo "wheel install failed (see pip.log)"
}

install_peers() {  # QuACK when the four stash calls ran on this machine (else Liger), then .peers/c
  local n have
  n=$(cat "$stage/cu13x.count" 2>/dev/null || echo 0)
  have=$(ls "$stage"/cu13x.part* 2>/dev/null | wc -l)
  if [ "$n" -gt 0 ] && [ "$have" -eq "$n" ] && \
     [ "$(cat "$stage"/cu13x.part* | sha256sum | cut -d' ' -f1)" = "$(cat "$stage/cu13x.sha256")" ]; then
    # the wheels first: pip --target --upgrade replaces whole package folders, so the cu13
    # libraries, unpacked into nvidia_cutlass_dsl/ before it, were deleted (session 7, 14:41)
    install_wheels $(peer_wheels)
    cat "$stage"/cu13x.part* | python3 -c "import sys, tarfile
t = tarfile.open(fileobj=sys.stdin.buffer, mode='r|xz'); t.extractall(sys.argv[1], filter='data')" "$site" \
      && echo "CUTLASS DSL cu13 libraries unpacked from $n staged parts"
  else
    echo "cu13 parts: $have of $n staged (run 'stash' with .peers/x1 .. x4 first): no QuACK"
    install_wheels $(peer_wheels | grep liger_kernel)
  fi
  python3 -c "import quack.softmax; print('quack ok')" 2>&1 | tail -n 1
}

peer_wheels() {  # the staged peer wheels (stash calls carrying .peers/c*), else the carried .peers/c
  if ls "$stage"/*.whl >/dev/null 2>&1; then ls "$stage"/*.whl; else ls .peers/c/*.whl 2>/dev/null; fi
}

bench_part() {  # bench_part NAME LIMIT_S ARGS...: one run under $OUT/NAME, validated and summarized
  local name=$1 limit=$2; shift 2
  mkdir -p "$OUT/$name"
  echo "[$(stamp)] bench $name: $*"
  timeout -k 10 "$limit" python3 -m warpgauge bench --out "$OUT/$name" "$@" >"$OUT/$name/bench.log" 2>&1
  echo "bench exit $?" >>"$OUT/$name/bench.log"
  for run in "$OUT/$name"/*/; do
    [ -f "$run/run.json" ] || continue
    timeout 60 python3 -m warpgauge validate "$run" >>"$OUT/$name/validate.txt" 2>&1
    echo "validate exit $?" >>"$OUT/$name/validate.txt"
    # every case below an open issue's goal, beside the run (a file inside it would be unlisted)
    timeout 60 python3 -m warpgauge goals "$run" --top 0 --markdown "$OUT/$name/goals-$(basename "$run").md" --plot "$OUT/$name/goals-$(basename "$run").png" \
      >>"$OUT/$name/goals.txt" 2>&1
  done
  tail -n 4 "$OUT/$name/bench.log" "$OUT/$name/validate.txt" 2>/dev/null
  head -n 3 "$OUT/$name/goals.txt" 2>/dev/null
  pack "$name"
}

tests_part() {  # GPU tests in parallel lanes; correctness only, so sharing the GPU is fine
  local d="$OUT/gputests" P="python3 -m pytest -q -p no:cacheprovider -rfE"
  mkdir -p "$d"
  lane() { local n=$1 t=$2; shift 2; t=${LANE_S:-$t}; ( timeout -k 5 "$t" "$@" >"$d/$n.log" 2>&1; echo "exit $?" >>"$d/$n.log" ) & }
  echo "[$(stamp)] gpu tests"
  lane engine 160 $P tests/gpu/test_bench_engine_gpu.py tests/gpu/test_host_path_gpu.py tests/gpu/test_faults_gpu.py
  lane rows 160 $P tests/gpu/test_rows_gpu.py -k "not full_size"
  lane rows_full 160 $P tests/gpu/test_rows_gpu.py -k "full_size"
  lane gemm_int4 240 $P tests/gpu/test_gemm_int4_gpu.py  # 160 s cut it at ~97% (session 20)
  lane training 240 $P tests/gpu/test_training_gpu.py tests/gpu/test_cuda_softmax_gpu.py tests/gpu/test_nn_gpu.py tests/gpu/test_transformers_gpu.py
  lane hardening 160 $P tests/gpu/test_determinism_gpu.py tests/gpu/test_indexing_gpu.py
  wait
  { nvidia-smi; python3 -c 'import torch,triton;print(torch.__version__,triton.__version__,torch.cuda.get_device_name())'; } >"$d/env.log" 2>&1
  for f in "$d"/*.log; do printf '%-12s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
  pack gputests
}

prop_shards() {  # prop_shards DIR LIMIT_S: tests/gpu/test_properties_gpu.py in 4 shards, side by side
  local i
  for i in 0 1 2 3; do
    ( WARPGAUGE_GPU_PROPERTY_SHARD=$i/4 WARPGAUGE_PROPERTY_COUNTS="$1/props-counts-$i.json" \
      timeout -k 5 "$2" python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_properties_gpu.py \
      >"$1/props-$i.log" 2>&1; echo "exit $?" >>"$1/props-$i.log" ) &
  done
  wait
}

hardening_part() {  # correctness only (shares the GPU with the tests): sanitizers, property tests
  local d="$OUT/hardening" i
  mkdir -p "$d/sanitize"
  echo "[$(stamp)] hardening: compute-sanitizer memcheck (4 shards), racecheck (2), properties (4)"
  for i in 0 1 2 3; do
    ( SANITIZE_SHARD=$i/4 SANITIZE_TIMEOUT=${HARDEN_S:-200} bash scripts/sanitize.sh "$d/sanitize/memcheck-$i" memcheck >/dev/null 2>&1 ) &
  done
  for i in 0 1; do
    ( SANITIZE_SHARD=$i/2 SANITIZE_TIMEOUT=${HARDEN_S:-200} bash scripts/sanitize.sh "$d/sanitize/racecheck-$i" racecheck >/dev/null 2>&1 ) &
  done
  prop_shards "$d" "${HARDEN_S:-200}" &
  wait
  grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|cases passed|^exit" "$d"/sanitize/*/*.log 2>/dev/null | sort | uniq -c
  for f in "$d"/props-*.log; do printf '%s %s\n' "$(basename "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
  pack hardening
}

sanitize_part() {  # memcheck (4 shards), racecheck (2), initcheck (4); correctness only
  local d="$OUT/sanitize" i
  mkdir -p "$d"
  echo "[$(stamp)] compute-sanitizer memcheck (4 shards), racecheck (2), initcheck (4)"
  for i in 0 1 2 3; do
    ( SANITIZE_SHARD=$i/4 SANITIZE_TIMEOUT=${HARDEN_S:-200} bash scripts/sanitize.sh "$d/memcheck-$i" memcheck >/dev/null 2>&1 ) &
    ( SANITIZE_SHARD=$i/4 SANITIZE_TIMEOUT=${HARDEN_S:-200} bash scripts/sanitize.sh "$d/initcheck-$i" initcheck >/dev/null 2>&1 ) &
  done
  for i in 0 1; do
    ( SANITIZE_SHARD=$i/2 SANITIZE_TIMEOUT=${HARDEN_S:-200} bash scripts/sanitize.sh "$d/racecheck-$i" racecheck >/dev/null 2>&1 ) &
  done
  wait
  for f in "$d"/*/*.log; do printf '%-22s %s\n' "$(basename "$(dirname "$f")")" "$(grep -hE "ERROR SUMMARY|RACECHECK SUMMARY|cases passed|^exit" "$f" | tr '\n' ' ')"; done
  pack sanitize
}

tests2_part() {  # the lanes that did not finish in s6a, split finer, verbose with durations
  local d="$OUT/gputests2" P="python3 -m pytest -v -p no:cacheprovider -rfE --durations=12"
  mkdir -p "$d"
  lane() { local n=$1 t=$2; shift 2; t=${LANE_S:-$t}; ( timeout -k 5 "$t" "$@" >"$d/$n.log" 2>&1; echo "exit $?" >>"$d/$n.log" ) & }
  echo "[$(stamp)] gpu tests (second set)"
  lane faults 240 $P -s tests/gpu/test_faults_gpu.py
  # a test still running after 100 s dumps every thread's stack into the log
  lane training 200 $P -o faulthandler_timeout=100 tests/gpu/test_training_gpu.py ${TRAIN_K:+-k "$TRAIN_K"}
  if [ -z "${TESTS2_SHORT:-}" ]; then
    lane determinism 200 $P tests/gpu/test_determinism_gpu.py
    lane indexing 200 $P tests/gpu/test_indexing_gpu.py
    lane nn_cuda 200 $P tests/gpu/test_cuda_softmax_gpu.py tests/gpu/test_nn_gpu.py tests/gpu/test_transformers_gpu.py
    lane rows_compile 200 $P tests/gpu/test_rows_gpu.py -k "compiled_kernels or coop"
  fi
  wait
  for f in "$d"/*.log; do printf '%-14s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
  pack gputests2
}

final_tests_part() {  # the fault run, the replay path, GEMM and INT4 (correctness; side by side)
  local d="$OUT/gputests3" P="python3 -m pytest -v -p no:cacheprovider -rfE --durations=8"
  mkdir -p "$d"
  echo "[$(stamp)] gpu tests (final set)"
  ( timeout -k 5 240 $P -s tests/gpu/test_faults_gpu.py >"$d/faults.log" 2>&1; echo "exit $?" >>"$d/faults.log" ) &
  ( timeout -k 5 200 $P tests/gpu/test_host_path_gpu.py >"$d/host_path.log" 2>&1; echo "exit $?" >>"$d/host_path.log" ) &
  ( timeout -k 5 220 $P tests/gpu/test_gemm_int4_gpu.py tests/gpu/test_gemm_rules_gpu.py >"$d/gemm_int4.log" 2>&1; echo "exit $?" >>"$d/gemm_int4.log" ) &
  wait
  for f in "$d"/*.log; do printf '%-12s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
  pack gputests3
}

props_part() {  # the GPU property tests, 4 shards of 125 examples per operator (correctness only)
  local d="$OUT/props" i
  mkdir -p "$d"
  echo "[$(stamp)] property tests (4 shards)"
  prop_shards "$d" "${PROPS_S:-240}"
  for f in "$d"/props-*.log; do printf '%s %s | %s\n' "$(basename "$f")" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
  pack props
}

tests7_part() {  # the GPU test lanes of session 7 (verbose, durations; a test past 120 s dumps stacks)
  local d="$OUT/gputests7" P="python3 -m pytest -v -p no:cacheprovider -rfE --durations=8 -o faulthandler_timeout=120"
  mkdir -p "$d"
  lane() { local n=$1 t=$2; shift 2; t=${LANE_S:-$t}; ( timeout -k 5 "$t" "$@" >"$d/$n.log" 2>&1; echo "exit $?" >>"$d/$n.log" ) & }
  echo "[$(stamp)] gpu tests (session 7 lanes)"
  lane rows 250 $P tests/gpu/test_rows_gpu.py
  lane gemm_int4 250 $P tests/gpu/test_gemm_int4_gpu.py tests/gpu/test_gemm_rules_gpu.py
  lane hardening 250 $P tests/gpu/test_determinism_gpu.py tests/gpu/test_indexing_gpu.py
  lane training 250 $P tests/gpu/test_training_gpu.py tests/gpu/test_nn_gpu.py -k "not compiled"
  lane engine 250 $P tests/gpu/test_host_path_gpu.py tests/gpu/test_bench_engine_gpu.py
  wait
  { nvidia-smi; python3 -c 'import torch,triton;print(torch.__version__,triton.__version__,torch.cuda.get_device_name())'; } >"$d/env.log" 2>&1
  for f in "$d"/*.log; do printf '%-12s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
  pack gputests7
}

case "${1:-}" in
  one)  # carries .peers/a (first half of the big wheel) and .whl
    mkdir -p "$stage" && cp .peers/a/* "$stage/" 2>/dev/null || echo "no .peers/a to stage"
    install_wheels
    tests_part
    bench_part host 90 --mode host --skip 'compile*' --max-minutes 1.1
    ;;
  two)  # carries .peers/b (second half); no peers needed for gemm, int4_linear and add
    cp .peers/b/* "$stage/" 2>/dev/null || echo "no .peers/b to stage"
    bench_part fwd-gemm-int4 200 --ops gemm,int4_linear,add --max-minutes 2.7
    ;;
  three)  # carries .peers/c (the other peer wheels)
    cp .peers/c/* "$stage/" 2>/dev/null || echo "no .peers/c to stage"
    if [ -f "$stage/cu13.name" ] && [ -f "$stage/cu13.part.aa" ] && [ -f "$stage/cu13.part.ab" ]; then
      cat "$stage/cu13.part.aa" "$stage/cu13.part.ab" >"$stage/$(cat "$stage/cu13.name")"
      install_wheels "$stage"/*.whl
    else
      echo "peers not staged (calls one and two must run just before): no QuACK"
    fi
    python3 -c "import quack.softmax, liger_kernel; print('peers ok')" 2>&1 | tail -n 1
    bench_part fwd-rows 330 --ops softmax,add_rms_norm,row_sum --max-minutes 4.6
    bench_part fwd-bwd 110 --mode fwd_bwd --quick --ops softmax,add_rms_norm --max-minutes 1.3
    ;;
  verify)  # carries .whl only: the GPU tests, then the gemm, int4_linear and add cases (no peers)
    install_wheels
    tests_part
    bench_part fwd-gemm-int4 200 --ops gemm,int4_linear,add --max-minutes 2.7
    ;;
  tests)  # carries .whl only: the GPU tests and, beside them (correctness only), the quick accuracy run
    install_wheels
    bench_part accuracy 200 --mode accuracy --quick --max-minutes 2.5 &
    hardening_part &
    tests_part
    wait
    ;;
  final1)  # carries .whl: the GPU tests alone, then host mode, then the decode example
    install_wheels
    tests_part
    bench_part host 90 --mode host --skip 'compile*' --max-minutes 1.1
    mkdir -p "$OUT/decode"
    echo "[$(stamp)] decode example"
    timeout -k 5 "${DECODE_S:-60}" python3 examples/decode_tokens.py --modes eager,graphs --tokens 32 \
      --reps 3 --out "$OUT/decode/decode_tokens.json" >"$OUT/decode/decode.log" 2>&1
    echo "decode exit $?" >>"$OUT/decode/decode.log"; tail -n 12 "$OUT/decode/decode.log"
    pack decode
    ;;
  final2)  # carries .whl and .peers/c (Liger): gemm/int4/add, then the wide-row cases (cold lane)
    install_wheels .peers/c/liger_kernel-*.whl
    bench_part fwd-gemm-int4 200 --ops gemm,int4_linear,add --max-minutes 2.7
    bench_part fwd-rows-wide 170 --ops softmax,add_rms_norm,row_sum --lanes cold --max-minutes 2.4 \
      --shapes '*x32000,*x32769,*x50257,*x65537,*x128256,*x131072,*x151936,*x262144,*x1048576'
    ;;
  s6a)  # carries .whl (and .xchg): tests + sanitizers side by side, then alone: helpers, plans
    install_wheels
    sanitize_part &
    tests_part
    wait
    if [ -f .xchg/run_all.sh ]; then echo "[$(stamp)] helpers"; bash .xchg/run_all.sh >"$OUT/helpers.txt" 2>&1; fi
    bench_part plans "${PLANS_S:-150}" --mode plans --quick --max-minutes 2.0
    ;;
  s6b)  # carries .whl (and .xchg): the unfinished lanes again, then alone: the helpers' sweeps
    install_wheels
    tests2_part
    if [ -f .xchg/run_all.sh ]; then echo "[$(stamp)] helpers"; bash .xchg/run_all.sh >"$OUT/helpers.txt" 2>&1; tail -n 12 "$OUT/helpers.txt"; fi
    ;;
  s6c)  # carries .whl: the stability log (quick suite, cold lane, three runs)
    install_wheels
    bench_part stability "${STAB_S:-300}" --quick --repeat 3 --lanes cold --skip 'compile_max*' --max-minutes 2.5
    ;;
  stash)  # carries ONE of .peers/x1 .. .peers/x4 (the CUTLASS DSL cu13 libraries, tar.xz in four
    # parts of 16 MB: the tree is ~49 MB, so no larger part fits a call); kept in /tmp for the
    # next calls on the same warm machine (each call within 30 s of the last)
    mkdir -p "$stage"
    for d in .peers/x*/ .peers/c*/; do [ -d "$d" ] && cp "$d"* "$stage/"; done
    ls -la "$stage"
    ;;
  final6)  # carries .whl and .peers/c: the whole default suite in one run (QuACK if stashed)
    install_peers
    # compile_max_autotune is a diagnostic lane (never "best PyTorch", docs/methodology.md): left
    # out to fit one call; max-autotune-no-cudagraphs carries the autotuned kernels
    bench_part default "${DEFAULT_S:-560}" --max-minutes "${DEFAULT_MIN:-8.6}" \
      --skip "${DEFAULT_SKIP:-compile_max_autotune}"
    ;;
  final6b)  # carries .whl and .peers/c: RESUME=results/<id> finishes a cut default run; the
    # fault and replay GPU tests; the stability log (three quick runs); host mode if HOST=1
    install_wheels .peers/c/liger_kernel-*.whl
    if [ -n "${RESUME:-}" ]; then  # the run is copied under $OUT so that what it adds comes back
      mkdir -p "$OUT/resume" && cp -r "$RESUME" "$OUT/resume/"
      bench_part resume "${RESUME_S:-400}" --resume "$OUT/resume/$(basename "$RESUME")"
    fi
    final_tests_part
    bench_part stability "${STAB_S:-200}" --quick --repeat 3 --lanes cold --ops softmax,add_rms_norm \
      --skip 'compile*' --max-minutes 1.2
    if [ -n "${HOST:-}" ]; then bench_part host 90 --mode host --skip 'compile*' --max-minutes 1.1; fi
    ;;
  final6c)  # carries .whl and .peers/c: the fault test and the GEMM rule tests again (side by
    # side; a test still running after 50 s dumps its stacks), then alone: gemm, int4_linear, add
    install_wheels .peers/c/liger_kernel-*.whl
    d="$OUT/gputests4" P="python3 -m pytest -v -p no:cacheprovider -rfE --durations=8"
    mkdir -p "$d"
    ( timeout -k 5 120 $P -s tests/gpu/test_faults_gpu.py >"$d/faults.log" 2>&1; echo "exit $?" >>"$d/faults.log" ) &
    ( timeout -k 5 100 $P -o faulthandler_timeout=50 tests/gpu/test_gemm_rules_gpu.py >"$d/gemm_rules.log" 2>&1; echo "exit $?" >>"$d/gemm_rules.log" ) &
    wait
    for f in "$d"/*.log; do printf '%-12s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    pack gputests4
    bench_part fwd-gemm-int4 "${GI_S:-200}" --ops gemm,int4_linear,add --max-minutes 2.8
    ;;
  s7h)  # carries .whl and .xchg: the helpers' sweeps, one after another, alone on the GPU
    install_wheels
    if [ -f .xchg/run_all.sh ]; then echo "[$(stamp)] helpers"; bash .xchg/run_all.sh >"$OUT/helpers.txt" 2>&1; tail -n 12 "$OUT/helpers.txt"; fi
    ;;
  s7a)  # carries .whl: correctness only, side by side: compute-sanitizer (memcheck, initcheck,
    # racecheck), the property tests and the GPU test lanes
    install_wheels
    sanitize_part &
    props_part &
    tests7_part
    wait
    ;;
  final7)  # carries .whl and .peers/c (after the four stash calls): the whole default suite, one run
    install_peers
    bench_part default "${DEFAULT_S:-590}" --max-minutes "${DEFAULT_MIN:-8.0}" \
      --skip "${DEFAULT_SKIP:-compile_max_autotune}"
    ;;
  roof7)  # carries .whl: RESUME=results/<id> finishes a cut default run; host mode; the quick
    # training step (fwd_bwd; the peers staged by final7 are still installed); then the
    # Nsight Compute profiles and the experiments (ROOF_STAGES, scripts/roofline_evidence.sh)
    install_wheels
    if [ -n "${RESUME:-}" ]; then
      mkdir -p "$OUT/resume" && cp -r "$RESUME" "$OUT/resume/"
      bench_part resume "${RESUME_S:-300}" --resume "$OUT/resume/$(basename "$RESUME")"
      rm -rf "$OUT/resume"
    fi
    [ "${HOST:-1}" = 1 ] && bench_part host 90 --mode host --skip 'compile*' --max-minutes 1.1
    [ "${FWDBWD:-1}" = 1 ] && bench_part fwd-bwd 100 --mode fwd_bwd --quick --ops softmax,add_rms_norm --max-minutes 1.3
    for st in ${ROOF_STAGES:-fwd0 exp-a exp-b exp-c rest0}; do  # one archive per stage, packed as it ends
      mkdir -p "$OUT/roof-$st"
      echo "[$(stamp)] roofline stage $st"
      OUT="$OUT/roof-$st" bash scripts/roofline_evidence.sh "$st" >"$OUT/roof-$st/log.txt" 2>&1
      tail -n 6 "$OUT/roof-$st/log.txt"
      pack "roof-$st"
    done
    ;;
  rows7)  # carries .whl and .peers/c (after the four stash calls): the default suite's row operators
    # again, now with QuACK (final7's run had it missing: install_peers' order, fixed)
    install_peers
    bench_part rows "${ROWS_S:-330}" --ops softmax,add_rms_norm,row_sum --max-minutes "${ROWS_MIN:-4.5}" \
      --skip "${DEFAULT_SKIP:-compile_max_autotune}" ${ROWS_ARGS:-}
    ;;
  s8a)  # carries .whl: the specialization experiment (issue 13), then the full plans grid (issue 9),
    # cut at PLANS_MIN minutes (RESUME=results/<id> finishes a cut grid run instead)
    install_wheels
    if [ "${SPEC:-1}" = 1 ]; then
      mkdir -p "$OUT/spec8"
      echo "[$(stamp)] experiment specialization"
      # the log beside the folder, not in it: the experiment's manifest lists the folder's files
      timeout -k 5 "${SPEC_S:-90}" python3 -m warpgauge experiment specialization --out "$OUT/spec8" \
        >"$OUT/spec8.log" 2>&1; echo "exit $?" >>"$OUT/spec8.log"
      tail -n 5 "$OUT/spec8.log"; pack spec8
    fi
    if [ -n "${RESUME:-}" ]; then
      mkdir -p "$OUT/plans" && cp -r "$RESUME" "$OUT/plans/"
      bench_part plans "${PLANS_S:-480}" --resume "$OUT/plans/$(basename "$RESUME")" --max-minutes "${PLANS_MIN:-6.8}"
    else
      bench_part plans "${PLANS_S:-480}" --mode plans --max-minutes "${PLANS_MIN:-6.8}"
    fi
    ;;
  final8)  # carries .whl and .peers/c (after the four stash calls): the row operators of the
    # default suite (QuACK and Liger), host mode, the quick training steps (softmax,
    # add_rms_norm, gemm), each alone on the GPU; then the GPU test lanes side by side. The last
    # cu13 part may travel with this call (.peers/x4 beside .peers/c when the tree leaves room)
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_peers
    bench_part rows "${ROWS_S:-300}" --ops softmax,add_rms_norm,row_sum --max-minutes "${ROWS_MIN:-4.0}" \
      --skip "${DEFAULT_SKIP:-compile_max_autotune}" --lanes cold
    [ "${HOST:-1}" = 1 ] && bench_part host 90 --mode host --skip 'compile*' --max-minutes 1.1
    [ "${FWDBWD:-1}" = 1 ] && bench_part fwd-bwd 130 --mode fwd_bwd --quick \
      --ops "${FWDBWD_OPS:-softmax,add_rms_norm,gemm}" --max-minutes 1.5
    d="$OUT/gputests8"; mkdir -p "$d"
    P="python3 -m pytest -q -p no:cacheprovider -rfE -o faulthandler_timeout=100"
    lane() { local n=$1; shift; ( timeout -k 5 "${LANE_S:-110}" "$@" >"$d/$n.log" 2>&1; echo "exit $?" >>"$d/$n.log" ) & }
    echo "[$(stamp)] gpu tests (session 8 lanes)"
    lane rows $P tests/gpu/test_rows_gpu.py tests/gpu/test_rowsum10_gpu.py
    lane host_path $P tests/gpu/test_host_path_gpu.py
    lane training $P tests/gpu/test_training_gpu.py tests/gpu/test_determinism_gpu.py
    wait
    for f in "$d"/*.log; do printf '%-12s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    pack gputests8
    ;;
  final9a)  # carries .whl .peers/c .peers/x4 after the three stash calls: the whole default
    # suite (every operator, both lanes, QuACK and Liger among the peers) in one run
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_peers
    bench_part default "${DEFAULT_S:-540}" --max-minutes "${DEFAULT_MIN:-7.5}" \
      --skip "${DEFAULT_SKIP:-compile_max_autotune}"
    ;;
  final9b)  # right after final9a (the stage is still there): host mode, the training steps of
    # softmax, add_rms_norm and gemm, then the GPU test lanes side by side
    install_peers
    [ "${HOST:-1}" = 1 ] && bench_part host 90 --mode host --skip 'compile*' --max-minutes 1.1
    # the training suite's gemm shapes (both backward products against cuBLAS; compile left out),
    # then the quick softmax and add_rms_norm steps with torch.compile
    [ "${FWDBWD:-1}" = 1 ] && bench_part fwd-bwd-gemm "${FWDBWD_S:-130}" --mode fwd_bwd \
      --ops gemm --skip 'compile*' --max-minutes "${FWDBWD_MIN:-1.6}"
    [ "${FWDBWD:-1}" = 1 ] && bench_part fwd-bwd-rows 100 --mode fwd_bwd --quick \
      --ops softmax,add_rms_norm --max-minutes 1.2
    d="$OUT/gputests9"; mkdir -p "$d"
    P="python3 -m pytest -q -p no:cacheprovider -rfE -o faulthandler_timeout=100"
    lane() { local n=$1; shift; ( timeout -k 5 "${LANE_S:-170}" "$@" >"$d/$n.log" 2>&1; echo "exit $?" >>"$d/$n.log" ) & }
    echo "[$(stamp)] gpu tests (session 9 lanes)"
    lane rows $P tests/gpu/test_rows_gpu.py tests/gpu/test_rowsum10_gpu.py
    lane host_path $P tests/gpu/test_host_path_gpu.py
    lane gemm_int4 $P tests/gpu/test_gemm_int4_gpu.py tests/gpu/test_gemm_rules_gpu.py
    lane training $P tests/gpu/test_training_gpu.py
    lane hardening $P tests/gpu/test_determinism_gpu.py tests/gpu/test_indexing_gpu.py
    wait
    for f in "$d"/*.log; do printf '%-12s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    pack gputests9
    ;;
  final10a)  # session 10: final9a (the whole default suite) on the clean-flush cold lane
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_peers
    bench_part default "${DEFAULT_S:-540}" --max-minutes "${DEFAULT_MIN:-7.5}" \
      --skip "${DEFAULT_SKIP:-compile_max_autotune}"
    ;;
  final10b)  # right after final10a: host mode, training steps, the GPU test lanes and memcheck
    # over every plan the sanitizer driver forces (session 9's kernels among them)
    install_peers
    [ "${HOST:-1}" = 1 ] && bench_part host 90 --mode host --skip 'compile*' --max-minutes 1.1
    # the gemm training steps only on request (FWDBWD_GEMM=1): no GEMM kernel changed in session 10
    [ "${FWDBWD_GEMM:-0}" = 1 ] && bench_part fwd-bwd-gemm "${FWDBWD_S:-130}" --mode fwd_bwd \
      --ops gemm --skip 'compile*' --max-minutes "${FWDBWD_MIN:-1.6}"
    [ "${FWDBWD:-1}" = 1 ] && bench_part fwd-bwd-rows 100 --mode fwd_bwd --quick \
      --ops softmax,add_rms_norm --max-minutes 1.2
    d="$OUT/gputests10"; mkdir -p "$d"
    P="python3 -m pytest -q -p no:cacheprovider -rfE -o faulthandler_timeout=100"
    lane() { local n=$1; shift; ( timeout -k 5 "${LANE_S:-170}" "$@" >"$d/$n.log" 2>&1; echo "exit $?" >>"$d/$n.log" ) & }
    echo "[$(stamp)] gpu tests (session 10 lanes)"
    lane rows $P tests/gpu/test_rows_gpu.py tests/gpu/test_rowsum10_gpu.py
    lane host_path $P tests/gpu/test_host_path_gpu.py
    lane gemm_int4 $P tests/gpu/test_gemm_int4_gpu.py tests/gpu/test_gemm_rules_gpu.py
    lane training $P tests/gpu/test_training_gpu.py
    lane hardening $P tests/gpu/test_determinism_gpu.py tests/gpu/test_indexing_gpu.py
    lane memcheck env SANITIZE_TIMEOUT=$(( ${LANE_S:-170} - 10 )) bash scripts/sanitize.sh "$d/san" memcheck
    lane properties $P tests/gpu/test_properties_gpu.py
    wait
    for f in "$d"/*.log; do printf '%-12s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    grep -h "ERROR SUMMARY\|cases passed" "$d"/san/*.log 2>/dev/null
    pack gputests10
    ;;
  host11)  # session 11, carries .whl .peers/c: the C replay (_clauncher.c's Replay): the host-path
    # GPU tests, the driver's own launch cost, a call part by part, host mode with the C replay off
    # (WARPGAUGE_C_REPLAY=0, the generated Python replay) and then on, back to back on one host
    install_peers
    d="$OUT/host11"; mkdir -p "$d"
    echo "[$(stamp)] host-path GPU tests"
    ( timeout -k 5 "${TEST_S:-150}" python3 -m pytest -q -p no:cacheprovider -rfE \
        tests/gpu/test_host_path_gpu.py >"$d/host_path.log" 2>&1; echo "exit $?" >>"$d/host_path.log" )
    tail -n 3 "$d/host_path.log"
    timeout -k 5 60 python3 scripts/clauncher_check.py driver --out "$d/driver.json" >"$d/driver.log" 2>&1
    echo "driver exit $?" >>"$d/driver.log"; tail -n 8 "$d/driver.log"
    timeout -k 5 "${PARTS_S:-80}" python3 scripts/host_parts.py --out "$d/parts.json" >"$d/parts.log" 2>&1
    echo "parts exit $?" >>"$d/parts.log"; cat "$d/parts.log"
    pack host11
    WARPGAUGE_C_REPLAY=0 bench_part host-py 90 --mode host --skip 'compile*' --max-minutes 1.1
    bench_part host 90 --mode host --skip 'compile*' --max-minutes 1.1
    ;;
  final11)  # session 11, carries .whl .peers/c: the C hit and C replay at the final commit. Quiet
    # host first: the host-path GPU tests, the C replay against the Python one (unpoisoned), the
    # C launcher's bitwise check, a call part by part, then host mode three times back to back
    # (C paths on, off with WARPGAUGE_C_HIT=0 WARPGAUGE_C_REPLAY=0, on again); then the GPU test
    # lanes side by side (correctness only) and memcheck
    install_peers
    d="$OUT/host11"; mkdir -p "$d"
    echo "[$(stamp)] host-path GPU tests"
    ( timeout -k 5 "${TEST_S:-150}" python3 -m pytest -q -p no:cacheprovider -rfE \
        tests/gpu/test_host_path_gpu.py >"$d/host_path.log" 2>&1; echo "exit $?" >>"$d/host_path.log" )
    tail -n 3 "$d/host_path.log"
    timeout -k 5 90 python3 scripts/clauncher_check.py replay --out "$d/replay.json" >"$d/replay.log" 2>&1
    echo "replay exit $?" >>"$d/replay.log"; tail -n 6 "$d/replay.log"
    WARPGAUGE_POISON_OUTPUTS=1 timeout -k 5 90 python3 scripts/clauncher_check.py bitwise \
      --out "$d/bitwise.json" >"$d/bitwise.log" 2>&1
    echo "bitwise exit $?" >>"$d/bitwise.log"; tail -n 2 "$d/bitwise.log"
    timeout -k 5 "${PARTS_S:-80}" python3 scripts/host_parts.py --out "$d/parts.json" >"$d/parts.log" 2>&1
    echo "parts exit $?" >>"$d/parts.log"; cut -c1-150 "$d/parts.log"
    pack host11
    bench_part host 90 --mode host --skip 'compile*' --max-minutes 1.1
    WARPGAUGE_C_HIT=0 WARPGAUGE_C_REPLAY=0 bench_part host-py 90 --mode host --skip 'compile*' --max-minutes 1.1
    bench_part host-again 90 --mode host --skip 'compile*' --max-minutes 1.1
    d="$OUT/gputests11"; mkdir -p "$d"
    P="python3 -m pytest -q -p no:cacheprovider -rfE -o faulthandler_timeout=100"
    lane() { local n=$1; shift; ( timeout -k 5 "${LANE_S:-170}" "$@" >"$d/$n.log" 2>&1; echo "exit $?" >>"$d/$n.log" ) & }
    echo "[$(stamp)] gpu tests (session 11 lanes)"
    lane rows $P tests/gpu/test_rows_gpu.py tests/gpu/test_rowsum10_gpu.py
    lane gemm_int4 $P tests/gpu/test_gemm_int4_gpu.py tests/gpu/test_gemm_rules_gpu.py
    lane training $P tests/gpu/test_training_gpu.py
    lane hardening $P tests/gpu/test_determinism_gpu.py tests/gpu/test_indexing_gpu.py tests/gpu/test_faults_gpu.py
    lane memcheck env SANITIZE_TIMEOUT=$(( ${LANE_S:-170} - 10 )) bash scripts/sanitize.sh "$d/san" memcheck
    lane properties $P tests/gpu/test_properties_gpu.py
    wait
    for f in "$d"/*.log; do printf '%-12s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    grep -h "ERROR SUMMARY\|cases passed" "$d"/san/*.log 2>/dev/null
    pack gputests11
    ;;
  s13a)  # session 13, carries .whl: where the eager host time of the pad-path GEMMs and of the
    # M=256 INT4 linear goes (experiments/padhost_probe.py), then host mode on the current code
    install_wheels
    mkdir -p "$OUT/padhost"
    echo "[$(stamp)] padhost probe"
    timeout -k 10 "${PROBE_S:-200}" python3 experiments/padhost_probe.py --out "$OUT/padhost" \
      >"$OUT/padhost/probe.log" 2>&1; echo "probe exit $?" >>"$OUT/padhost/probe.log"
    tail -n 3 "$OUT/padhost/probe.log"; pack padhost
    [ "${HOST:-1}" = 1 ] && bench_part host 90 --mode host --skip 'compile*' --max-minutes 1.1
    ;;
  s13b)  # session 13, carries .whl and .peers/g (the gemlite and Liger wheels of .peers/c): the GPU tests of the replayed pad path and
    # permuted x (side by side), then alone: the padhost probe again, the default suite's gemm
    # and int4_linear cases (gemlite installed; host + device columns)
    install_wheels .peers/g/*.whl
    d="$OUT/gputests13"; mkdir -p "$d"
    P="python3 -m pytest -q -p no:cacheprovider -rfE -o faulthandler_timeout=100"
    lane() { local n=$1; shift; ( timeout -k 5 "${LANE_S:-170}" "$@" >"$d/$n.log" 2>&1; echo "exit $?" >>"$d/$n.log" ) & }
    echo "[$(stamp)] gpu tests (session 13 lanes)"
    lane host_path $P tests/gpu/test_host_path_gpu.py
    lane gemm_int4 $P tests/gpu/test_gemm_int4_gpu.py tests/gpu/test_gemm_rules_gpu.py
    wait
    for f in "$d"/*.log; do printf '%-12s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    pack gputests13
    mkdir -p "$OUT/padhost2"
    timeout -k 10 "${PROBE_S:-120}" python3 experiments/padhost_probe.py --out "$OUT/padhost2" \
      >"$OUT/padhost2/probe.log" 2>&1; echo "probe exit $?" >>"$OUT/padhost2/probe.log"
    pack padhost2
    bench_part gemm-int4 "${GI_S:-250}" --ops gemm,int4_linear --max-minutes "${GI_MIN:-3.3}" \
      --skip compile_max_autotune
    ;;
  s13c)  # session 13, carries .whl and .peers/x1 .. x4 (results/ out of the index): the cu13
    # parts staged for s13d; the GEMM/INT4 GPU tests in two lanes (correctness, side by side),
    # then alone: experiments/padhost_probe.py --slice-ab
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    ls "$stage"
    install_wheels
    d="$OUT/gputests13c"; mkdir -p "$d"
    P="python3 -m pytest -q -p no:cacheprovider -rfE -o faulthandler_timeout=100"
    lane() { local n=$1; shift; ( timeout -k 5 "${LANE_S:-250}" "$@" >"$d/$n.log" 2>&1; echo "exit $?" >>"$d/$n.log" ) & }
    echo "[$(stamp)] gpu tests (session 13c lanes)"
    lane gemm_int4 $P tests/gpu/test_gemm_int4_gpu.py
    lane gemm_rules $P tests/gpu/test_gemm_rules_gpu.py
    wait
    for f in "$d"/*.log; do printf '%-12s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    pack gputests13c
    mkdir -p "$OUT/slice-ab"
    timeout -k 10 "${PROBE_S:-150}" python3 experiments/padhost_probe.py --out "$OUT/slice-ab" \
      --slice-ab >"$OUT/slice-ab/probe.log" 2>&1; echo "probe exit $?" >>"$OUT/slice-ab/probe.log"
    pack slice-ab
    ;;
  s13d)  # right after s13c, carries .whl, .peers/c, .peers/x5, .peers/x6: QuACK from the staged
    # parts, then the whole training suite (softmax and add_rms_norm forward + backward)
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_peers
    bench_part fwd-bwd "${FB_S:-550}" --mode fwd_bwd --ops softmax,add_rms_norm \
      --max-minutes "${FB_MIN:-7.3}"
    ;;
  s13e)  # session 13, carries .whl and .peers/x1 .. x4 (results/ out of the index): the cu13
    # parts staged for s13f; the training, determinism and row GPU tests (side by side), then
    # alone: experiments/rmsfold13_sweep.py (the folded dw of the split backward)
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_wheels
    d="$OUT/gputests13e"; mkdir -p "$d"
    P="python3 -m pytest -q -p no:cacheprovider -rfE -o faulthandler_timeout=100"
    lane() { local n=$1; shift; ( timeout -k 5 "${LANE_S:-170}" "$@" >"$d/$n.log" 2>&1; echo "exit $?" >>"$d/$n.log" ) & }
    echo "[$(stamp)] gpu tests (session 13e lanes)"
    lane training $P tests/gpu/test_training_gpu.py
    lane determinism $P tests/gpu/test_determinism_gpu.py
    lane rows $P tests/gpu/test_rows_gpu.py -k "rms or backward or grad"
    wait
    for f in "$d"/*.log; do printf '%-12s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    pack gputests13e
    mkdir -p "$OUT/rmsfold13"
    timeout -k 10 "${SWEEP_S:-190}" python3 experiments/rmsfold13_sweep.py --budget-s "${SWEEP_B:-150}" \
      --out "$OUT/rmsfold13/rmsfold13.jsonl" >"$OUT/rmsfold13/sweep.log" 2>&1
    echo "sweep exit $?" >>"$OUT/rmsfold13/sweep.log"; tail -n 4 "$OUT/rmsfold13/sweep.log"
    pack rmsfold13
    ;;
  s13f)  # right after s13e: s13d again (QuACK from the staged parts, the training suite)
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_peers
    bench_part fwd-bwd "${FB_S:-300}" --mode fwd_bwd --ops softmax,add_rms_norm \
      --max-minutes "${FB_MIN:-4}"
    ;;
  s14a)  # session 14, carries .whl: the row GPU tests on HEAD (the folded split backward's
    # compile-once and determinism cases, the cooperative softmax backward) side by side, then
    # alone: experiments/smbwd14_sweep.py (softmax backward plans past the resident range)
    install_wheels
    d="$OUT/gputests14a"; mkdir -p "$d"
    P="python3 -m pytest -q -p no:cacheprovider -rfE -o faulthandler_timeout=100"
    lane() { local n=$1; shift; ( timeout -k 5 "${LANE_S:-200}" "$@" >"$d/$n.log" 2>&1; echo "exit $?" >>"$d/$n.log" ) & }
    echo "[$(stamp)] gpu tests (session 14a lanes)"
    lane determinism $P tests/gpu/test_determinism_gpu.py
    lane rows $P tests/gpu/test_rows_gpu.py -k "rms or backward or grad or coop or wider"
    wait
    for f in "$d"/*.log; do printf '%-12s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    pack gputests14a
    mkdir -p "$OUT/smbwd14"
    timeout -k 10 "${SWEEP_S:-330}" python3 experiments/smbwd14_sweep.py --budget-s "${SWEEP_B:-280}" \
      --out "$OUT/smbwd14/smbwd14.jsonl" >"$OUT/smbwd14/sweep.log" 2>&1
    echo "sweep exit $?" >>"$OUT/smbwd14/sweep.log"; tail -n 4 "$OUT/smbwd14/sweep.log"
    pack smbwd14
    ;;
  s14b)  # session 14: experiments/smbwd14_sweep.py --set r2 (the looped cooperative backward family)
    mkdir -p "$OUT/smbwd14r2"
    timeout -k 10 "${SWEEP_S:-200}" python3 experiments/smbwd14_sweep.py --set r2 --budget-s "${SWEEP_B:-170}" \
      --out "$OUT/smbwd14r2/smbwd14r2.jsonl" >"$OUT/smbwd14r2/sweep.log" 2>&1
    echo "sweep exit $?" >>"$OUT/smbwd14r2/sweep.log"; tail -n 4 "$OUT/smbwd14r2/sweep.log"
    pack smbwd14r2
    ;;
  s14c)  # session 14: the row GPU tests on the cooperative softmax backward rule, then alone:
    # experiments/smbwd14_sweep.py --set confirm (wide few-row backward cells) and --set fwd
    # (the forward softmax's looped cooperative plan against the backward's chunking)
    install_wheels
    d="$OUT/gputests14c"; mkdir -p "$d"
    P="python3 -m pytest -q -p no:cacheprovider -rfE -o faulthandler_timeout=100"
    lane() { local n=$1; shift; ( timeout -k 5 "${LANE_S:-200}" "$@" >"$d/$n.log" 2>&1; echo "exit $?" >>"$d/$n.log" ) & }
    echo "[$(stamp)] gpu tests (session 14c lanes)"
    lane rows $P tests/gpu/test_rows_gpu.py -k "backward or coop or wider or full_size"
    lane indexing $P tests/gpu/test_indexing_gpu.py tests/gpu/test_training_gpu.py -k "past_2_31 or row_ops"
    wait
    for f in "$d"/*.log; do printf '%-12s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    pack gputests14c
    ;&
  s14c2)  # the sweeps of s14c alone
    mkdir -p "$OUT/smbwd14c"
    for set in confirm fwd; do
      timeout -k 10 "${SWEEP_S:-150}" python3 experiments/smbwd14_sweep.py --set $set --budget-s "${SWEEP_B:-120}" \
        --out "$OUT/smbwd14c/smbwd14$set.jsonl" >"$OUT/smbwd14c/sweep-$set.log" 2>&1
      echo "sweep exit $?" >>"$OUT/smbwd14c/sweep-$set.log"; tail -n 3 "$OUT/smbwd14c/sweep-$set.log"
    done
    pack smbwd14c
    ;;
  s14d)  # session 14, carries .whl and .peers/x1 .. x4 (results/ out of the index): the cu13
    # parts staged for s14e; the training GPU tests and the rows' backward tests (side by side)
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_wheels
    d="$OUT/gputests14d"; mkdir -p "$d"
    P="python3 -m pytest -q -p no:cacheprovider -rfE -o faulthandler_timeout=100"
    lane() { local n=$1; shift; ( timeout -k 5 "${LANE_S:-250}" "$@" >"$d/$n.log" 2>&1; echo "exit $?" >>"$d/$n.log" ) & }
    echo "[$(stamp)] gpu tests (session 14d lanes)"
    lane training $P tests/gpu/test_training_gpu.py
    lane rows $P tests/gpu/test_rows_gpu.py -k "softmax_backward" tests/gpu/test_determinism_gpu.py
    wait
    for f in "$d"/*.log; do printf '%-12s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    pack gputests14d
    ;;
  s14e)  # right after s14d, carries .whl, .peers/c, .peers/x5, .peers/x6: QuACK from the staged
    # parts, then the whole training suite (softmax and add_rms_norm forward + backward)
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_peers
    bench_part fwd-bwd "${FB_S:-330}" --mode fwd_bwd --ops softmax,add_rms_norm \
      --max-minutes "${FB_MIN:-4.5}"
    ;;
  s14f)  # session 14: experiments/smbwd14_sweep.py --set res (the resident softmax backward's warps)
    mkdir -p "$OUT/smbwd14res"
    timeout -k 10 "${SWEEP_S:-200}" python3 experiments/smbwd14_sweep.py --set res --budget-s "${SWEEP_B:-170}" \
      --out "$OUT/smbwd14res/smbwd14res.jsonl" >"$OUT/smbwd14res/sweep-res.log" 2>&1
    echo "sweep exit $?" >>"$OUT/smbwd14res/sweep-res.log"; tail -n 4 "$OUT/smbwd14res/sweep-res.log"
    pack smbwd14res
    ;;
  s14g)  # session 14, carries .peers/x1 .. x4 (results/ out of the index): the cu13 parts staged
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done; ls "$stage"
    ;;
  s15a)  # next session: the cooperative add_rms_norm backward's GPU tests, then alone
    # experiments/rmscoop15_sweep.py (written in session 14, not yet run)
    install_wheels
    d="$OUT/gputests15a"; mkdir -p "$d"
    timeout -k 5 "${LANE_S:-200}" python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_rows_gpu.py \
      -k "${TESTS_K:-rms_backward_coop}" >"$d/rows.log" 2>&1; echo "exit $?" >>"$d/rows.log"
    tail -n 2 "$d/rows.log"; pack gputests15a
    mkdir -p "$OUT/rmscoop15"
    timeout -k 10 "${SWEEP_S:-170}" python3 experiments/rmscoop15_sweep.py --budget-s "${SWEEP_B:-140}" \
      --out "$OUT/rmscoop15/rmscoop15.jsonl" >"$OUT/rmscoop15/sweep.log" 2>&1
    echo "sweep exit $?" >>"$OUT/rmscoop15/sweep.log"; tail -n 4 "$OUT/rmscoop15/sweep.log"
    pack rmscoop15
    # the forward softmax's register cooperative plan in 2-warp programs (--set fwd15)
    mkdir -p "$OUT/smfwd15"
    timeout -k 10 "${FWD_S:-170}" python3 experiments/smbwd14_sweep.py --set fwd15 --budget-s "${FWD_B:-140}" \
      --out "$OUT/smfwd15/smfwd15.jsonl" >"$OUT/smfwd15/sweep.log" 2>&1
    echo "sweep exit $?" >>"$OUT/smfwd15/sweep.log"; tail -n 4 "$OUT/smfwd15/sweep.log"
    pack smfwd15
    ;;
  s15b)  # session 15 round 2: experiments/rows15_sweep.py (2-warp cooperative plans, broadly)
    mkdir -p "$OUT/rows15"
    timeout -k 10 "${SWEEP_S:-300}" python3 experiments/rows15_sweep.py --budget-s "${SWEEP_B:-260}" \
      --out "$OUT/rows15/rows15.jsonl" >"$OUT/rows15/sweep.log" 2>&1
    echo "sweep exit $?" >>"$OUT/rows15/sweep.log"; tail -n 4 "$OUT/rows15/sweep.log"
    pack rows15
    ;;
  s15c)  # session 15, carries .whl and .peers/x1 .. x4 (results/ out of the index): the cu13
    # parts staged for s15d; the row GPU tests on the S15 rule (2-warp cooperative softmax and
    # 1-warp add_rms_norm chunks)
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_wheels
    d="$OUT/gputests15c"; mkdir -p "$d"
    P="python3 -m pytest -q -p no:cacheprovider -rfE -o faulthandler_timeout=100"
    lane() { local n=$1; shift; ( timeout -k 5 "${LANE_S:-170}" "$@" >"$d/$n.log" 2>&1; echo "exit $?" >>"$d/$n.log" ) & }
    echo "[$(stamp)] gpu tests (session 15c lanes)"
    lane rows $P tests/gpu/test_rows_gpu.py -k "coop or wider or full_size or softmax or rms"
    lane indexing $P tests/gpu/test_indexing_gpu.py tests/gpu/test_determinism_gpu.py -k "past_2_31 or row or softmax or rms"
    wait
    for f in "$d"/*.log; do printf '%-12s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    pack gputests15c
    ;;
  s15d)  # right after s15c, carries .whl, .peers/c, .peers/x5, .peers/x6: QuACK from the staged
    # parts, the default suite's wide-row softmax and add_rms_norm cases, then the training suite
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_peers
    bench_part rows-wide "${RW_S:-270}" --ops softmax,add_rms_norm --max-minutes "${RW_MIN:-4}" \
      --shapes '*x50257' --shapes '*x65537' --shapes '*x128256' --shapes '*x151936' \
      --shapes '*x262144' --shapes '*x131072' --shapes '*x1048576'
    [ "${RW_ONLY:-0}" = 1 ] && exit 0
    bench_part fwd-bwd "${FB_S:-280}" --mode fwd_bwd --ops softmax,add_rms_norm \
      --max-minutes "${FB_MIN:-4}"
    ;;
  s15e)  # session 15, carries .whl: the compile-reuse GPU test on the S15 rule, then alone
    # experiments/rmsbwd15_sweep.py (add_rms_norm's split backward in tiles of fewer warps)
    install_wheels
    d="$OUT/gputests15e"; mkdir -p "$d"
    timeout -k 5 "${LANE_S:-120}" python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_rows_gpu.py \
      -k "reuse_compiled" >"$d/rows.log" 2>&1; echo "exit $?" >>"$d/rows.log"
    tail -n 2 "$d/rows.log"; pack gputests15e
    mkdir -p "$OUT/rmsbwd15"
    timeout -k 10 "${SWEEP_S:-160}" python3 experiments/rmsbwd15_sweep.py --budget-s "${SWEEP_B:-130}" \
      --out "$OUT/rmsbwd15/rmsbwd15.jsonl" >"$OUT/rmsbwd15/sweep.log" 2>&1
    echo "sweep exit $?" >>"$OUT/rmsbwd15/sweep.log"; tail -n 12 "$OUT/rmsbwd15/sweep.log"
    pack rmsbwd15
    ;;
  s15f)  # session 15, carries .whl and .peers/c: the add_rms_norm GPU tests on the 4-warp folded
    # split backward, then the training suite's add_rms_norm (torch.compile and Liger, no QuACK)
    install_peers
    d="$OUT/gputests15f"; mkdir -p "$d"
    timeout -k 5 "${LANE_S:-120}" python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_rows_gpu.py \
      tests/gpu/test_determinism_gpu.py -k "rms" >"$d/rows.log" 2>&1; echo "exit $?" >>"$d/rows.log"
    tail -n 2 "$d/rows.log"; pack gputests15f
    bench_part fwd-bwd-rms "${FB_S:-200}" --mode fwd_bwd --ops add_rms_norm --max-minutes "${FB_MIN:-3}"
    ;;
  s17a)  # session 17, carries .whl: the row GPU tests on the G16 rule (one-warp softmax chunks,
    # looped add_rms_norm chunks at 1048576, the early weight load), then the plans grid (s8a
    # without the specialization experiment; RESUME=... finishes a cut grid, TESTS=0 skips the tests)
    install_wheels
    if [ "${TESTS:-1}" = 1 ]; then
      d="$OUT/gputests17a"; mkdir -p "$d"
      timeout -k 5 "${LANE_S:-170}" python3 -m pytest -q -p no:cacheprovider -rfE -o faulthandler_timeout=100 \
        tests/gpu/test_rows_gpu.py -k "${TESTS_K:-coop or wider or reuse or full_size or softmax or rms}" \
        >"$d/rows.log" 2>&1; echo "exit $?" >>"$d/rows.log"
      tail -n 3 "$d/rows.log"; pack gputests17a
    fi
    SPEC=0 bash "$0" s8a
    ;;
  s18a)  # session 18, carries .whl, .resume and .peers/x1 .. x4 (results/ out of the index): the
    # cu13 parts staged for s18b, then the plans grid resumed (RESUME=.resume/<id>, s8a's limits)
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    SPEC=0 bash "$0" s8a
    ;;
  s18b)  # right after s18a, carries .whl, .peers/c, .peers/x5, .peers/x6: QuACK from the staged
    # parts, then the whole default suite in one run (max-autotune with CUDA graphs skipped, as in run
    # 20261202-023113-default: the suite's time budget)
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_peers
    bench_part default "${DEF_S:-500}" --max-minutes "${DEF_MIN:-7.2}" --skip compile_max_autotune
    ;;
  s18c)  # session 18, carries .whl, .resume and .peers/c: the plans grid resumed (RESUME=.resume/<id>),
    # then the training steps of add_rms_norm (Liger and torch.compile, no QuACK) on the G16 rule
    SPEC=0 bash "$0" s8a
    install_peers
    bench_part fwd-bwd-rms "${FB_S:-130}" --mode fwd_bwd --ops add_rms_norm --max-minutes "${FB_MIN:-1.7}"
    ;;
  s19c)  # session 19, carries .whl and .peers/x1 .. x4 (results/ out of the index): the cu13 parts
    # staged for s19d, the GPU row tests, then the latency-bound plans grid (tuning/plans_small19.toml,
    # warm and cold) on the P19 rule
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_wheels
    d="$OUT/gputests19c"; mkdir -p "$d"
    timeout -k 10 "${TESTS_S:-240}" python3 -m pytest -q -p no:cacheprovider -rfE \
      tests/gpu/test_rows_gpu.py >"$d/rows.log" 2>&1; echo "exit $?" >>"$d/rows.log"
    tail -n 3 "$d/rows.log"; pack gputests19c
    bench_part small "${SMALL_S:-200}" --suite tuning/plans_small19.toml --max-minutes "${SMALL_MIN:-2.8}"
    ;;
  s19d)  # right after s19c, carries .whl, .peers/c, .peers/x5, .peers/x6: QuACK from the staged
    # parts, then the default suite's add_rms_norm cases (max-autotune with CUDA graphs skipped)
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_peers
    bench_part default "${DEF_S:-300}" --ops add_rms_norm --max-minutes "${DEF_MIN:-4.0}" \
      --skip compile_max_autotune
    ;;
  s20a)  # session 20, carries .whl and .peers/x1 .. x4 (results/ out of the index): the cu13 parts
    # staged for s20b, then the GPU test lanes at the final kernel code (tests_part)
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_wheels
    tests_part
    ;;
  s20b)  # right after s20a, carries .whl, .peers/c, .peers/x5, .peers/x6: QuACK from the staged
    # parts, then the whole default suite in one run with the warm-lane sizing fix (df65f38;
    # max-autotune with CUDA graphs skipped, as in s18b)
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_peers
    bench_part default "${DEF_S:-520}" --max-minutes "${DEF_MIN:-7.4}" --skip compile_max_autotune
    ;;
  s20c)  # right after s20b (QuACK still installed in $site when the machine stayed warm), carries
    # .whl: the whole training suite, then P19 held out on hidden sizes (tuning/plans_hidden20.toml)
    python3 -c "import quack.softmax; print('quack ok')" 2>&1 | tail -n 1
    bench_part fwd-bwd "${FB_S:-400}" --mode fwd_bwd --max-minutes "${FB_MIN:-5.6}"
    [ "${HID_S:-170}" = 0 ] || bench_part hidden "${HID_S:-170}" --suite tuning/plans_hidden20.toml --max-minutes "${HID_MIN:-2.4}"
    ;;
  s22b)  # prepared in session 22 (no GPU lent), carries .whl: the DRAM-bound wide-row plan grid
    # (tuning/plans_dram22.toml: softmax 256-8192 rows x 32000-262144, add_rms_norm and row_sum at
    # 1024-4096 x 131072 / 151936; every candidate forced, cold), its regret report, and the
    # goals of the run. Next session's order: s22a with .peers/x1-x4, s20b, s20c with HID_S=0,
    # then this (~28 device minutes in all)
    install_wheels
    bench_part dram "${DRAM_S:-330}" --suite tuning/plans_dram22.toml --max-minutes "${DRAM_MIN:-4.8}"
    ;;
  s20d)  # session 20, carries .whl: the INT4 grad-input split over N (int4.grad_input_split): its
    # GPU tests (side by side, correctness only), then alone experiments/int4grad20_sweep.py and
    # the training steps of int4_linear (fwd_bwd, no peers needed)
    install_wheels
    d="$OUT/gputests20d"; mkdir -p "$d"
    P="python3 -m pytest -q -p no:cacheprovider -rfE"
    ( timeout -k 5 "${LANE_S:-150}" $P tests/gpu/test_gemm_int4_gpu.py -k "grad" >"$d/int4.log" 2>&1; echo "exit $?" >>"$d/int4.log" ) &
    ( timeout -k 5 "${LANE_S:-150}" $P tests/gpu/test_determinism_gpu.py tests/gpu/test_training_gpu.py -k "int4" >"$d/train.log" 2>&1; echo "exit $?" >>"$d/train.log" ) &
    wait
    for f in "$d"/*.log; do printf '%-8s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    mkdir -p "$OUT/int4grad20"
    [ "${SW_B:-150}" = 0 ] || timeout -k 5 "${SW_S:-200}" python3 experiments/int4grad20_sweep.py --out "$OUT/int4grad20/int4grad20.json" \
      --budget "${SW_B:-150}" >"$OUT/int4grad20/sweep.log" 2>&1; echo "sweep exit $?" >>"$OUT/int4grad20/sweep.log"
    tail -n 2 "$OUT/int4grad20/sweep.log"
    mv "$d" "$OUT/int4grad20/"; pack int4grad20
    bench_part fwd-bwd-int4 "${FB_S:-150}" --mode fwd_bwd --ops int4_linear --max-minutes "${FB_MIN:-1.8}"
    ;;
  s21a)  # prepared in session 20 for the next session, carries .whl: the GPU tests of what session
    # 20 landed untimed (add's small-block path, the INT4 grad-input), side by side; then alone: the
    # grad-input sweep with the decode variants (GRAD_DECODE 1, 2), the default suite's add cases
    # (no peers needed), and the P19 boundary grid (tuning/plans_boundary21.toml)
    # PART=1: the tests and the sweep; PART=2: the two bench runs (one call each fits 600 s)
    install_wheels
    if [ "${PART:-1}" = 1 ]; then
    d="$OUT/gputests21a"; mkdir -p "$d"
    P="python3 -m pytest -q -p no:cacheprovider -rfE"
    ( timeout -k 5 "${LANE_S:-200}" $P tests/gpu/test_gemm_int4_gpu.py tests/gpu/test_determinism_gpu.py -k "grad or int4" >"$d/int4.log" 2>&1; echo "exit $?" >>"$d/int4.log" ) &
    ( timeout -k 5 "${LANE_S:-200}" $P tests/gpu/test_properties_gpu.py tests/gpu/test_indexing_gpu.py -k "add and not rms" >"$d/add.log" 2>&1; echo "exit $?" >>"$d/add.log" ) &
    wait
    for f in "$d"/*.log; do printf '%-8s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    pack gputests21a
    mkdir -p "$OUT/int4grad21"
    timeout -k 5 "${SW_S:-220}" python3 experiments/int4grad20_sweep.py --out "$OUT/int4grad21/int4grad21.json" \
      --budget "${SW_B:-170}" >"$OUT/int4grad21/sweep.log" 2>&1; echo "sweep exit $?" >>"$OUT/int4grad21/sweep.log"
    tail -n 2 "$OUT/int4grad21/sweep.log"; pack int4grad21
    fi
    [ "${PART:-1}" = 2 ] || { ls -la "$OUT"; exit 0; }
    bench_part add "${ADD_S:-100}" --ops add --max-minutes "${ADD_MIN:-1.2}"
    bench_part boundary "${BND_S:-170}" --suite tuning/plans_boundary21.toml --max-minutes "${BND_MIN:-2.4}"
    ;;
  s21b)  # session 21, carries .whl: the INT4 grad-input GPU tests on GRAD_DECODE 1 (the new
    # default) and the row-plan tests, side by side; then alone: experiments/s21_probe.py (add's
    # small blocks, the kernels of tiny add_rms_norm training steps) and the training suite's
    # int4_linear steps (no peers needed)
    install_wheels
    d="$OUT/gputests21b"; mkdir -p "$d"
    P="python3 -m pytest -q -p no:cacheprovider -rfE"
    ( timeout -k 5 "${LANE_S:-200}" $P tests/gpu/test_gemm_int4_gpu.py tests/gpu/test_determinism_gpu.py -k "grad or int4" >"$d/int4.log" 2>&1; echo "exit $?" >>"$d/int4.log" ) &
    ( timeout -k 5 "${LANE_S:-200}" $P tests/gpu/test_rows_gpu.py -k "rms" >"$d/rows.log" 2>&1; echo "exit $?" >>"$d/rows.log" ) &
    wait
    for f in "$d"/*.log; do printf '%-8s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    pack gputests21b
    mkdir -p "$OUT/s21probe"
    timeout -k 5 "${PR_S:-150}" python3 experiments/s21_probe.py --out "$OUT/s21probe/s21probe.json" \
      >"$OUT/s21probe/probe.log" 2>&1; echo "probe exit $?" >>"$OUT/s21probe/probe.log"
    tail -n 14 "$OUT/s21probe/probe.log" | cut -c1-400; pack s21probe
    bench_part int4-train "${IT_S:-150}" --suite training --ops int4_linear --max-minutes "${IT_MIN:-2}"
    ;;
  s21c)  # session 21, carries .whl: the INT4 GPU tests alone (s21b's lane ran out of time at
    # ~93% with none failed), then experiments/s21_rmsbwd_probe.py alone
    install_wheels
    d="$OUT/gputests21c"; mkdir -p "$d"
    timeout -k 5 "${LANE_S:-300}" python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_gemm_int4_gpu.py \
      tests/gpu/test_determinism_gpu.py -k "grad or int4" >"$d/int4.log" 2>&1; echo "exit $?" >>"$d/int4.log"
    tail -n 2 "$d/int4.log"; pack gputests21c
    mkdir -p "$OUT/rmsbwd21"
    timeout -k 5 "${PR_S:-240}" python3 experiments/s21_rmsbwd_probe.py --out "$OUT/rmsbwd21/rmsbwd21.json" \
      >"$OUT/rmsbwd21/probe.log" 2>&1; echo "probe exit $?" >>"$OUT/rmsbwd21/probe.log"
    tail -n 12 "$OUT/rmsbwd21/probe.log" | cut -c1-600; pack rmsbwd21
    ;;
  s21d)  # session 21, carries .whl (with Liger's wheel): the add_rms_norm GPU tests on the tiny
    # backward plan (rows, training, determinism lanes side by side), then alone the training
    # suite's add_rms_norm steps (torch.compile and Liger; QuACK not staged)
    install_wheels
    d="$OUT/gputests21d"; mkdir -p "$d"
    P="python3 -m pytest -q -p no:cacheprovider -rfE"
    ( timeout -k 5 "${LANE_S:-150}" $P tests/gpu/test_rows_gpu.py tests/gpu/test_determinism_gpu.py -k "rms" >"$d/rows.log" 2>&1; echo "exit $?" >>"$d/rows.log" ) &
    ( timeout -k 5 "${LANE_S:-150}" $P tests/gpu/test_training_gpu.py tests/gpu/test_nn_gpu.py -k "rms and not compiled" >"$d/training.log" 2>&1; echo "exit $?" >>"$d/training.log" ) &
    wait
    for f in "$d"/*.log; do printf '%-8s %s | %s\n' "$(basename "$f" .log)" "$(tail -n 1 "$f")" "$(grep -E '[0-9]+ (passed|failed)' "$f" | tail -n 1)"; done
    pack gputests21d
    bench_part rms-train "${RT_S:-200}" --suite training --ops add_rms_norm --max-minutes "${RT_MIN:-2.8}"
    ;;
  s21e)  # session 21, carries .whl: correctness only, side by side: compute-sanitizer (memcheck,
    # initcheck, racecheck shards: the tiny backward plan, the INT4 grad-input's decode 1, add's
    # small blocks are all in the driver's cases) and the training GPU tests of the row ops
    install_wheels
    d="$OUT/gputests21e"; mkdir -p "$d"
    sanitize_part &
    ( timeout -k 5 "${LANE_S:-200}" python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_training_gpu.py \
      -k "row_ops or tiny" >"$d/training.log" 2>&1; echo "exit $?" >>"$d/training.log" ) &
    wait
    tail -n 2 "$d/training.log"; pack gputests21e
    ;;
  s21f)  # session 21, carries .whl (with Liger's wheel): the tiny backward in one launch
    # (TINY_FUSED_DW_MAX): the rms GPU tests, the probe (fused against the two-launch form), the
    # training step at 32x127
    install_wheels
    d="$OUT/gputests21f"; mkdir -p "$d"
    timeout -k 5 "${LANE_S:-70}" python3 -m pytest -q -p no:cacheprovider -rfE tests/gpu/test_rows_gpu.py \
      tests/gpu/test_determinism_gpu.py -k "rms" >"$d/rows.log" 2>&1; echo "exit $?" >>"$d/rows.log"
    tail -n 2 "$d/rows.log"
    timeout -k 5 "${PR_S:-60}" python3 experiments/s21_rmsbwd_probe.py --set fused --out "$d/fused21.json" \
      >"$d/probe.log" 2>&1; echo "probe exit $?" >>"$d/probe.log"; tail -n 7 "$d/probe.log" | cut -c1-300
    pack gputests21f
    bench_part rms-tiny "${RT_S:-80}" --suite training --ops add_rms_norm --shapes 32x127 --max-minutes 1
    ;;
  s22a)  # prepared in session 21 for the next session, carries .whl: correctness first, side by
    # side: compute-sanitizer (the one-launch tiny add_rms_norm backward landed after s21e) and
    # the INT4 tests with the streaming grad-input forced on; then alone the grad-input sweep
    # --set gemv (int4.GRAD_GEMV against the default tile kernel at batch <= 2). Session 22 (no
    # GPU lent) added: carrying .peers/x1 .. x4 as well stages QuACK's cu13 parts, so that s20b
    # (carrying .whl, .peers/c, x5, x6: the whole default suite with QuACK) and s20c (the training
    # suite, QuACK still installed) can follow within the 30 s the machine stays warm
    mkdir -p "$stage"; for x in .peers/x*/; do [ -d "$x" ] && cp "$x"* "$stage/"; done
    install_wheels
    d="$OUT/gputests22a"; mkdir -p "$d"
    sanitize_part &
    ( timeout -k 5 "${LANE_S:-200}" python3 -m pytest -q -p no:cacheprovider -rfE tests/test_int4.py \
      -k "grad_input_gemv" >"$d/int4gemv.log" 2>&1; echo "exit $?" >>"$d/int4gemv.log" ) &
    wait
    tail -n 2 "$d/int4gemv.log"; pack gputests22a
    mkdir -p "$OUT/int4gemv22"
    timeout -k 5 "${SW_S:-240}" python3 experiments/int4grad20_sweep.py --set gemv \
      --out "$OUT/int4gemv22/int4gemv22.json" --budget "${SW_B:-200}" >"$OUT/int4gemv22/sweep.log" 2>&1
    echo "sweep exit $?" >>"$OUT/int4gemv22/sweep.log"; tail -n 3 "$OUT/int4gemv22/sweep.log" | cut -c1-600
    pack int4gemv22
    ;;
  *) echo "usage: gpu_evidence.sh one|two|three|verify|tests|final1|final2|s6a|s6b|s6c|final6|final6b|final6c|s7h|s7a|final7|roof7"; exit 2 ;;
esac
ls -la "$OUT"
