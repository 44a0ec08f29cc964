#!/bin/bash
# harness-bias (~58 s): probes (NVML clocks: old 200 ms matmul burst vs new warm-up; CUDA graph
# trees input copies) in one process; the new timing engine on real shapes, stopped by its time
# budget (or the timeout) and resumed.
export PYTHONUNBUFFERED=1
export PYTHONPATH=src
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/runs"
echo "== probes $(date -u +%T)"
timeout 21 python3 results/probes/gpu_probe.py > "$OUT/probes.jsonl" 2> "$OUT/probes.err"; echo "rc=$?"
cut -c1-1200 "$OUT/probes.jsonl"; tail -3 "$OUT/probes.err"
echo "== bench session 1 (budget 0.1 min) $(date -u +%T)"
timeout 16 python3 -m warpgauge bench --suite results/probes/smoke.toml --max-minutes 0.1 --out "$OUT/runs" > "$OUT/bench1.log" 2>&1; echo "bench1 rc=$?"
tail -25 "$OUT/bench1.log" | cut -c1-300
RUN=$(ls -d "$OUT"/runs/*/ | head -1)
sha256sum "$RUN"/cases/*.json > "$OUT/session1.sha" 2>/dev/null
echo "== bench session 2 (--resume) $(date -u +%T)"
timeout 17 python3 -m warpgauge bench --resume "$RUN" > "$OUT/bench2.log" 2>&1; echo "bench2 rc=$?"
tail -25 "$OUT/bench2.log" | cut -c1-300
echo "session-1 case files unchanged after resume:"; sha256sum -c "$OUT/session1.sha" 2>&1 | tail -8
python3 results/probes/summarize.py "$OUT/runs" > "$OUT/summary.txt" 2>&1; cut -c1-420 "$OUT/summary.txt"
du -sh "$OUT"; date -u +%T
