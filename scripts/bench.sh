#!/usr/bin/env bash
# Sets up .venv and runs the main job on a CUDA GPU: the full benchmark suite into a new run
# directory under results/, then validates and renders it. Extra arguments go to
# `warpgauge bench` (e.g. --quick, --ops softmax,gemm).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh bench
marker=$(mktemp)
set +e
.venv/bin/warpgauge bench --out results "$@"
status=$?
set -e
run=$(find results -mindepth 1 -maxdepth 1 -type d -newer "$marker" | sort | tail -n 1)
rm -f "$marker"
if [ -n "$run" ] && [ -f "$run/run.json" ]; then
  run="$run/"
  .venv/bin/warpgauge validate "$run" || true
  .venv/bin/warpgauge report "$run" || true  # non-zero on an incomplete run: bench's status is the one returned
  echo "report: ${run}report/report.html"
fi
exit $status
