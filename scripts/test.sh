#!/usr/bin/env bash
# Sets up .venv and runs the test suite. Without a GPU, kernels run under the Triton
# interpreter (TRITON_INTERPRET=1) and tests/gpu is skipped; on a GPU machine everything runs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev,bench
exec .venv/bin/python -m pytest -q "$@"
