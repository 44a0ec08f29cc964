#!/bin/bash
# harness-modes round 3: smoke-test fwd_bwd (rows, gemm, int4), plans, accuracy, host (int4
# autograd path), --repeat + stability, and the plug-in example, each on 1-3 tiny cases (~45 s).
export PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD/src
[ -d /tmp/site ] && export PYTHONPATH=$PYTHONPATH:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
OUT=${OUT:-/tmp/hm-out}; mkdir -p "$OUT/runs"
T=$(mktemp -d)
python3 -c "import jsonschema" 2>/dev/null || echo "NOTE: jsonschema missing" | tee "$OUT/NOTE-no-jsonschema.txt"
common='seed = 2026
dtypes = ["bfloat16"]
max_minutes = 1.0
[ceilings]
copy_bytes = 268435456
mm_sizes = [1024]
[compile]
modes = []
precompile_workers = 0
'
samp='rounds = 2
target_ms = 5.0
min_samples = 5
max_samples = 40
burst_ms = 20.0'
cat > $T/train.toml <<TOML
name = "smoke-train"
mode = "fwd_bwd"
lanes = ["warm"]
$common
[sampling]
$samp
[ops.add_rms_norm]
shapes = ["1024x4096"]
[ops.gemm]
shapes = ["256x384x320"]
[ops.int4_linear]
shapes = ["4x1024x1024"]
TOML
cat > $T/plans.toml <<TOML
name = "smoke-plans"
mode = "plans"
lanes = ["cold"]
$common
[sampling]
$samp
host_share = 0.0
[ops.softmax]
shapes = ["4x32769", "512x65537"]
[ops.add_rms_norm]
shapes = ["64x40000"]
TOML
cat > $T/acc.toml <<TOML
name = "smoke-accuracy"
mode = "accuracy"
lanes = ["warm"]
$common
[sampling]
$samp
host_share = 0.0
[ops.softmax]
shapes = ["32x127", "4x32769"]
[ops.add_rms_norm]
shapes = ["32x127"]
[ops.gemm]
shapes = ["127x255x65"]
TOML
cat > $T/host.toml <<TOML
name = "smoke-host"
mode = "host"
lanes = ["warm"]
$common
[sampling]
$samp
host_share = 0.0
host_calls = 100
[ops.int4_linear]
shapes = ["1x256x256"]
[ops.add_rms_norm]
shapes = ["32x127"]
TOML
cat > $T/rep.toml <<TOML
name = "smoke-repeat"
lanes = ["cold", "warm"]
$common
[sampling]
$samp
[ops.softmax]
shapes = ["1024x1024"]
[ops.add]
shapes = ["16M"]
TOML
run() {  # name, timeout, args...
  local name=$1 t=$2; shift 2
  local t0=$(date +%s)
  timeout $t python3 -m warpgauge bench "$@" > "$OUT/$name.log" 2>&1
  echo "$name exit $? in $(( $(date +%s) - t0 )) s" >> "$OUT/exits.txt"
}
run train 42 --suite $T/train.toml --out "$OUT/runs" &
run plans 42 --suite $T/plans.toml --out "$OUT/runs" &
run accuracy 42 --suite $T/acc.toml --out "$OUT/runs" &
run host 42 --suite $T/host.toml --out "$OUT/runs" &
run repeat 42 --suite $T/rep.toml --repeat 2 --only warpgauge,torch --out "$OUT/rep" &
PYTHONPATH=$PYTHONPATH:$PWD/examples/plugin run plugin 42 --suite examples/plugin/suite.toml \
  --provider my_softmax:register --only warpgauge,torch,my_softmax --shapes '1024x1024' \
  --lanes warm --max-minutes 1 --out "$OUT/runs" &
wait
cat "$OUT/exits.txt"
for d in "$OUT"/runs/*/ "$OUT"/rep/*/; do
  [ -f "$d/run.json" ] && timeout 8 python3 -m warpgauge validate "$d" > "${d%/}.validate.txt" 2>&1
done
P=$(ls -d "$OUT"/runs/*smoke-plans* 2>/dev/null | head -1)
[ -n "$P" ] && timeout 8 python3 -m warpgauge plans-report "$P" > "$OUT/plans-report.md" 2>&1
A=$(ls -d "$OUT"/runs/*smoke-accuracy* 2>/dev/null | head -1)
[ -n "$A" ] && timeout 8 python3 -m warpgauge accuracy-report "$A" > "$OUT/accuracy-report.md" 2>&1
timeout 15 python3 - "$OUT" <<'PY' 2>&1 | tee "$OUT/summary.txt"
import json, sys, pathlib
root = pathlib.Path(sys.argv[1])
for run in sorted(list(root.glob("runs/*/run.json")) + list(root.glob("rep/*/run.json"))):
    r = json.loads(run.read_text())
    print(f"== {run.parent.name} mode={r['config'].get('mode')} status={r['status']}")
    for c in sorted((run.parent / "cases").glob("*.json")):
        c = json.loads(c.read_text())
        for p in c["providers"]:
            if p["status"] == "absent":
                continue
            d = p["device_time"]["median_us"] if p["device_time"] else None
            h = p["host_time"]["median_us"] if p["host_time"] else None
            err = (p["error"] or "").replace("\n", " ")[:160] if p["error"] else ""
            print(f"  {c['case_id'][:34]:34s} {p['name'][:22]:22s} {p['status']:11s} dev {d and round(d,2)} host {h and round(h,1)} {err}")
PY
head -c 1500 "$OUT/plans-report.md"; ls "$OUT/rep"; cat "$OUT"/rep/*stability.md 2>/dev/null | head -8
grep -h "could not\|Traceback\|Error" "$OUT"/*.log | head -10
