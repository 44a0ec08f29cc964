"""Which rank measures which case: an estimated cost per group of cases and a deterministic
greedy longest-processing-time (LPT) assignment that balances it across ranks.

The unit of assignment is a group (one operator, dtype and shape): its lanes share inputs,
gates and compiled kernels, so all of a group's unfinished lanes go to one rank, and a ratio is
only ever formed inside one case, on one GPU.

Cost of a group (seconds, only relative values matter), from the registry's work model:

    providers x lanes x (lane overhead + samples x max(call time, graph target))
    + compile_s per distinct kernel on the rank

where call time = compulsory bytes / nominal bandwidth + FLOPs / nominal rate. A kernel is
``(op, dtype, shape without its runtime dimensions)``: batch, row and token counts are runtime
arguments (design.md), so groups that differ only in them share one compilation. The groups of
one kernel form a bundle, split only where the bundle exceeds a rank's share of the total; the
LPT step charges the compile cost only on a rank that does not hold the kernel yet. Same inputs,
same assignment, on every rank and every run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .suite import Group, Suite

# Shape keys that are runtime arguments of the kernels (a new value compiles nothing).
RUNTIME_DIMS = frozenset({"rows", "numel", "M", "tokens", "batch"})


@dataclass(frozen=True)
class CostModel:
    """Nominal rates for relative costs (not a claim about any GPU: ceilings are measured)."""

    bytes_per_s: float = 4.0e12
    flops_per_s: float = 5.0e14
    lane_overhead_s: float = 0.3  # warm-up burst check, gate, graph capture per provider and lane
    compile_s: float = 1.5  # per distinct kernel and provider family that compiles

    def check(self) -> CostModel:
        for name in ("bytes_per_s", "flops_per_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"CostModel.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("lane_overhead_s", "compile_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"CostModel.{name} must be >= 0, got {getattr(self, name)!r}")
        return self


@dataclass(frozen=True)
class Item:
    """One group to place: its key, the case ids of its unfinished lanes, its cost without
    compilation, its kernel and the compile cost that kernel adds on a rank that lacks it."""

    key: str
    cases: tuple[str, ...]
    cost_s: float
    kernel: tuple
    compile_s: float


def kernel_key(group: Group) -> tuple:
    return (
        group.op,
        group.dtype,
        tuple((k, v) for k, v in group.shape_items if k not in RUNTIME_DIMS),
    )


def _work(spec, group: Group, suite: Suite) -> tuple[float, float]:
    """(bytes, flops) of one call from the operator's work model; the element count times four
    bytes when there is no model or it fails (a CPU context, an unknown operator)."""
    numel = 1
    for _, v in group.shape_items:
        numel *= max(int(v), 1)
    if spec is None:
        return 4.0 * numel, 0.0
    try:
        from .providers import context_for

        ctx = context_for(group.op, group.dtype, group.shape, suite.settings_for(group.op), "cpu")
        w = spec.work(ctx)
        return float(w[0]), float(w[1])
    except Exception:  # a cost estimate only: never stop a run for it
        return 4.0 * numel, 0.0


def estimate(
    suite: Suite,
    ops: Mapping | None,
    todo: Iterable[str],
    model: CostModel | None = None,
) -> list[Item]:
    """One :class:`Item` per group with an unfinished case in ``todo`` (suite order)."""
    model = (model or CostModel()).check()
    want = set(todo)
    s = suite.sampling
    samples = max(int(s.max_samples), 1)
    graph_s = float(s.graph_target_us) * 1e-6
    items = []
    for g in suite.groups:
        cases = tuple(g.case_id(lane) for lane in suite.lanes if g.case_id(lane) in want)
        if not cases:
            continue
        spec = (ops or {}).get(g.op)
        n_prov = max(len(getattr(spec, "providers", ()) or ()), 1)
        nbytes, flops = _work(spec, g, suite)
        call_s = nbytes / model.bytes_per_s + flops / model.flops_per_s
        lane_s = model.lane_overhead_s + samples * max(call_s, graph_s)
        items.append(
            Item(
                g.key, cases, n_prov * len(cases) * lane_s, kernel_key(g), n_prov * model.compile_s
            )
        )
    return items


def _chunks(items: list[Item], world_size: int) -> list[list[Item]]:
    """The items of each kernel as one bundle (one compilation), split into as few chunks as
    keep each near the per-rank share of the whole (a kernel that is most of the work is still
    spread over every rank)."""
    bundles: dict[tuple, list[Item]] = {}
    for it in sorted(items, key=lambda i: (-i.cost_s, i.key)):
        bundles.setdefault(it.kernel, []).append(it)
    total = sum(i.cost_s for i in items) + sum(b[0].compile_s for b in bundles.values())
    share = total / world_size
    out = []
    for kernel in sorted(bundles, key=repr):
        b = bundles[kernel]
        size = sum(i.cost_s for i in b) + b[0].compile_s
        k = max(1, min(len(b), world_size, math.ceil(size / share - 1e-9) if share > 0 else 1))
        parts: list[list[Item]] = [[] for _ in range(k)]
        fill = [0.0] * k
        for it in b:  # LPT inside the bundle
            j = min(range(k), key=lambda j: (fill[j], j))
            parts[j].append(it)
            fill[j] += it.cost_s
        out += [p for p in parts if p]
    return out


def assign(items: list[Item], world_size: int) -> list[list[Item]]:
    """Greedy LPT over kernel chunks (``_chunks``): chunks by decreasing cost (ties by their
    first key), each to the rank whose load after taking it is lowest (the compile cost counted
    only where the kernel is new; ties to the lower rank). Deterministic; every item lands on
    exactly one rank."""
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    load = [0.0] * world_size
    kernels: list[set] = [set() for _ in range(world_size)]
    out: list[list[Item]] = [[] for _ in range(world_size)]

    def cost(chunk: list[Item]) -> float:
        return sum(i.cost_s for i in chunk) + chunk[0].compile_s

    for chunk in sorted(_chunks(items, world_size), key=lambda c: (-cost(c), c[0].key)):
        kernel, full, comp = chunk[0].kernel, cost(chunk), chunk[0].compile_s
        after = [
            load[r] + full - (comp if kernel in kernels[r] else 0.0) for r in range(world_size)
        ]
        r = min(range(world_size), key=lambda r: (after[r], r))
        load[r] = after[r]
        kernels[r].add(kernel)
        out[r] += chunk
    return out


def loads(shards: list[list[Item]]) -> list[float]:
    """Estimated seconds per rank (compile cost once per kernel a rank holds)."""
    out = []
    for items in shards:
        seen: set = set()
        total = 0.0
        for it in items:
            total += it.cost_s + (0.0 if it.kernel in seen else it.compile_s)
            seen.add(it.kernel)
        out.append(total)
    return out


def shard_cases(
    suite: Suite,
    ops: Mapping | None,
    todo: Iterable[str],
    world_size: int,
    model: CostModel | None = None,
) -> list[list[str]]:
    """The case ids each rank measures (suite order inside a rank); every id of ``todo`` that the
    suite knows appears exactly once."""
    shards = assign(estimate(suite, ops, todo, model), world_size)
    rank_of = {c: r for r, items in enumerate(shards) for it in items for c in it.cases}
    order = [c for c in suite.case_ids() if c in rank_of]
    return [[c for c in order if rank_of[c] == r] for r in range(world_size)]
