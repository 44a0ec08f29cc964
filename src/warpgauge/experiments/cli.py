"""Dispatch for ``warpgauge experiment``: names -> the module that runs each experiment."""

from __future__ import annotations

import argparse
import importlib
import sys
import time
import traceback
from pathlib import Path

# name -> (module, run function, summary function)
EXPERIMENTS = {
    "clock-ramp": ("clock_ramp", "run", "summary_rows"),
    "specialization": ("specialization", "run", "summary_rows"),
    "warps": ("row_sweeps", "run_warps", "summary_rows"),
    "chunks": ("row_sweeps", "run_chunks", "summary_rows"),
    "gemm-grouping": ("gemm_tiles", "run", "summary_rows"),
    "inductor": ("inductor", "run", "summary_rows"),
    "compile-cost": ("compile_cost", "run", "summary_rows"),
}


def experiment_cli(names: list[str], out: Path, tiny: bool = False) -> int:
    """Run each named experiment (``all`` = every one) and write its artifact under ``out``."""
    if names == ["all"]:
        names = list(EXPERIMENTS)
    unknown = [n for n in names if n not in EXPERIMENTS]
    if unknown:
        print(f"warpgauge experiment: unknown {', '.join(unknown)}; choose from "
              f"{', '.join(EXPERIMENTS)} or all", file=sys.stderr)  # fmt: skip
        return 2
    import torch

    if not torch.cuda.is_available():
        print("warpgauge experiment: needs a CUDA GPU (torch.cuda.is_available() is False)",
              file=sys.stderr)  # fmt: skip
        return 2
    from warpgauge.environment import telemetry_snapshot

    from .common import write

    failed = 0
    for name in names:
        mod_name, run_name, summary_name = EXPERIMENTS[name]
        mod = importlib.import_module(f"warpgauge.experiments.{mod_name}")
        t0 = time.perf_counter()
        before = telemetry_snapshot()
        try:
            rec = getattr(mod, run_name)(tiny=tiny)
        except Exception as e:
            traceback.print_exc()
            print(f"[experiment] {name}: failed: {type(e).__name__}: {e}")
            failed += 1
            continue
        rec = {"tiny": tiny, "elapsed_s": time.perf_counter() - t0,
               "telemetry": {"before": before, "after": telemetry_snapshot()}, **rec}  # fmt: skip
        path = write(out, name, rec)
        print(f"[experiment] {name}: {rec['elapsed_s']:.1f} s -> {path}")
        for line in getattr(mod, summary_name)(rec):
            print(f"  {line}")
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="warpgauge experiment", description=__doc__)
    ap.add_argument("names", nargs="+", help=", ".join(EXPERIMENTS) + ", or all")
    ap.add_argument("--out", type=Path, default=Path("results/experiments"))
    ap.add_argument("--tiny", action="store_true", help="small sizes: a smoke run")
    a = ap.parse_args(argv)
    return experiment_cli(a.names, a.out, tiny=a.tiny)
