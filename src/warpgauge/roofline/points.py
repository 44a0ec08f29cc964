"""Roofline points: each timed provider of each case, placed under the roofs that apply to its
operator, with the roof that binds it and its fraction of that roof.

Coordinates come from the case artifacts alone: intensity = ``work.flops / work.bytes`` (the
kernel module's analytical ``work()``: FLOPs, or for softmax scalar operations, per *requested*
byte) and achieved = ``derived.tflops``. The memory roof at intensity ``I`` is ``bandwidth * I``;
the tensor-core roof is the dtype's measured matmul throughput and applies only where the work
can run on tensor cores (``APPLICABILITY``). Binding roof = the lowest applicable roof at ``I``.
"""

from __future__ import annotations

from .ceilings import Roof

# op -> (work unit, {roof: None if it applies, else the reason it does not})
APPLICABILITY: dict[str, tuple[str, dict[str, str | None]]] = {
    "gemm": ("FLOP", {"memory": None, "tensor": None}),
    "int4_linear": ("FLOP", {"memory": None, "tensor": None}),
    "softmax": (
        "scalar op",
        {
            "memory": None,
            "tensor": (
                "not a roof for softmax: its work is max, subtract, exp, sum and scale (5 scalar "
                "operations per element, counted by kernels/softmax.work), on CUDA cores and the SFU; "
                "no scalar/SFU roof is measured, so only the memory roof bounds it"
            ),
        },
    ),
    "add_rms_norm": (
        "FLOP",
        {
            "memory": None,
            "tensor": (
                "not a roof for RMSNorm: an add, a square-sum reduction, rsqrt and two multiplies per "
                "element run on CUDA cores and the SFU, never on tensor cores"
            ),
        },
    ),
    "row_sum": (
        "FLOP",
        {
            "memory": None,
            "tensor": ("not a roof for a scalar reduction: one add per element on CUDA cores"),
        },
    ),
    "add": (
        "FLOP",
        {
            "memory": None,
            "tensor": ("not a roof for an elementwise add: one FP32 add per element on CUDA cores"),
        },
    ),
}
INT4_FMA_NOTE = (
    "M = 1 runs warpgauge's FMA GEMV on CUDA cores: the tensor-core roof bounds the work but is "
    "not that kernel's own roof (no CUDA-core FP32 roof is measured); at ~4 FLOP/B the memory "
    "roof binds far below it either way"
)
# A point above its binding roof by more than this is flagged (timing or work-model problem, or
# a warm lane served from L2).
ABOVE_ROOF_TOL = 1.02


def applicability(op: str) -> tuple[str, dict[str, str | None]]:
    return APPLICABILITY.get(
        op, ("FLOP", {"memory": None, "tensor": f"unknown operator {op!r}: tensor roof not used"})
    )


def point(case: dict, provider: dict, roofs: dict) -> dict | None:
    """One provider's point in one case, or None when it has no rate (failed, or no work)."""
    d = provider.get("derived") or {}
    work = case["work"]
    if provider.get("status") != "ok" or not d.get("tflops") or work["bytes"] <= 0:
        return None
    intensity = work["flops"] / work["bytes"]
    _, appl = applicability(case["op"])
    mem: Roof | None = roofs.get("memory")
    ten: Roof | None = roofs.get("tensor", {}).get(case["dtype"])
    cands = {}
    if mem is not None:
        cands["memory"] = mem.median * intensity  # TB/s * FLOP/B = TFLOP/s
    tensor_reason = appl.get("tensor")
    if ten is not None and tensor_reason is None:
        cands["tensor"] = ten.median
    elif ten is None and tensor_reason is None:
        tensor_reason = f"no {case['dtype']} matmul ceiling in this run"
    binding = min(cands, key=cands.get) if cands else None
    frac = d["tflops"] / cands[binding] if binding else None
    p = {
        "case_id": case["case_id"],
        "op": case["op"],
        "dtype": case["dtype"],
        "shape_label": case["shape_label"],
        "provider": provider["name"],
        "family": provider["family"],
        "intensity": intensity,
        "achieved_tflops": d["tflops"],
        "achieved_tbps": d.get("tbps"),
        "roof_memory_tflops": cands.get("memory"),
        "roof_tensor_tflops": cands.get("tensor"),
        "binding_roof": binding,
        "fraction_of_binding": frac,
        "fraction_of_memory_roof": (d["tbps"] / mem.median) if mem and d.get("tbps") else None,
        "above_roof": bool(frac is not None and frac > ABOVE_ROOF_TOL),
    }
    if tensor_reason is not None and appl.get("tensor") is None:
        p["tensor_roof_note"] = tensor_reason  # a per-point reason (the op-level one is shared)
    if case["op"] == "int4_linear" and (case.get("shape") or {}).get("M") == 1:
        p["tensor_roof_note"] = "int4_fma_path"
    return p


