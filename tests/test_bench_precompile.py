"""The precompile phase's process handling, with stand-in workers (no GPU, no compiler)."""

from __future__ import annotations

import threading
import time

from warpgauge.bench import precompile
from warpgauge.bench.runner import QuietUI
from warpgauge.bench.suite import load_suite


def quick_worker(job_q, res_q, lock_path, modes, device_index, log_path):
    while True:
        job = job_q.get()
        if job is None:
            return
        for name in job["providers"]:
            res_q.put(
                {
                    "key": job["key"],
                    "provider": name,
                    "status": "ok",
                    "seconds": 0.01,
                    "error": None,
                }
            )


def stuck_worker(job_q, res_q, lock_path, modes, device_index, log_path):
    time.sleep(60)


def _suite_and_ops():
    from warpgauge.bench.providers import registry

    return load_suite("default", quick=True, ops=["add"], lanes=["cold"]), registry()


def test_plan_jobs_orders_heavy_first():
    suite = load_suite("default", quick=True)
    from warpgauge.bench.providers import registry

    jobs = precompile.plan_jobs(suite, list(suite.groups), registry())
    assert jobs[0]["op"] == "gemm"
    assert all("compile_max_autotune" in j["providers"] for j in jobs)
    assert all("torch" not in j["providers"] for j in jobs)  # eager providers need no warming
    assert len(jobs) == len(suite.groups)


def test_workers_report_every_build():
    suite, ops = _suite_and_ops()
    suite = suite.with_overrides(precompile_workers=2)
    ui = QuietUI()
    out = precompile.run_precompile(suite, list(suite.groups), 60.0, ui, ops, worker=quick_worker)
    want = {(g.key, p.name) for g in suite.groups for p in ops["add"].providers if p.precompile}
    assert set(out) == want and all(r["status"] == "ok" for r in out.values())


def test_stuck_workers_are_stopped_at_the_budget():
    suite, ops = _suite_and_ops()
    suite = suite.with_overrides(precompile_workers=1)
    ui = QuietUI()
    t0 = time.perf_counter()
    out = precompile.run_precompile(suite, list(suite.groups), 2.0, ui, ops, worker=stuck_worker)
    assert out == {} and time.perf_counter() - t0 < 30
    assert any("budget spent" in line for line in ui.lines)


def test_gpu_lock_is_reentrant_and_exclusive(tmp_path):
    lock = precompile._gpu_lock_factory(str(tmp_path / "lock"))
    with lock(), lock():  # nested entry in one thread does not deadlock
        pass
    order = []

    def other():
        with precompile._gpu_lock_factory(str(tmp_path / "lock"))():
            order.append("other")

    with lock():
        t = threading.Thread(target=other)
        t.start()
        time.sleep(0.2)
        order.append("main")
    t.join(5)
    assert order == ["main", "other"]
