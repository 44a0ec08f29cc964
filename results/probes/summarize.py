"""Print what the GPU smoke run shows: ceilings (calibration, confirmation median and range),
per case the warm-up, per-round clocks and leaders, per provider the noise achieved, the stop
reason, calls per graph, throttled samples, the checks after timing and the ceiling flag."""

import glob
import json
import sys
from pathlib import Path

for f in sorted(glob.glob(sys.argv[1] + "/*/run.json")):
    r = json.loads(Path(f).read_text())
    print("run", r["run_id"], r["status"], "sessions:", len(r["extra"].get("sessions", [])),
          "resumes:", len(r["extra"].get("resumes", [])))  # fmt: skip
    print("ceilings:", json.dumps(r["ceilings"]))
    for s in r["extra"].get("sessions", []):
        print("  session:", json.dumps(s)[:300])
    for k in ("warpgauge_failed_gate", "above_ceiling", "hung"):
        print(f"  {k}:", r["extra"].get(k))
for f in sorted(glob.glob(sys.argv[1] + "/*/ceilings.json")):
    c = json.loads(Path(f).read_text())
    print("ceilings warm-up:", json.dumps(c.get("extra", {}).get("warmup")))
    for m in c["measurements"]:
        rate = m["tbps"] if m["kind"] == "copy" else m["tflops"]
        runs = [round(x["median_us"], 1) for x in m.get("extra", {}).get("runs", [])]
        print(
            f"  {m['name']:28s} {m.get('extra', {}).get('role', '-'):12s} {rate:8.3f} med {m['device_time']['median_us']:.1f} us {runs}"
        )
for f in sorted(glob.glob(sys.argv[1] + "/*/cases/*.json")):
    c = json.loads(Path(f).read_text())
    w = c["warmup"]
    print(
        c["case_id"],
        "created",
        c["created_at"],
        "warmup:",
        json.dumps(
            {k: w.get(k) for k in ("burst_ms", "skipped", "pieces", "ready", "settle_ms", "clocks")}
        ),
    )
    print(
        "  capture warm-up:",
        json.dumps(
            {
                k: (c["extra"].get("capture_warmup") or {}).get(k)
                for k in ("burst_ms", "skipped", "ready")
            }
        ),
    )
    print(
        "  rounds (leader, sm_mhz, reasons):",
        [
            (r["order"][0], (r["clock"] or {}).get("sm_mhz"), (r["clock"] or {}).get("reasons"))
            for r in c["extra"]["rounds"]
        ],
    )
    for p in c["providers"]:
        e = p.get("extra") or {}
        if p["status"] == "ok":
            n = e["noise"]
            hw = e.get("hidden_work_check") or {}
            sms = sorted({b["sm_mhz"] for b in e["batches"] if b["sm_mhz"]})
            print(f"  {p['name']:16s} {p['device_time']['median_us']:9.2f} us n={n['n']:3d} "
                  f"rse={n['rse_median']:.4f} stop={n['stopped']:11s} calls={e['calls_per_replay']:2d} "
                  f"replay_us={e.get('replay_us') or 0:8.2f} est_us={e.get('est_us') or 0:8.2f} "
                  f"throttled={e['throttled']['n']} sm={sms[:1]}..{sms[-1:]} regate={e.get('regate', {}).get('ok')} "
                  f"wall/host={hw.get('wall_us_per_call', 0):.1f}/{hw.get('host_us_per_call', 0):.1f} "
                  f"pct_copy={p['derived']['pct_copy_ceiling'] and round(p['derived']['pct_copy_ceiling'], 1)} "
                  f"above={'Y' if e.get('above_ceiling') else '-'}")  # fmt: skip
        else:
            print(f"  {p['name']:16s} {p['status']}: {(p['error'] or '')[:200]}")
