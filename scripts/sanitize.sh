#!/usr/bin/env bash
# compute-sanitizer over every operator, forward and backward, on every plan
# (src/warpgauge/tools/sanitize_driver.py prints each operator and case as it runs).
#
#   scripts/sanitize.sh OUT_DIR [TOOLS...]     TOOLS: memcheck racecheck initcheck (default all)
#
# memcheck runs the "small" shapes; racecheck and initcheck the "tiny" ones (they are slower).
# PYTORCH_NO_CUDA_MEMORY_CACHING=1 gives every tensor its own cudaMalloc, so an access past the
# end of a tensor lands outside an allocation and memcheck sees it (the caching allocator's pools
# would hide it). Each tool gets SANITIZE_TIMEOUT seconds (default 300). SANITIZE_ONLY=op,op and
# SANITIZE_SHARD=i/n pick a subset (to run several sanitizer processes side by side). Exit status:
# non-zero if any tool reported an error or a case failed.
set -uo pipefail
out=${1:?usage: scripts/sanitize.sh OUT_DIR [memcheck racecheck initcheck]}
shift
tools=${*:-memcheck racecheck initcheck}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
  WARPGAUGE_POISON_OUTPUTS=1 PYTHONUNBUFFERED=1
san=${COMPUTE_SANITIZER:-compute-sanitizer}
status=0
for tool in $tools; do
  size=tiny; [ "$tool" = memcheck ] && size=small
  extra=${SANITIZE_ARGS:-}
  [ "$tool" = racecheck ] && extra="$extra --racecheck-report all"
  log="$out/$tool.log"
  echo "== $tool (size $size) -> $log"
  # shellcheck disable=SC2086
  timeout "${SANITIZE_TIMEOUT:-300}" "$san" --tool "$tool" --error-exitcode 97 --print-limit 200 \
    $extra python3 -m warpgauge.tools.sanitize_driver --size "$size" ${SANITIZE_ONLY:+--only "$SANITIZE_ONLY"} \
    ${SANITIZE_SHARD:+--shard "$SANITIZE_SHARD"} \
    >"$log" 2>&1
  rc=$?
  echo "exit $rc" >>"$log"
  summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|cases passed" "$log" | tr '\n' ' ')
  echo "   $tool: exit $rc; $summary"
  [ $rc -ne 0 ] && status=1
done
exit $status
