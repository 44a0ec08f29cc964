"""Inductor inspection: how many kernels ``torch.compile`` emits for each operator and shape, and
why, read from the code it generates (``torch._inductor.utils.run_and_get_code``).

Each generated module's ``call()`` launches Triton kernels (``<kernel>.run(...)``) and library
kernels (``extern_kernels.<fn>(...)``); those launches are counted. Kernel kinds come from
Inductor's naming: ``triton_per_`` a persistent reduction (the row in registers), ``triton_red_``
a looped reduction, ``triton_poi_`` pointwise. Inductor's own warnings (e.g. that it disabled
online softmax because it split a reduction) are captured from its logger.
"""

from __future__ import annotations

import logging
import re

CASES = {  # each case is one torch.compile (a few seconds): the shapes where the seed saw splits
    "softmax": ((1024, 1024), (64, 131072)),
    "add_rms_norm": ((64, 131072),),
    "row_sum": ((64, 131072),),
}
TINY_CASES = {"softmax": ((64, 1024),)}

_LAUNCH_RE = re.compile(r"\b(triton_[a-z]+_[A-Za-z0-9_]+)\.run\(")
_EXTERN_RE = re.compile(r"\bextern_kernels\.([A-Za-z0-9_]+)\(")


def _contract(op: str):
    import torch

    if op == "softmax":
        return lambda x: torch.softmax(x.float(), -1).to(x.dtype)
    if op == "row_sum":
        return lambda x: x.float().sum(-1).to(x.dtype)

    def rms(x, r, w):
        h = (x.float() + r.float()).to(x.dtype)
        hf = h.float()
        y = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
        return y.to(x.dtype), h

    return rms


def call_body(code: str) -> str:
    """The generated module's ``call`` function (where the launches are), for the artifact."""
    if "def call(" not in code:
        return ""
    body = code.split("def call(", 1)[1]
    end = body.find("\ndef ")
    return "def call(" + (body if end < 0 else body[:end])


def parse_launches(code: str) -> list[dict]:
    """Kernel launches in one generated module's ``call`` body, in order."""
    body = call_body(code) or code
    out = []
    for line in body.splitlines():
        m = _LAUNCH_RE.search(line)
        if m:
            name = m.group(1)
            kind = ("persistent reduction" if name.startswith("triton_per_") else
                    "looped reduction" if name.startswith("triton_red_") else
                    "pointwise" if name.startswith("triton_poi_") else "triton")  # fmt: skip
            out.append({"kernel": name, "kind": kind})
            continue
        m = _EXTERN_RE.search(line)
        if m:
            out.append({"kernel": f"extern_kernels.{m.group(1)}", "kind": "library"})
    return out


def explain(op: str, launches: list[dict], warnings: list[str]) -> str:
    """A one-line reason for the kernel count, from the launches and Inductor's warnings."""
    if not launches:
        return "no kernel launches found in the generated code"
    online = any("softmax_online" in k["kernel"] for k in launches)
    if len(launches) == 1:
        return f"one fused kernel ({launches[0]['kind']})" + (
            ", online softmax (max and sum in one pass)" if online else ""
        )
    reds = [k for k in launches if "reduction" in k["kind"]]
    pw = [k for k in launches if k["kind"] == "pointwise"]
    parts = [f"{len(launches)} kernels ({len(reds)} reduction, {len(pw)} pointwise)"]
    if len(reds) > 1:
        parts.append("split reduction: rows reduced in pieces by one kernel, merged by another")
    if any("online softmax" in w.lower() for w in warnings):
        parts.append("Inductor disabled online softmax: max and sum are separate passes")
    if pw:
        parts.append("a separate pointwise pass reads the input again to write the output")
    return "; ".join(parts)


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def inspect_case(op: str, rows: int, width: int) -> dict:
    import time

    import torch
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    g = torch.Generator(device="cuda").manual_seed(rows + width)
    x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16, generator=g)
    args = (x,)
    if op == "add_rms_norm":
        args = (x, torch.randn_like(x), torch.randn(width, device="cuda", dtype=torch.bfloat16))
    fn = torch.compile(_contract(op), dynamic=False)
    cap = _Capture()
    loggers = [logging.getLogger(n) for n in ("torch._inductor", "torch._inductor.lowering")]
    for lg in loggers:
        lg.addHandler(cap)
    t0 = time.perf_counter()
    try:
        _, codes = run_and_get_code(fn, *args)
    finally:
        for lg in loggers:
            lg.removeHandler(cap)
    compile_s = time.perf_counter() - t0
    launches = [k for c in codes for k in parse_launches(c)]
    return {
        "op": op, "rows": rows, "width": width, "dtype": "bfloat16",
        "kernels": len(launches), "launches": launches,
        "warnings": sorted(set(cap.messages))[:10],
        "why": explain(op, launches, cap.messages),
        "first_call_s": compile_s,
        "generated_chars": sum(len(c) for c in codes),
        "call_source": [call_body(c)[:4000] for c in codes],
    }  # fmt: skip


def run(tiny: bool = False) -> dict:
    import torch

    cases = TINY_CASES if tiny else CASES
    results = []
    for op, shapes in cases.items():
        for rows, width in shapes:
            try:
                results.append(inspect_case(op, rows, width))
            except Exception as e:  # record what failed, keep inspecting the rest
                results.append({"op": op, "rows": rows, "width": width,
                                "error": f"{type(e).__name__}: {e}"})  # fmt: skip
    return {"torch": torch.__version__, "mode": "default (dynamic=False)", "cases": results,
            "method": "torch.compile of the eager contract (FP32 math, one cast), "
            "run_and_get_code; launches counted in each generated call()"}  # fmt: skip


def summary_rows(rec: dict) -> list[str]:
    return [f"{c['op']:13s} {c['rows']}x{c['width']}: " +
            (f"{c['kernels']} kernel(s): {c['why']}" if "kernels" in c else c["error"])
            for c in rec["cases"]]  # fmt: skip
