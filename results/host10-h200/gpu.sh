#!/bin/bash
# host10: GPU tests of the host path, then per-part host time of the host suite's calls on the
# H200, this branch ("after") against main's a38b9e5 versions of the files host10 changed
# ("before": results/host10-h200/before-src/ overlaid on a copy of src/), same process order.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/host10-out}; mkdir -p "$OUT"
echo "== host10 gpu.sh $(date -u +%T) at $(cat .git-commit 2>/dev/null || echo archive)"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | head -2
OPS=gemm,int4_linear,add_rms_norm,softmax,add,row_sum
BEFORE=/tmp/host10-before; rm -rf "$BEFORE"; mkdir -p "$BEFORE"; cp -r src "$BEFORE/src"
(cd results/host10-h200/before-src && find . -name '*.txt') | while read -r f; do
  cp "results/host10-h200/before-src/$f" "$BEFORE/src/${f%.txt}"; done
echo "== pytest tests/gpu/test_host_path_gpu.py $(date -u +%T)"
PYTHONPATH=src timeout 25 python3 -m pytest -q -x tests/gpu/test_host_path_gpu.py >"$OUT/gputest.log" 2>&1
echo "exit $?" >>"$OUT/gputest.log"; tail -3 "$OUT/gputest.log"
echo "== host_parts after $(date -u +%T)"
PYTHONPATH=src timeout 9 python3 scripts/host_parts.py --ops $OPS --calls 300 --rounds 5 --out "$OUT/parts_after.json" 2>&1 | tee "$OUT/parts_after.log"
echo "== host_parts before $(date -u +%T)"
PYTHONPATH="$BEFORE/src" timeout 6 python3 scripts/host_parts.py --ops $OPS --calls 300 --rounds 5 --out "$OUT/parts_before.json" 2>&1 | tee "$OUT/parts_before.log"
echo "== summary $(date -u +%T)"
python3 - "$OUT" <<'PY'
import json, sys, os
d = sys.argv[1]
def load(n):
    p = os.path.join(d, n)
    return json.load(open(p))["ops"] if os.path.exists(p) else {}
a, b = load("parts_after.json"), load("parts_before.json")
print(f"{'op':13s} {'fwd before':>10s} {'after':>7s} {'autograd before':>15s} {'after':>7s} {'PyTorch':>8s}")
for op in a:
    g = lambda r, k: r.get(op, {}).get(k, {}).get("median_us", float("nan"))
    print(f"{op:13s} {g(b,'public'):10.2f} {g(a,'public'):7.2f} {g(b,'public, autograd'):15.2f} {g(a,'public, autograd'):7.2f} {g(a,'PyTorch'):8.2f}")
PY