def summarize(run: dict, cases: list[dict], roofs: dict, lane: str = "cold") -> dict:
    """The roofline summary: roofs, ridge points, and per operator its points, which roofs apply,
    and the warpgauge point with the highest fraction of its binding roof."""
    mem = roofs.get("memory")
    ops: dict[str, dict] = {}
    for case in cases:
        if case.get("lane") != lane:
            continue
        unit, appl = applicability(case["op"])
        entry = ops.setdefault(case["op"], {
            "work_unit": unit,
            "roofs_applied": [r for r, why in appl.items() if why is None],
            "roofs_not_applicable": {r: why for r, why in appl.items() if why is not None},
            "notes": {"int4_fma_path": INT4_FMA_NOTE} if case["op"] == "int4_linear" else {},
            "points": [],
        })  # fmt: skip
        for pr in case["providers"]:
            p = point(case, pr, roofs)
            if p is not None:
                entry["points"].append(p)
    for entry in ops.values():
        wg = [p for p in entry["points"] if p["family"] == "warpgauge" and p["fraction_of_binding"]]
        entry["best_warpgauge"] = max(wg, key=lambda p: p["fraction_of_binding"], default=None)
        entry["above_roof"] = [p["case_id"] + ":" + p["provider"] for p in entry["points"]
                               if p["above_roof"]]  # fmt: skip
    ridge = {}
    if mem is not None:
        ridge = {dt: r.median / mem.median for dt, r in roofs.get("tensor", {}).items()}
    return {
        "schema_version": 1,
        "kind": "roofline",
        "run_id": run["run_id"],
        "lane": lane,
        "roofs": {
            "memory": mem.as_dict() if mem else None,
            "tensor": {dt: r.as_dict() for dt, r in roofs.get("tensor", {}).items()},
        },
        "ridge_flop_per_byte": ridge,
        "conventions": {
            "intensity": "work.flops / work.bytes of the case (analytical, requested bytes)",
            "achieved": "derived.tflops = work.flops / device median",
            "memory_roof": "measured copy bandwidth (TB/s) x intensity",
            "tensor_roof": "measured square torch.mm TFLOP/s of the case's dtype",
            "fraction": "achieved / the lowest applicable roof at the point's intensity",
            "bytes": "requested bytes, not measured DRAM traffic (see warpgauge profile)",
        },
        "operators": ops,
    }


def markdown(summary: dict) -> str:
    """The roofs, then per operator its best warpgauge point: what a report embeds under the plot."""
    r = summary["roofs"]
    mem = r.get("memory")

    def band(x):
        if x is None:
            return "not measured"
        n = x["confirmations"]
        rng = f", range {x['min']:.4g}-{x['max']:.4g}" if x.get("min") is not None else ""
        count = "calibration only" if n == 0 else f"{n} confirmation runs" if n else "runs: n/a"
        return f"{x['median']:.4g} {x['unit']} ({count}{rng})"

    lines = [f"Roofs of run {summary['run_id']} ({summary['lane']} lane): memory {band(mem)}; "
             + "; ".join(f"tensor {dt} {band(x)}" for dt, x in r.get("tensor", {}).items()) + ".",
             "", "| operator | roofs that apply | best warpgauge point | intensity | achieved | "
             "binding roof | fraction |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for op, e in summary["operators"].items():
        b = e["best_warpgauge"]
        unit = "Tops/s" if e["work_unit"] == "scalar op" else "TFLOP/s"
        if b is None:
            lines.append(f"| {op} | {', '.join(e['roofs_applied'])} | - | - | - | - | - |")
            continue
        lines.append(
            f"| {op} | {', '.join(e['roofs_applied'])} | {b['shape_label']} {b['dtype']} | "
            f"{b['intensity']:.3g} | {b['achieved_tflops']:.3g} {unit} | {b['binding_roof']} | "
            f"{100 * b['fraction_of_binding']:.1f}% |"
        )
    na = sorted({op for op, e in summary["operators"].items() if e["roofs_not_applicable"]})
    if na:
        lines += ["", "The tensor-core roof is not a roof for " + ", ".join(na) + ": their work "
                  "runs on CUDA cores (exp and rsqrt on the SFU), so only the memory roof bounds them."]  # fmt: skip
    return "\n".join(lines) + "\n"
