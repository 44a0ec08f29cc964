"""Ceilings: calibrate candidates, select the best, report the median and range of seven
confirmation runs (CPU: the timer is replaced by synthetic, known samples)."""

from __future__ import annotations

import pytest

from warpgauge import artifacts
from warpgauge.bench import ceilings

from .test_bench_fakes import FakeBackend, FakeClock


def test_calibrate_select_confirm(monkeypatch):
    calls = []
    # per call (in order): calibration of 3 copy sizes and the 2r1w stream, then 7 confirmation
    # runs of the best candidate, then mm: 2 sizes, then 7 confirmations of the best size
    copy_us = {1: 100.0, 2: 160.0, 3: 250.0, 4: 300.0}  # by candidate index
    confirm = [260.0, 250.0, 255.0, 245.0, 270.0, 250.0, 248.0]
    mm_us = [1000.0, 7000.0]
    mm_confirm = [7100.0, 7000.0, 7050.0, 7200.0, 6990.0, 7010.0, 7300.0]
    script = [[copy_us[i]] * 10 for i in (1, 2, 3, 4)] + [[c] * 10 for c in confirm]
    script += [[m] * 5 for m in mm_us] + [[c] * 5 for c in mm_confirm]

    def fake_time(backend, fn, n, warmup=3):
        calls.append(n)
        return script.pop(0)[:n]

    monkeypatch.setattr(ceilings, "_time", fake_time)
    copy_bytes = 256 << 20
    out = ceilings.measure_ceilings(
        FakeBackend(FakeClock()), ["bfloat16"], copy_bytes, (64, 128), reps=10
    )
    assert script == []
    ms = out["measurements"]
    names = [m["name"] for m in ms]
    cands = ceilings.memory_candidates(copy_bytes)
    rates = [moved / us / 1e6 for (_, moved, _, _), us in zip(cands, copy_us.values())]
    best = max(range(4), key=lambda i: rates[i])
    assert names[:4] == [c[0] for c in cands]
    assert names[4] == cands[best][0] + "_confirmed"
    conf = ms[4]
    assert conf["extra"]["role"] == "confirmation" and len(conf["extra"]["runs"]) == 7
    assert conf["device_time"]["median_us"] == 250.0  # median of the seven run medians
    moved = cands[best][1]
    s = out["summary"]
    assert s["copy_tbps"] == pytest.approx(moved / 250.0 / 1e6)
    assert s["copy_tbps_range"] == pytest.approx([moved / 270.0 / 1e6, moved / 245.0 / 1e6])
    # mm: 128^3 at 7000 us beats 64^3 at 1000 us; the ceiling is the median confirmation
    assert names[-1] == "mm_bfloat16_128_confirmed"
    assert s["mm_tflops"]["bfloat16"] == pytest.approx(2 * 128**3 / 7050.0 / 1e6)
    lo, hi = s["mm_tflops_range"]["bfloat16"]
    assert lo == pytest.approx(2 * 128**3 / 7300.0 / 1e6) and hi == pytest.approx(
        2 * 128**3 / 6990.0 / 1e6
    )
    # the artifacts' own rules hold: every rate is work / median; the summary is a measurement
    record = {"schema_version": 1, "kind": "ceilings", "run_id": "r", "created_at": "x",
              "measurements": ms}  # fmt: skip
    run = {"run_id": "r", "ceilings": s}
    assert artifacts.ceilings_problems(record, run) == []
    assert artifacts.schema_errors("ceilings", {**record, "created_at": artifacts.utc_now()}) == []


def test_memory_candidates():
    c = ceilings.memory_candidates(2 << 30)
    assert [x[0] for x in c] == ["copy_512MiB", "copy_1024MiB", "copy_2048MiB",
                                 "stream2r1w_2047MiB"]  # fmt: skip
    assert c[0][1] == 2 * (512 << 20)  # read + write
    assert ceilings.memory_candidates(1 << 20)[0][2] == ceilings.MIN_COPY_BYTES
