"""The process Nsight Compute profiles: ``python -m warpgauge.profile.runner --targets A,B --plan P``.

1. Builds every selected target (inputs on the GPU) and calls it twice, so compilation and
   autotuning happen before anything is profiled (ncu runs with ``--profile-from-start off``).
2. For target ``i``: ``cudaProfilerStart``, a one-program marker kernel launched on a grid of
   ``i + 1`` programs, one call of the target, synchronize, ``cudaProfilerStop``. The marker's grid
   size in the raw page says which target the kernels after it belong to, whatever their names
   (cuBLAS and tinygemm kernels included).
3. Writes ``P`` (JSON): per target, its index, name and whether it was built and launched.

Nothing here changes clocks or power; it never calls NVML at all.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

MARKER_NAME = "_wg_profile_marker"


def _marker_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _wg_profile_marker(ptr):
        pid = tl.program_id(0)
        tl.store(ptr + pid, pid)

    return _wg_profile_marker


def run(names: list[str], plan_path: str | None, dtype: str = "bfloat16", warm_only=False) -> int:
    """Build, warm and (unless ``warm_only``) profile-launch ``names``. ``warm_only`` runs outside
    ncu to fill Triton's on-disk cache, so the profiled process finds its kernels compiled."""
    import torch

    from .targets import all_targets

    device = torch.device("cuda")
    known = {t.name: t for t in all_targets(dtype)}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"runner: unknown target names {unknown}")
    targets = [known[n] for n in names]
    marker = _marker_kernel()
    scratch = torch.zeros(len(targets) + 1, dtype=torch.int32, device=device)
    marker[(1,)](scratch)  # compile the marker outside the profiled ranges
    entries, calls = [], []
    for i, t in enumerate(targets):
        entry = {"index": i, "name": t.name, "built": False, "launched": False, "error": None}
        t0 = time.perf_counter()
        try:
            fn = t.build(device)
            fn()
            fn()
            torch.cuda.synchronize()
            entry["built"] = True
            entry["plan"] = getattr(fn, "plan", None)
            calls.append((i, fn))
        except Exception as e:  # a target that cannot run here is recorded, not fatal
            entry["error"] = f"{type(e).__name__}: {e}"
            traceback.print_exc(file=sys.stderr)
        entry["setup_s"] = time.perf_counter() - t0
        entries.append(entry)
    if warm_only:
        print(f"[runner] warmed {len(calls)} of {len(targets)} target(s)", flush=True)
        return 0
    for i, fn in calls:
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        torch.cuda.nvtx.range_push(f"wg:{targets[i].name}")
        marker[(i + 1,)](scratch)
        fn()
        torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        entries[i]["launched"] = True
        print(f"[runner] profiled {targets[i].name}", flush=True)
    with open(plan_path, "w", encoding="utf-8") as f:
        json.dump({"dtype": dtype, "marker": MARKER_NAME, "targets": entries}, f, indent=1)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m warpgauge.profile.runner")
    ap.add_argument("--targets", default="", help="comma-separated exact target names")
    ap.add_argument("--plan", help="where to write the launch plan (JSON)")
    ap.add_argument("--warm-only", action="store_true", help="compile and warm, profile nothing")
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args(argv)
    names = [n for n in a.targets.split(",") if n]
    if not a.warm_only and not a.plan:
        ap.error("--plan is required unless --warm-only")
    return run(names, a.plan, a.dtype, a.warm_only)


if __name__ == "__main__":
    sys.exit(main())
