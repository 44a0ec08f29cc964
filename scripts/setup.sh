#!/usr/bin/env bash
# Creates .venv (if missing) and installs warpgauge with the given extras into it.
# Usage: scripts/setup.sh [extras]   e.g. scripts/setup.sh dev,bench
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-dev,bench}"
py="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$py" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
# torch first and pinned: a plain 'torch' requirement would pull the newest CUDA build. On a
# CPU-only machine the interpreter runs the kernels; on a GPU machine this is the CUDA build.
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q "torch==2.13.0"
.venv/bin/python -m pip install -q -e ".[${extras}]"
