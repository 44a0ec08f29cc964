"""Compile ahead, in parallel, before anything is measured.

``torch.compile`` lowers each graph in one Python thread, and max-autotune adds template and
coordinate-descent benchmarking: about 80 (operator, dtype, shape) groups x 3 modes compiled one
after another would not fit the 9-minute budget. So before measuring, worker processes (spawned,
one CUDA context each) build every provider marked ``precompile`` (the compile lanes, warpgauge's
Triton kernels, Liger, gemlite) on the same seeded inputs and call it once. That fills the on-disk
caches (Inductor's FX graph and autotune caches, Triton's kernel cache), and the measuring process
then compiles the same functions as cache hits. Nothing is timed while workers run; the main
process waits.

GPU benchmarking inside Inductor's autotuning is serialized across workers with a file lock
(``torch._inductor.runtime.benchmarking.set_gpu_benchmark_lock_context`` where it exists, else a
wrapper around the benchmarker), so autotuning decisions are not made on a GPU shared with other
benchmarks. Each worker compiles with ``compile_threads = 1``: the parallelism is the workers.

What a worker measured (seconds to build + first call, or its error) is recorded in each
provider's ``extra.precompile``; the provider's ``setup_s`` is what the measuring process spent.
If a worker fails or the phase runs out of its share of the budget, the measuring process simply
compiles what is missing itself.
"""

from __future__ import annotations

import contextlib
import os
import queue
import tempfile
import threading
import time
from pathlib import Path


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 4


def plan_jobs(suite, groups, ops) -> list[dict]:
    from .modes import job_config

    jobs = []
    for g in groups:
        spec = ops[g.op]
        names = [p.name for p in spec.providers if p.precompile]
        if not names:
            continue
        size = 1
        for v in g.shape.values():
            size *= max(1, v)
        jobs.append({
            "op": g.op, "dtype": g.dtype, "shape": g.shape, "key": g.key,
            "settings": suite.settings_for(g.op), "seed": g.seed(suite.seed), "providers": names,
            # relative cost (the registry's precompile_weight): the slow ones start first
            "weight": getattr(spec, "precompile_weight", 1.0) * (1.0 + size / 2**28),
            "config": job_config(suite, g),  # the worker builds the same mode's providers
        })  # fmt: skip
    jobs.sort(key=lambda j: -j["weight"])
    return jobs


def run_precompile(
    suite, groups, budget_s: float, ui, ops, device_index: int = 0, worker=None
) -> dict:
    """Run the workers; returns {(group key, provider name): {"seconds", "error", "status"}}."""
    import multiprocessing as mp

    jobs = plan_jobs(suite, groups, ops)
    if not jobs or budget_s <= 1.0:
        return {}
    n_workers = min(suite.compile.precompile_workers, len(jobs), max(1, _cores() - 2))
    if n_workers < 1:
        return {}
    ctx = mp.get_context("spawn")
    job_q, res_q = ctx.Queue(), ctx.Queue()
    for job in jobs:
        job_q.put(job)
    for _ in range(n_workers):
        job_q.put(None)
    log_dir = Path(tempfile.mkdtemp(prefix="warpgauge-precompile-"))
    lock_path = str(log_dir / "gpu-benchmark.lock")
    procs = []
    for i in range(n_workers):
        p = ctx.Process(
            target=worker or _worker,
            args=(job_q, res_q, lock_path, list(suite.compile.modes), device_index, str(log_dir / f"worker{i}.log")),
            daemon=True,
        )  # fmt: skip
        p.start()
        procs.append(p)
    total = sum(len(j["providers"]) for j in jobs)
    ui.info(
        f"precompiling {total} provider build(s) of {len(jobs)} group(s) in {n_workers} worker process(es) (budget {budget_s:.0f} s; logs {log_dir})"
    )
    results: dict = {}
    t0 = time.perf_counter()
    deadline = t0 + budget_s
    last_note = t0
    try:
        while len(results) < total:
            now = time.perf_counter()
            if now > deadline:
                ui.info(
                    f"precompile: budget spent after {now - t0:.0f} s; {total - len(results)} build(s) left to the measuring process"
                )
                break
            if not any(p.is_alive() for p in procs) and res_q.empty():
                ui.info(
                    f"precompile: workers exited with {total - len(results)} build(s) not reported (see {log_dir})"
                )
                break
            try:
                r = res_q.get(timeout=0.5)
            except queue.Empty:
                continue
            results[(r["key"], r["provider"])] = {k: r[k] for k in ("status", "seconds", "error")}
            if time.perf_counter() - last_note > 15.0:
                last_note = time.perf_counter()
                ui.info(f"precompile: {len(results)}/{total} done after {last_note - t0:.0f} s")
    finally:
        for p in procs:
            p.join(timeout=0.2 if len(results) < total else 10.0)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=2.0)
    errors = [(k, r) for k, r in results.items() if r["status"] == "error"]
    ui.info(
        f"precompile: {len(results)}/{total} build(s) in {time.perf_counter() - t0:.1f} s "
        f"({len(errors)} error(s))"
    )
    for (key, name), r in errors[:3]:  # the worker logs stay on this machine: show a sample
        ui.info(f"  precompile error {key} {name}: {(r['error'] or '').splitlines()[0][:300]}")
    return results


