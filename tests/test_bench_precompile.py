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


class _Spec:
    def __init__(self, providers):
        self.providers = providers

    def provider(self, name):
        for p in self.providers:
            if p.name == name:
                return p
        raise KeyError(name)


class _Prov:
    def __init__(self, name, reason=None, fail=False):
        self.name, self.reason, self.fail, self.calls = name, reason, fail, 0

    def available(self, ctx):
        return self.reason

    def build(self, inputs, ctx):
        if self.fail:
            raise RuntimeError("no kernel for this shape")
        prov = self

        class B:
            def fn(self):
                prov.calls += 1

        return B()


def test_a_worker_reports_unknown_absent_and_failing_providers_and_goes_on():
    ok, absent, bad = _Prov("ok"), _Prov("absent", reason="not here"), _Prov("bad", fail=True)
    spec = _Spec([ok, absent, bad])
    syncs = []
    fmt = lambda e: f"{type(e).__name__}: {e}"  # noqa: E731
    run = lambda name: precompile.build_one(spec, name, None, object(), None, fmt,  # noqa: E731
                                            lambda: syncs.append(1))  # fmt: skip
    assert run("ok") == ("ok", None) and ok.calls == 2 and syncs == [1]
    assert run("absent") == ("absent", "not here")
    status, error = run("bad")
    assert status == "error" and "no kernel for this shape" in error
    status, error = run("looped_8192")  # a name of another group's narrowed spec
    assert status == "absent" and "looped_8192" in error
    assert precompile.build_one(spec, "ok", None, None, "RuntimeError: inputs", fmt, list) == (
        "error", "RuntimeError: inputs")  # fmt: skip


def test_plans_jobs_name_providers_their_narrowed_spec_lacks():
    """Why build_one treats an unknown name as absent: a plans job carries the union of every
    cell's forced plans, and the worker's spec (narrowed to the job's cell) has only its own."""
    from warpgauge.bench.modes import plans as plans_mode
    from warpgauge.bench.modes import specs_for
    from warpgauge.bench.suite import Suite

    suite = load_suite("plans", ops=["softmax"], lanes=["cold"])
    ops = specs_for(suite, sm_count=132)
    jobs = precompile.plan_jobs(suite, list(suite.groups), ops)
    job = next(j for j in jobs if j["shape"] == {"rows": 1, "width": 2880})
    narrowed = specs_for(Suite.from_config(job["config"]), sm_count=132)["softmax"]
    have = {p.name for p in narrowed.providers}
    lacking = [n for n in job["providers"] if n not in have]
    assert lacking and set(plans_mode.candidates(1, 2880, 132, "softmax")) <= have
