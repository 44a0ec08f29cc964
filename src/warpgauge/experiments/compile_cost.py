"""Compile and autotune cost: what the first call of each operator at a new shape costs.

Runs in a child process with an empty Triton cache (``TRITON_CACHE_DIR`` a fresh temp dir) and
Inductor's caches off, so every first call really compiles. Per operator and shape it records the
first call (compile, and autotuning for the GEMM), the second call (steady host+device time), and
a call at a new row/token count with the same width or weight shape, which must not compile
(widths and weight shapes are compile-time, row counts runtime). ``torch.compile``'s first call of
the same contract is recorded beside it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

CASES = {  # (rows, width, new rows) or (M, N, K, new M)
    "softmax": ((1024, 4096, 4096), (16, 131072, 64)),
    "add_rms_norm": ((1024, 4096, 2048),),
    "gemm": ((1024, 4096, 4096, 512),),
    "int4_linear": ((1, 4096, 4096, 8),),
}
TINY_CASES = {"softmax": ((64, 1024, 32),)}


def _timed(fn) -> float:
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def _builders(op, case):
    """(call at the first shape, call at the new row/token count, compiled contract)."""
    import torch

    import warpgauge.kernels.gemm as G
    import warpgauge.kernels.int4 as Q
    from warpgauge.kernels.rmsnorm import add_rms_norm
    from warpgauge.kernels.row_sum import row_sum
    from warpgauge.kernels.softmax import softmax
    from warpgauge.quant import quantize_int4

    bf = torch.bfloat16
    dev = "cuda"
    if op in ("softmax", "row_sum", "add_rms_norm"):
        rows, n, rows2 = case
        x, x2 = (torch.randn(r, n, device=dev, dtype=bf) for r in (rows, rows2))
        if op == "softmax":
            return (
                (lambda: softmax(x)),
                (lambda: softmax(x2)),
                (torch.compile(lambda t: torch.softmax(t.float(), -1).to(t.dtype)), (x,)),
            )
        if op == "row_sum":
            return (
                (lambda: row_sum(x)),
                (lambda: row_sum(x2)),
                (torch.compile(lambda t: t.float().sum(-1).to(t.dtype)), (x,)),
            )
        w = torch.randn(n, device=dev, dtype=bf)
        r1, r2 = torch.randn_like(x), torch.randn_like(x2)

        def rms(a, b, w):
            h = (a.float() + b.float()).to(a.dtype)
            return (h.float() * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6)
                    * w.float()).to(a.dtype), h  # fmt: skip

        return (
            (lambda: add_rms_norm(x, r1, w)),
            (lambda: add_rms_norm(x2, r2, w)),
            (torch.compile(rms), (x, r1, w)),
        )
    M, N, K, M2 = case
    if op == "gemm":
        b = torch.randn(K, N, device=dev, dtype=bf)
        a, a2 = (torch.randn(m, K, device=dev, dtype=bf) for m in (M, M2))
        return (lambda: G.gemm(a, b)), (lambda: G.gemm(a2, b)), (torch.compile(torch.mm), (a, b))
    qw = quantize_int4(torch.randn(N, K, device=dev, dtype=bf), 128)
    x, x2 = (torch.randn(m, K, device=dev, dtype=bf) for m in (M, M2))
    wd = qw.dequantize(bf) if hasattr(qw, "dequantize") else None
    comp = (torch.compile(lambda t, w: t @ w.t()), (x, wd)) if wd is not None else (None, ())
    return (lambda: Q.int4_linear(x, qw)), (lambda: Q.int4_linear(x2, qw)), comp


def child(tiny: bool) -> dict:
    import torch

    torch.zeros(1, device="cuda")  # context creation outside every measurement
    rows = []
    for op, cases in (TINY_CASES if tiny else CASES).items():
        for ci, case in enumerate(cases):
            entry = {"op": op, "case": list(case)}
            try:
                first, new_rows, (compiled, cargs) = _builders(op, case)
                entry["first_call_s"] = _timed(first)
                entry["second_call_s"] = _timed(first)
                entry["new_rows_first_call_s"] = _timed(new_rows)
                if compiled is not None and ci == 0:  # one torch.compile per operator: seconds each
                    entry["torch_compile_first_call_s"] = _timed(lambda c=compiled, a=cargs: c(*a))
                    entry["torch_compile_second_call_s"] = _timed(lambda c=compiled, a=cargs: c(*a))
            except Exception as e:  # record and go on
                entry["error"] = f"{type(e).__name__}: {e}"
            rows.append(entry)
            print(f"[compile-cost] {op} {case}: {entry}", flush=True)
    return {"torch": torch.__version__, "cases": rows}


def run(tiny: bool = False, timeout_s: float = 400.0) -> dict:
    with tempfile.TemporaryDirectory(prefix="wg-cc-") as tmp:
        env = dict(os.environ, TRITON_CACHE_DIR=os.path.join(tmp, "triton"),
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                   TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")  # fmt: skip
        out = os.path.join(tmp, "out.json")
        cmd = [sys.executable, "-m", "warpgauge.experiments.compile_cost", out] + (
            ["--tiny"] if tiny else [])  # fmt: skip
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        if res.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"compile-cost child exited {res.returncode}: {res.stderr[-800:]}")
        with open(out, encoding="utf-8") as f:
            rec = json.load(f)
    rec["method"] = (
        "fresh process, empty TRITON_CACHE_DIR, Inductor caches disabled; wall time "
        "of one synchronized call: first (compile + autotune), second, then a new "
        "row/token count at the same width or weight shape"
    )
    return rec


def summary_rows(rec: dict) -> list[str]:
    out = []
    for c in rec["cases"]:
        if "error" in c:
            out.append(f"{c['op']} {c['case']}: {c['error'][:80]}")
            continue
        tc = c.get("torch_compile_first_call_s")
        out.append(f"{c['op']:12s} {c['case']}: first {c['first_call_s']:.2f}s, second "
                   f"{c['second_call_s'] * 1e3:.2f}ms, new rows {c['new_rows_first_call_s'] * 1e3:.2f}ms"
                   + (f", torch.compile first {tc:.2f}s" if tc else ""))  # fmt: skip
    return out


if __name__ == "__main__":
    rec = child("--tiny" in sys.argv)
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(rec, f)
