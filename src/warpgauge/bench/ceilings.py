"""Ceilings measured in the run itself: no peak numbers are typed in anywhere.

Calibrate, select, confirm (docs/methodology.md, "Ceilings"):

1. **Calibration.** Every candidate is timed once (``reps`` back-to-back CUDA event pairs after a
   few untimed calls; the median counts):
   - memory: ``dst.copy_(src)`` at three sizes (``copy_bytes`` / 4, / 2 and ``copy_bytes``) and a
     two-reads-one-write stream (``torch.add(a, b, out=c)``) over ``copy_bytes`` in all. TB/s
     counts bytes read plus bytes written.
   - matmul: ``torch.mm`` of random square matrices for each size in ``mm_sizes`` per dtype
     (FP32 accumulation by cuBLAS). TFLOP/s counts ``2 n^3``.
2. **Selection.** The candidate with the highest calibration rate, per kind (and per dtype).
3. **Confirmation.** The selected candidate is timed ``CONFIRMATION_RUNS`` (7) more times, each a
   fresh median of ``reps`` samples. The ceiling is the median of the seven medians; their range
   (minimum, maximum) is reported with it.

``ceilings.json`` keeps every calibration measurement and, for each selected candidate, one
confirmation measurement whose ``device_time`` summarizes the seven run medians (so its TB/s or
TFLOP/s is the ceiling) with each run in ``extra.runs``. ``run.json``'s ``ceilings`` holds the
summary: ``copy_tbps``, ``copy_tbps_range``, ``mm_tflops``, ``mm_tflops_range``.
"""

from __future__ import annotations

from collections.abc import Callable

from .stats import summarize
from .timing import Backend

CONFIRMATION_RUNS = 7
MIN_COPY_BYTES = 64 << 20


def _time(backend: Backend, fn, n: int, warmup: int = 3) -> list[float]:
    for _ in range(warmup):
        fn()
    backend.sync()
    ev = backend.events(2 * n)
    for i in range(n):
        backend.record(ev[2 * i])
        fn()
        backend.record(ev[2 * i + 1])
    backend.sync()
    return [backend.elapsed_us(ev[2 * i], ev[2 * i + 1]) for i in range(n)]


