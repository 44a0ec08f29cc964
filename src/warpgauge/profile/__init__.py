"""``warpgauge profile``: Nsight Compute evidence for one launch of each selected kernel.

- ``ncu``: finding the installed ``ncu``, discovering its metric names, building the command
  (kernel replay, ``--cache-control all``, ``--clock-control none``; clocks and power are never
  changed) and parsing its raw CSV page.
- ``targets``: what is profiled: every warpgauge kernel family (each row plan, GEMM, INT4 GEMV and
  split-K, the backward kernels) and the strongest peer available, at two shapes each, with the
  read/write split of each target's analytical byte model.
- ``runner``: the child process ncu profiles; it compiles and warms every target outside the
  profiled ranges, then launches each target once between ``cudaProfilerStart/Stop``.
- ``artifact``: the versioned ``profile.json`` (metrics per kernel, the byte-model check) and its
  SHA-256 manifest; ``validate_profile`` re-checks both.

Nothing is imported at package import time.
"""
