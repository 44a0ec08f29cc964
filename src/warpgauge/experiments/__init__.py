"""``warpgauge experiment NAME``: the small experiments behind warpgauge's design choices.

Each writes ``<out>/<name>.json`` (provenance, method, raw samples) covered by a manifest:
clock-ramp, specialization, warps, chunks, gemm-grouping, inductor, compile-cost. docs/experiments.md
quotes the committed H200 results. Nothing is imported at package import time.
"""