def memory_candidates(copy_bytes: int) -> list[tuple[str, int, int, str]]:
    """(name, bytes moved per call, allocation in bytes, kind of kernel) of each memory
    candidate: three copy sizes and one 2-reads-1-write stream."""
    top = max(MIN_COPY_BYTES, copy_bytes)
    sizes = sorted({max(MIN_COPY_BYTES, top // 4), max(MIN_COPY_BYTES, top // 2), top})
    out = [(f"copy_{s >> 20}MiB", 2 * s, s, "copy") for s in sizes]
    third = max(MIN_COPY_BYTES, top // 3) // 16 * 16
    out.append((f"stream2r1w_{3 * third >> 20}MiB", 3 * third, third, "add"))
    return out


def _memory_fn(backend: Backend, kind: str, nbytes: int) -> tuple[Callable[[], None], list]:
    import torch

    dev = backend.device
    if kind == "copy":
        src = torch.empty(nbytes, dtype=torch.uint8, device=dev).fill_(1)
        dst = torch.empty_like(src)
        return (lambda: dst.copy_(src)), [src, dst]
    n = nbytes // 2
    a = torch.ones(n, dtype=torch.float16, device=dev)
    b = torch.ones(n, dtype=torch.float16, device=dev)
    c = torch.empty_like(a)
    return (lambda: torch.add(a, b, out=c)), [a, b, c]


def rate(amount: float, us: float) -> float:
    """Bytes or FLOPs per microsecond / 1e6: TB/s or TFLOP/s (the one formula used here)."""
    return amount / us / 1e6


def _measurement(name, kind, dtype, shape, work, samples, method, extra) -> dict:
    st = summarize(samples)
    med = st["median_us"]
    return {
        "name": name,
        "kind": kind,
        "dtype": dtype,
        "shape": shape,
        "work": work,
        "device_time": st,
        "tbps": rate(work["bytes"], med) if kind == "copy" else None,
        "tflops": rate(work["flops"], med) if kind == "mm" else None,
        "method": method,
        "extra": extra,
    }


def _confirm(backend: Backend, fn, reps: int, runs: int) -> tuple[list[float], list[dict]]:
    """``runs`` fresh medians of ``reps`` samples each."""
    medians, records = [], []
    for i in range(runs):
        xs = _time(backend, fn, reps, warmup=1)
        st = summarize(xs)
        medians.append(st["median_us"])
        records.append({"run": i, "median_us": st["median_us"], "min_us": st["min_us"],
                        "max_us": st["max_us"], "n": st["n"]})  # fmt: skip
    return medians, records


def measure_ceilings(
    backend: Backend,
    dtypes,
    copy_bytes: int,
    mm_sizes,
    reps: int = 10,
    runs: int = CONFIRMATION_RUNS,
) -> dict:
    """Returns {"summary": run.json ceilings, "measurements": ceilings.json measurements}."""
    import torch

    from .providers import DTYPE_BY_NAME

    measurements: list[dict] = []
    ev_method = f"{reps} back-to-back CUDA event pairs after untimed calls"

    # ---- memory
    calib = []
    for name, moved, alloc, kind in memory_candidates(copy_bytes):
        fn, keep = _memory_fn(backend, kind, alloc)
        xs = _time(backend, fn, reps)
        what = ("dst.copy_(src) between two device buffers" if kind == "copy"
                else "torch.add(a, b, out=c) over three FP16 buffers")  # fmt: skip
        m = _measurement(name, "copy", None, {"bytes": alloc}, {"bytes": moved, "flops": 0}, xs,
                         f"calibration: {what}; bytes read + written; {ev_method}",
                         {"role": "calibration", "kernel": kind})  # fmt: skip
        measurements.append(m)
        calib.append((m["tbps"], name, moved, alloc, kind, what))
        del fn, keep
        torch.cuda.empty_cache()
    best = max(calib)
    _, name, moved, alloc, kind, what = best
    fn, keep = _memory_fn(backend, kind, alloc)
    medians, records = _confirm(backend, fn, reps, runs)
    del fn, keep
    torch.cuda.empty_cache()
    conf = _measurement(
        f"{name}_confirmed", "copy", None, {"bytes": alloc}, {"bytes": moved, "flops": 0}, medians,
        f"confirmation: {what}, the best calibration candidate; {runs} runs, each the median of "
        f"{ev_method}; device_time summarizes the {runs} run medians",
        {"role": "confirmation", "selected": name, "kernel": kind, "runs": records},
    )  # fmt: skip
    measurements.append(conf)
    rates = [rate(moved, m) for m in medians]
    copy_tbps = conf["tbps"]
    copy_range = [min(rates), max(rates)]

    # ---- matmul
    mm_tflops: dict[str, float] = {}
    mm_range: dict[str, list[float]] = {}
    dev = backend.device
    for dname in dtypes:
        dtype = DTYPE_BY_NAME[dname]
        if dtype == torch.float32:
            continue
        cands = []
        for n in mm_sizes:
            g = torch.Generator(device=dev).manual_seed(n)
            a = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
            b = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
            xs = _time(backend, lambda a=a, b=b: torch.mm(a, b), max(5, reps // 2))
            del a, b
            work = {"bytes": 3 * n * n * dtype.itemsize, "flops": 2 * n**3}
            m = _measurement(f"mm_{dname}_{n}", "mm", dname, {"M": n, "N": n, "K": n}, work, xs,
                             "calibration: torch.mm (cuBLAS) of random square matrices; "
                             f"{ev_method}", {"role": "calibration"})  # fmt: skip
            measurements.append(m)
            cands.append((m["tflops"], n, work))
        if not cands:
            continue
        _, n, work = max(cands)
        g = torch.Generator(device=dev).manual_seed(n)
        a = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
        b = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
        medians, records = _confirm(
            backend, lambda a=a, b=b: torch.mm(a, b), max(5, reps // 2), runs
        )
        del a, b
        conf = _measurement(
            f"mm_{dname}_{n}_confirmed", "mm", dname, {"M": n, "N": n, "K": n}, work, medians,
            f"confirmation: torch.mm at {n}, the best calibration size; {runs} runs, each a "
            f"median; device_time summarizes the {runs} run medians",
            {"role": "confirmation", "selected": f"mm_{dname}_{n}", "runs": records},
        )  # fmt: skip
        measurements.append(conf)
        mm_tflops[dname] = conf["tflops"]
        rates = [rate(work["flops"], m) for m in medians]
        mm_range[dname] = [min(rates), max(rates)]
    torch.cuda.empty_cache()
    summary = {
        "copy_tbps": copy_tbps,
        "copy_bytes": int(alloc),
        "mm_tflops": mm_tflops,
        "copy_tbps_range": copy_range,
        "mm_tflops_range": mm_range,
        "method": (
            "measured in this run (ceilings.json): candidates calibrated (device copies at three "
            "sizes and a 2-reads-1-write stream; square torch.mm per size and dtype), the best "
            f"selected, then the median of {runs} confirmation runs; range = their min and max"
        ),
    }
    return {"summary": summary, "measurements": measurements}
