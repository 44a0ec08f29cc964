"""Ceilings measured in the run itself: no peak numbers are typed in anywhere.

- copy: ``dst.copy_(src)`` of ``copy_bytes`` (2 GiB by default) between two device buffers;
  TB/s counts bytes read plus bytes written. It is the denominator of "% of copy ceiling".
- mm: ``torch.mm`` of square matrices per dtype (4096^3 and 8192^3 by default, FP32 accumulation
  by cuBLAS); the best size is the dtype's TFLOP/s ceiling.

Each is timed with back-to-back CUDA events after a few untimed calls; the samples go to
``ceilings.json``, the summary to ``run.json``'s ``ceilings``.
"""

from __future__ import annotations

from .stats import summarize
from .timing import Backend


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


def _time_copy(backend: Backend, copy_bytes: int, reps: int) -> list[float]:
    import torch

    src = torch.empty(copy_bytes, dtype=torch.uint8, device=backend.device).fill_(1)
    dst = torch.empty_like(src)
    return _time(backend, lambda: dst.copy_(src), reps)


def measure_ceilings(backend: Backend, dtypes, copy_bytes: int, mm_sizes, reps: int = 20) -> dict:
    """Returns {"summary": run.json ceilings, "measurements": ceilings.json measurements}."""
    import torch

    from .providers import DTYPE_BY_NAME

    measurements = []
    dev = backend.device
    samples = _time_copy(backend, copy_bytes, reps)
    stats = summarize(samples)
    moved = 2 * copy_bytes
    copy_tbps = moved / stats["median_us"] / 1e6
    measurements.append({
        "name": f"copy_{copy_bytes >> 20}MiB",
        "kind": "copy",
        "dtype": None,
        "shape": {"bytes": copy_bytes},
        "work": {"bytes": moved, "flops": 0},
        "device_time": stats,
        "tbps": copy_tbps,
        "tflops": None,
        "method": "dst.copy_(src) between two device buffers; bytes read + written; "
                  f"{reps} back-to-back CUDA event pairs after 3 untimed copies",
    })  # fmt: skip
    torch.cuda.empty_cache()

    mm_tflops: dict[str, float] = {}
    for name in dtypes:
        dtype = DTYPE_BY_NAME[name]
        if dtype == torch.float32:
            continue
        best = None
        for n in mm_sizes:
            g = torch.Generator(device=dev).manual_seed(n)
            a = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
            b = torch.randn(n, n, device=dev, dtype=dtype, generator=g)
            samples = _time(backend, lambda a=a, b=b: torch.mm(a, b), max(5, reps // 2))
            del a, b
            stats = summarize(samples)
            flops = 2 * n**3
            tflops = flops / stats["median_us"] / 1e6
            measurements.append({
                "name": f"mm_{name}_{n}",
                "kind": "mm",
                "dtype": name,
                "shape": {"M": n, "N": n, "K": n},
                "work": {"bytes": 3 * n * n * dtype.itemsize, "flops": flops},
                "device_time": stats,
                "tbps": None,
                "tflops": tflops,
                "method": "torch.mm (cuBLAS) of random square matrices; back-to-back CUDA "
                          "event pairs after 3 untimed calls",
            })  # fmt: skip
            best = tflops if best is None else max(best, tflops)
        if best is not None:
            mm_tflops[name] = best
    torch.cuda.empty_cache()
    summary = {
        "copy_tbps": copy_tbps,
        "copy_bytes": copy_bytes,
        "mm_tflops": mm_tflops,
        "method": "measured in this run (ceilings.json): device-to-device copy, bytes read + "
        "written; best square torch.mm per dtype",
    }
    return {"summary": summary, "measurements": measurements}
