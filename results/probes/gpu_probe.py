"""One process (one CUDA start-up) for both GPU probes: clocks, then CUDA graph trees."""

import runpy
import sys

sys.argv = ["clock_probe"]
runpy.run_path("results/probes/clock_probe.py", run_name="__main__")
sys.argv = ["cudagraph_probe", str(64 << 20)]
runpy.run_path("results/probes/cudagraph_probe.py", run_name="__main__")
