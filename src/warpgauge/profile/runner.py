"""The process Nsight Compute profiles: ``python -m warpgauge.profile.runner --targets A,B --plan P``.

One target at a time:

1. builds it (inputs on the GPU) and calls it twice, so compilation and autotuning happen before
   anything is profiled (ncu runs with ``--profile-from-start off``);
2. ``cudaProfilerStart``, an NVTX range ``wg:<target name>`` around one call of the target,
   synchronize, ``cudaProfilerStop``. ncu (``--nvtx``) writes the range into every kernel's row,
   so kernels are attributed to their target whatever their names (cuBLAS and tinygemm kernels
   included). With ``--marker`` a one-program marker kernel on a grid of ``i + 1`` programs opens
   each range too, for an ncu that does not report NVTX ranges;
3. frees the target's tensors before the next one is built.

Finally writes ``P`` (JSON): per target, its index, name, whether it was built and launched, and
the launch plan it used.

Nothing here changes clocks or power; it never calls NVML at all.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

MARKER_NAME = "_wg_profile_marker"
NVTX_PREFIX = "wg:"  # each profiled call sits in an NVTX range "wg:<target name>"


def _marker_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _wg_profile_marker(ptr):
        pid = tl.program_id(0)
        tl.store(ptr + pid, pid)

    return _wg_profile_marker


def run(names: list[str], plan_path: str | None, dtype: str = "bfloat16", warm_only=False,
        marker: bool = False) -> int:  # fmt: skip
    """Build, warm and (unless ``warm_only``) profile-launch ``names``, one target at a time: its
    inputs are freed before the next is built, so ncu's kernel replay saves and restores only the
    current target's memory. ``warm_only`` runs outside ncu to fill Triton's on-disk cache."""
    import gc

    import torch

    from .targets import all_targets

    device = torch.device("cuda")
    known = {t.name: t for t in all_targets(dtype)}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"runner: unknown target names {unknown}")
    targets = [known[n] for n in names]
    mark = _marker_kernel() if marker else None
    scratch = torch.zeros(len(targets) + 1, dtype=torch.int32, device=device)
    if mark is not None:
        mark[(1,)](scratch)  # compile the marker outside the profiled ranges
    entries = []
    for i, t in enumerate(targets):
        entry = {"index": i, "name": t.name, "built": False, "launched": False, "error": None}
        entries.append(entry)
        t0 = time.perf_counter()
        try:
            fn = t.build(device)
            fn()
            fn()
            torch.cuda.synchronize()
            entry["built"] = True
            entry["plan"] = getattr(fn, "plan", None)
        except Exception as e:  # a target that cannot run here is recorded, not fatal
            entry["error"] = f"{type(e).__name__}: {e}"
            traceback.print_exc(file=sys.stderr)
            fn = None
        entry["setup_s"] = time.perf_counter() - t0
        if fn is not None and not warm_only:
            torch.cuda.profiler.start()
            torch.cuda.nvtx.range_push(f"{NVTX_PREFIX}{t.name}")
            if mark is not None:
                mark[(i + 1,)](scratch)
            fn()
            torch.cuda.nvtx.range_pop()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            entry["launched"] = True
            entry["profile_s"] = time.perf_counter() - t0 - entry["setup_s"]
            print(f"[runner] {t.name}: setup {entry['setup_s']:.1f} s, profiled in "
                  f"{entry['profile_s']:.1f} s", flush=True)  # fmt: skip
        fn = None
        gc.collect()
        torch.cuda.empty_cache()
    if warm_only:
        print(f"[runner] warmed {sum(e['built'] for e in entries)} of {len(entries)}", flush=True)
        return 0
    with open(plan_path, "w", encoding="utf-8") as f:
        json.dump({"dtype": dtype, "marker": MARKER_NAME if marker else None,
                   "nvtx_prefix": NVTX_PREFIX, "targets": entries}, f, indent=1)  # fmt: skip
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m warpgauge.profile.runner")
    ap.add_argument("--targets", default="", help="comma-separated exact target names")
    ap.add_argument("--plan", help="where to write the launch plan (JSON)")
    ap.add_argument("--warm-only", action="store_true", help="compile and warm, profile nothing")
    ap.add_argument("--marker", action="store_true", help="also launch the marker kernel")
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args(argv)
    names = [n for n in a.targets.split(",") if n]
    if not a.warm_only and not a.plan:
        ap.error("--plan is required unless --warm-only")
    return run(names, a.plan, a.dtype, a.warm_only, a.marker)


if __name__ == "__main__":
    sys.exit(main())
