"""``--mode plans``: the row-plan grid. Every candidate plan of every cell, timed side by side.

For each row operator with a forced-plan launcher (``Operator.plan_call``: softmax,
add_rms_norm, row_sum) and each cell (rows x width) of the suite, the providers are:

- ``rule``: the public function, which picks its plan with ``RowPlan.for_shape`` (the rule under
  test; its plan is recorded in ``extra.plan``), and the baseline;
- one provider per candidate plan, named by the plan (``resident``, ``looped_4096``,
  ``split_2048``, ...), launching the kernel with that plan forced (``plan=``).

Candidates come from ``RowPlan.candidates(rows, width, sm_count, op)`` when the kernels provide
it, else from :func:`fallback_candidates` (resident when the row fits one block; looped with 1024-
to 8192-wide chunks; split with 2048- and 4096-wide chunks). A plan that is not a candidate of a
cell is recorded absent there. Every provider is gated against the FP64 reference like any
other, so a plan that computes a wrong result is never timed.

The regret of a rule (``bench/modes/regret.py``, ``warpgauge plans-report``) is computed from the
case artifacts alone: rule time / best plan time in the same cell - 1.
"""

from __future__ import annotations

import dataclasses

from ..operators import Built, Operator, OpSpec, Provider

LOOPED_BLOCKS = (1024, 2048, 4096, 8192)
SPLIT_BLOCKS = (2048, 4096)


# The rule's op code for each operator (``RowPlan.for_shape(..., op)`` / ``candidates``).
PLAN_OPS = {"softmax": "softmax", "add_rms_norm": "rms", "row_sum": "row_sum"}
# Plan fields beyond kind and block, with the value that is left out of a key.
_FIELDS = (("num_warps", "w", None), ("rows", "r", 1), ("programs_per_sm", "p", 0),
           ("evict", "ev", False), ("lane_stats", "ls", False), ("prefetch", "nopf", True),
           ("align", "noal", True))  # fmt: skip


def plan_key(plan) -> str:
    """A provider name for a plan: kind, block, then every field that differs from its default
    (warps when they differ from the block's default): ``looped_4096``, ``looped_8192_p2_ev``,
    ``resident_r4``. A split plan's split count depends on the rows, so it is not in the key
    (``plan_repr`` in the provider's notes has it)."""
    from warpgauge.kernels import plans as P

    key = f"{plan.kind}_{plan.block}"
    for name, tag, default in _FIELDS:
        v = getattr(plan, name, default)
        if name == "num_warps":
            rows = getattr(plan, "rows", 1) if plan.kind == "resident" else 1
            if v != P._warps(plan.block * rows):
                key += f"_w{v}"
        elif v != default:
            key += f"_{tag}" if isinstance(v, bool) else f"_{tag}{v}"
    return key


def fallback_candidates(rows: int, width: int, sm_count: int) -> list:
    from warpgauge.kernels.plans import RESIDENT_MAX, RowPlan

    out = []
    if width <= RESIDENT_MAX:
        out.append(RowPlan.resident(width))
    for b in LOOPED_BLOCKS:
        if width > b:
            out.append(RowPlan.looped(b))
    for b in SPLIT_BLOCKS:
        if width > 2 * b:
            out.append(RowPlan.split_for(rows, width, sm_count, block=b))
    return out


def _with_op(fn, op: str, *args, **geometry):
    """Call a RowPlan method with the op code (and the device's L2 size and the element size,
    ``geometry``) when it takes them (kernels that have per-op rules)."""
    try:
        return fn(*args, PLAN_OPS.get(op, ""), **geometry)
    except TypeError:
        return fn(*args)


def candidates(rows: int, width: int, sm_count: int, op: str = "", **geometry) -> dict:
    """{plan key: plan} of every plan worth forcing for one cell of ``op``: the kernels' own
    ``RowPlan.candidates`` when they have it, else ``fallback_candidates``. Plans that share a
    key (split plans differing only in their split count) get ``_x2``, ``_x3`` ... in order."""
    from warpgauge.kernels.plans import RowPlan

    fn = getattr(RowPlan, "candidates", None)
    if fn is not None:
        plans = _with_op(fn, op, rows, width, sm_count, **geometry)
    else:
        plans = fallback_candidates(rows, width, sm_count)
    out: dict = {}
    for p in plans:
        key = plan_key(p)
        if p in out.values():
            continue
        n = 1
        while key in out:
            n += 1
            key = f"{plan_key(p)}_x{n}"
        out[key] = p
    return out


def rule_plan(rows: int, width: int, sm_count: int, op: str = "", **geometry):
    """The plan ``RowPlan.for_shape`` picks; ``geometry``: ``l2_bytes`` (the device's L2 size)
    and ``elem_bytes`` (the input's element size), as the launchers pass them."""
    from warpgauge.kernels.plans import RowPlan

    return _with_op(RowPlan.for_shape, op, rows, width, sm_count, **geometry)