# ------------------------------------------------------------------------------------ worker


def _gpu_lock_factory(path: str):
    """A re-entrant (per thread) exclusive file lock, shared by all workers."""
    import fcntl

    local = threading.local()

    @contextlib.contextmanager
    def lock():
        depth = getattr(local, "depth", 0)
        if depth == 0:
            local.f = open(path, "a")  # noqa: SIM115 - held across the yield
            fcntl.flock(local.f, fcntl.LOCK_EX)
        local.depth = depth + 1
        try:
            yield
        finally:
            local.depth -= 1
            if local.depth == 0:
                fcntl.flock(local.f, fcntl.LOCK_UN)
                local.f.close()

    return lock


def _install_gpu_lock(path: str) -> str:
    try:
        from torch._inductor.runtime import benchmarking as B

        lock = _gpu_lock_factory(path)
        if hasattr(B, "set_gpu_benchmark_lock_context"):
            B.set_gpu_benchmark_lock_context(lock)
            return "set_gpu_benchmark_lock_context"
        bm = B.benchmarker
        original = bm.benchmark_gpu

        def locked(*args, **kwargs):
            with lock():
                return original(*args, **kwargs)

        bm.benchmark_gpu = locked
        return "wrapped benchmarker.benchmark_gpu"
    except Exception as e:  # an older/newer Inductor: compile anyway, unlocked
        return f"no lock ({type(e).__name__}: {e})"


def build_one(spec, name, ctx, inputs, input_error, format_error, sync) -> tuple[str, str | None]:
    """Build provider ``name`` of ``spec`` on ``inputs`` and call it twice; (status, error).

    The job names the providers of the measuring process's spec, which is the union over every
    group (the plans mode's forced plans differ per cell); the worker's spec is narrowed to the
    job's group, so a name it lacks is absent here, not a reason to stop the worker (that
    stopped every worker of the first plans grid after one build each)."""
    try:
        p = spec.provider(name)
    except KeyError:
        return "absent", f"not a provider of this group ({name!r})"
    try:
        reason = p.available(ctx)
        if reason:
            return "absent", reason
        if input_error:
            return "error", input_error
        built = p.build(inputs, ctx)
        built.fn()
        built.fn()  # a second call: cudagraph-wrapped modes record on a later call
        sync()
        del built
    except Exception as e:
        return "error", format_error(e)
    return "ok", None


def _worker(job_q, res_q, lock_path, modes, device_index, log_path):  # pragma: no cover - GPU only
    import sys

    log = open(log_path, "w", buffering=1)  # noqa: SIM115 - the worker's stdout/stderr
    sys.stdout = sys.stderr = log
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    import torch
    import torch._inductor.config as inductor_config

    from .errors import format_error
    from .providers import context_for, registry

    inductor_config.compile_threads = 1
    torch.cuda.set_device(device_index)
    print(f"gpu benchmark lock: {_install_gpu_lock(lock_path)}", flush=True)
    ops = registry(modes)
    device = torch.device("cuda", device_index)
    while True:
        job = job_q.get()
        if job is None:
            break
        if "config" in job:  # the run's mode, plug-ins and selection, narrowed to this group
            from .modes import specs_for_config

            ops = specs_for_config(job["config"], device=device)
        spec = ops[job["op"]]
        ctx = context_for(job["op"], job["dtype"], job["shape"], job["settings"], device)
        inputs = None
        try:
            gen = torch.Generator(device=device).manual_seed(job["seed"])
            inputs = spec.make_inputs(ctx, gen)
            input_error = None
        except Exception as e:
            input_error = format_error(e)
        for name in job["providers"]:
            t0 = time.perf_counter()
            status, error = build_one(spec, name, ctx, inputs, input_error, format_error,
                                      lambda: torch.cuda.synchronize(device))  # fmt: skip
            print(f"{job['key']} {name}: {status} in {time.perf_counter() - t0:.2f} s", flush=True)
            res_q.put({"key": job["key"], "provider": name, "status": status,
                       "seconds": time.perf_counter() - t0, "error": error})  # fmt: skip
        inputs = None
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    log.close()
