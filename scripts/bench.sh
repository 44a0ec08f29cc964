#!/usr/bin/env bash
# Sets up .venv and runs the main job on a CUDA GPU: the full benchmark suite, then validates
# and renders the run. Extra arguments go to `warpgauge bench` (e.g. --quick).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh bench
out="results/$(date -u +%Y%m%d-%H%M%S)-$(.venv/bin/python -c 'import torch; print(torch.cuda.get_device_name().replace(" ", "-").lower() if torch.cuda.is_available() else "nogpu")')"
.venv/bin/warpgauge bench --out "$out" "$@"
.venv/bin/warpgauge validate "$out"
.venv/bin/warpgauge report "$out"