def rule_key(rows: int, width: int, sm_count: int, op: str = "", **geometry) -> str:
    """The key of the rule's plan, as it is named among the cell's candidates."""
    plan = rule_plan(rows, width, sm_count, op, **geometry)
    for key, p in candidates(rows, width, sm_count, op, **geometry).items():
        if p == plan:
            return key
    return plan_key(plan)


def checkout_choice(cell) -> str | None:
    """The key of the plan this checkout's rule picks for a grid cell (``regret.Cell``), with
    the SM count and L2 size of the run's device: how the rule as committed now scores on a
    grid measured earlier. Where the run recorded its plans' reprs the plan is matched by repr
    (a key the run did not measure comes back as ``unmeasured: <repr>``, scored as missing)."""
    if not cell.sm_count:
        return None
    geometry = dict(l2_bytes=cell.l2_bytes, elem_bytes=cell.elem_bytes)
    try:
        if cell.reprs:  # the run's own names for its plans: match the plan itself
            want = repr(rule_plan(cell.rows, cell.width, cell.sm_count, cell.op, **geometry))
            hits = [k for k, r in cell.reprs.items() if r == want]
            return hits[0] if hits else f"unmeasured: {want}"
        return rule_key(cell.rows, cell.width, cell.sm_count, cell.op, **geometry)
    except ImportError:  # no triton here
        return None


def _cell(ctx) -> tuple[int, int]:
    return int(ctx.shape["rows"]), int(ctx.shape["width"])


def _sm_count(ctx) -> int:
    from warpgauge._device import device_info

    return device_info(ctx.device).sm_count


def _geometry(ctx) -> dict:
    """What the launchers' rule reads besides the SM count: the device's L2 size and the
    input's element size."""
    import torch

    from warpgauge._device import device_info

    elem = torch.empty((), dtype=ctx.dtype).element_size()
    return {"l2_bytes": device_info(ctx.device).l2_bytes, "elem_bytes": elem}


def plan_provider(op: Operator, key: str) -> Provider:
    def available(ctx, _key=key):
        rows, width = _cell(ctx)
        if _key not in candidates(rows, width, _sm_count(ctx), op.name, **_geometry(ctx)):
            return f"plan {_key} is not a candidate for {rows}x{width}"
        return None

    def build(inputs, ctx, _key=key):
        rows, width = _cell(ctx)
        plan = candidates(rows, width, _sm_count(ctx), op.name, **_geometry(ctx))[_key]
        return Built(op.plan_call(inputs, ctx, plan), notes={"plan": _key, "plan_repr": repr(plan)})

    return Provider(key, f"{op.name} plan {key}", "warpgauge", build, available=available,
                    precompile=True, description=f"{op.name} with the {key} plan forced")  # fmt: skip


def plans_spec(op: Operator, keys: list[str], compile_modes) -> OpSpec:
    base = op.spec(compile_modes)
    wg = base.provider("warpgauge")

    def rule_build(inputs, ctx):
        built = wg.build(inputs, ctx)
        rows, width = _cell(ctx)
        geometry = _geometry(ctx)
        built.notes["plan"] = rule_key(rows, width, _sm_count(ctx), op.name, **geometry)
        built.notes["plan_repr"] = repr(rule_plan(rows, width, _sm_count(ctx), op.name, **geometry))
        built.notes["sm_count"] = _sm_count(ctx)
        return built

    rule = dataclasses.replace(wg, name="rule", label=f"{op.name} rule (RowPlan.for_shape)",
                               build=rule_build, baseline=True)  # fmt: skip
    provs = (rule, *(plan_provider(op, k) for k in keys))
    return dataclasses.replace(base, providers=provs, mode="plans")


def specs(operators: dict[str, Operator], suite, sm_count: int | None = None, **_):
    """The plans specs for the row operators of ``suite``; the provider set of an operator is
    the union of the candidate keys over the suite's cells (``sm_count`` of the device)."""
    if sm_count is None:
        raise ValueError("the plans mode needs the device's SM count")
    out = {}
    for name, op in operators.items():
        if op.plan_call is None:
            continue
        keys: list[str] = []
        for g in suite.groups:
            if g.op != name:
                continue
            s = g.shape
            for k in candidates(s["rows"], s["width"], sm_count, name):
                if k not in keys:
                    keys.append(k)
        out[name] = plans_spec(op, sorted(keys, key=_order), suite.compile.modes)
    return out


def _order(key: str):
    kind, _, rest = key.partition("_")
    rank = {"resident": 0, "looped": 1, "split": 2}.get(kind, 3)
    block = int(rest.split("_")[0]) if rest[:1].isdigit() else 0
    return rank, block, key
