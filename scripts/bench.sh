#!/usr/bin/env bash
# Sets up .venv and runs the main job on a CUDA GPU: the full benchmark suite into a new run
# directory under results/, then validates and renders it. Extra arguments go to
# `warpgauge bench` (e.g. --quick, --ops softmax,gemm).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh bench
set +e
.venv/bin/warpgauge bench --out results "$@"
status=$?
set -e
run=$(ls -td results/*/ 2>/dev/null | head -n 1)
if [ -n "$run" ] && [ -f "$run/run.json" ]; then
  .venv/bin/warpgauge validate "$run" || true
  .venv/bin/warpgauge report "$run"
  echo "report: ${run}report/report.html"
fi
exit $status
