"""Regret scores of row-plan rules over a plans-mode grid, from the run's artifacts alone.

A cell is one (operator, dtype, rows x width, lane) case of a ``--mode plans`` run; its plan
times are the forced-plan providers' median device times. The regret of a rule in a cell is
``time of the plan the rule picks / best plan time in the cell - 1``, both forced-plan times of
the same run, so the rule's choice is scored, not the noise between two providers running the
same kernel (that gap is reported separately as ``rule vs its forced plan``). A rule whose plan
was not measured in a cell (not a candidate, failed its gate) is scored as missing there.

Rules: ``current`` (the plan ``RowPlan.for_shape`` chose in the run, recorded by the ``rule``
provider) and a fitted lookup table: the grid is cut into regions (rows per SM x width class,
per operator) and each region gets the plan with the lowest mean regret over the fit half's
cells in it (the half chosen by a hash of the cell label); it is then scored on the other half,
where a plan the table names but a cell did not measure counts as missing. The same table
fitted on every cell is the in-sample bound of what a rule of this resolution can reach. Plan
keys are opaque strings here, so any candidate set the kernels offer is scored. No torch.
"""

from __future__ import annotations

import bisect
import statistics
import zlib
from dataclasses import dataclass, field

MISSING_REGRET = 1.0  # the fit's penalty for a cell whose chosen plan was not measured


@dataclass(frozen=True)
class Cell:
    op: str
    dtype: str
    label: str
    lane: str
    rows: int
    width: int
    sm_count: int
    times: dict  # plan key -> median us
    rule_key: str | None
    rule_us: float | None
    l2_bytes: int = 0  # the run's device (provenance), for scoring the checkout's rule
    # plan key -> the forced plan's repr as the run recorded it: keys are assigned in candidate
    # order (``_x2`` suffixes follow the rule's first choice), so another rule's plan is found
    # among a run's providers by its repr, not by the key it would get today
    reprs: dict = field(default_factory=dict, compare=False)

    @property
    def elem_bytes(self) -> int:
        return {"float32": 4, "float64": 8}.get(self.dtype, 2)

    @property
    def best(self) -> float:
        return min(self.times.values())

    @property
    def best_key(self) -> str:
        return min(self.times, key=self.times.get)

    def half(self) -> int:
        return zlib.crc32(self.label.encode()) & 1


# The fitted rule is a lookup table over regions of the grid: rows per SM and width classes.
ROWS_PER_SM_EDGES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
WIDTH_EDGES = (8192, 16384, 32768, 65536, 131072, 262144)


def region(c: Cell) -> tuple:
    """(operator, rows-per-SM class, width class) of a cell."""
    rps = c.rows / max(c.sm_count, 1)
    return (c.op, bisect.bisect_right(ROWS_PER_SM_EDGES, rps),
            bisect.bisect_left(WIDTH_EDGES, c.width))  # fmt: skip


def region_label(r: tuple) -> str:
    op, ri, wi = r
    lo_r = "0" if ri == 0 else f"{ROWS_PER_SM_EDGES[ri - 1]:g}"
    hi_r = f"{ROWS_PER_SM_EDGES[ri]:g}" if ri < len(ROWS_PER_SM_EDGES) else "inf"
    lo_w = "1" if wi == 0 else str(WIDTH_EDGES[wi - 1] + 1)
    hi_w = str(WIDTH_EDGES[wi]) if wi < len(WIDTH_EDGES) else "inf"
    return f"{op}: rows/SM in [{lo_r}, {hi_r}), width {lo_w}..{hi_w}"


@dataclass(frozen=True)
class TableRule:
    """A plan key per region, fitted on some cells; ``fallback`` per operator for regions the
    fit never saw."""

    table: dict
    fallback: dict

    def choose(self, c: Cell) -> str | None:
        return self.table.get(region(c), self.fallback.get(c.op))

    def describe(self) -> str:
        return f"table of {len(self.table)} regions (rows/SM x width class -> plan)"

    def record(self) -> dict:
        return {"regions": {region_label(k): v for k, v in sorted(self.table.items())},
                "fallback": dict(self.fallback)}  # fmt: skip


def _best_key(cells) -> str | None:
    """The plan key with the lowest mean regret over ``cells`` (missing = MISSING_REGRET)."""
    keys = sorted({k for c in cells for k in c.times})
    best, best_v = None, float("inf")
    for k in keys:
        v = statistics.fmean(c.times[k] / c.best - 1.0 if k in c.times else MISSING_REGRET
                             for c in cells)  # fmt: skip
        if v < best_v:
            best, best_v = k, v
    return best


def fit(cells) -> TableRule:
    """For each region of ``cells``, the plan with the lowest mean regret there."""
    by_region: dict = {}
    by_op: dict = {}
    for c in cells:
        by_region.setdefault(region(c), []).append(c)
        by_op.setdefault(c.op, []).append(c)
    return TableRule({r: _best_key(cs) for r, cs in by_region.items()},
                     {op: _best_key(cs) for op, cs in by_op.items()})  # fmt: skip


def load_cells(run_dir) -> list[Cell]:
    from warpgauge import artifacts

    run = artifacts.load_run(run_dir)
    gpu = ((run.run or {}).get("provenance") or {}).get("gpu") or {}
    l2 = int(gpu.get("l2_bytes") or 0)
    cells = []
    for case in run.cases:
        if not isinstance(case, dict):
            continue
        provs = {p["name"]: p for p in case["providers"]}
        rule = provs.get("rule")
        times = {
            n: p["device_time"]["median_us"]
            for n, p in provs.items()
            if n != "rule" and p["status"] == "ok" and p.get("device_time")
        }
        if not times:
            continue
        reprs = {n: ((provs[n].get("extra") or {}).get("plan_repr")) for n in times}
        extra = (rule or {}).get("extra") or {}
        ok_rule = rule is not None and rule["status"] == "ok"
        cells.append(Cell(
            op=case["op"], dtype=case["dtype"], label=case["shape_label"], lane=case["lane"],
            rows=int(case["shape"]["rows"]), width=int(case["shape"]["width"]),
            sm_count=int(extra.get("sm_count") or 0), times=times,
            rule_key=extra.get("plan"), rule_us=rule["device_time"]["median_us"] if ok_rule else None,
            l2_bytes=l2, reprs={n: r for n, r in reprs.items() if r},
        ))  # fmt: skip
    return cells


def regrets(cells, choose) -> tuple[list[float], int]:
    """(regret per scorable cell, number of cells whose chosen plan was not measured)."""
    out, missing = [], 0
    for c in cells:
        key = choose(c)
        if key is None or key not in c.times:
            missing += 1
            continue
        out.append(c.times[key] / c.best - 1.0)
    return out, missing


def score(cells, choose) -> dict:
    r, missing = regrets(cells, choose)
    if not r:
        return {"n": 0, "missing": missing, "mean": None, "p90": None, "over_10pct": None}
    s = sorted(r)
    p90 = s[min(len(s) - 1, int(round(0.9 * (len(s) - 1))))]
    return {"n": len(r), "missing": missing, "mean": statistics.fmean(r), "p90": p90,
            "max": s[-1], "over_10pct": sum(x > 0.10 for x in r)}  # fmt: skip


def current(c: Cell) -> str | None:
    return c.rule_key


def split_vs_loop(cells) -> list[dict]:
    """By row count: median over widths of best split time / best looped time, and the cells
    where splitting wins (< 0.95), is within 5%, or loses (> 1.05)."""
    by_rows: dict[int, list[float]] = {}
    for c in cells:
        s = [t for k, t in c.times.items() if k.startswith("split")]
        lo = [t for k, t in c.times.items() if k.startswith("looped")]
        if s and lo:
            by_rows.setdefault(c.rows, []).append(min(s) / min(lo))
    rows = []
    for r in sorted(by_rows):
        v = by_rows[r]
        rows.append({"rows": r, "median": statistics.median(v), "wins": sum(x < 0.95 for x in v),
                     "level": sum(0.95 <= x <= 1.05 for x in v), "loses": sum(x > 1.05 for x in v)})  # fmt: skip
    return rows


def _same_plans(c: Cell, o: Cell) -> list[tuple[str, str]]:
    """(key in c, key in o) of the plans both cells timed. By the recorded reprs where both runs
    have them: a rule change between the runs can swap which plan a key names (the unsuffixed
    key is the rule's own plan, ``_x2`` its twin: session 19's ``w_early`` change did in every
    cell it touched); else by key."""
    if c.reprs and o.reprs:
        where = {r: k for k, r in o.reprs.items() if k in o.times}
        return [(k, where[r]) for k, r in c.reprs.items() if k in c.times and r in where]
    return [(k, k) for k in c.times if k in o.times]


def noise(a: list[Cell], b: list[Cell]) -> dict:
    """Run-to-run change of the same plan in the same cell: median and p90 of |t_a / t_b - 1|."""
    idx = {(c.op, c.dtype, c.label, c.lane): c for c in b}
    d = []
    for c in a:
        o = idx.get((c.op, c.dtype, c.label, c.lane))
        if o is None:
            continue
        d += [abs(c.times[k] / o.times[j] - 1.0) for k, j in _same_plans(c, o)]
    if not d:
        return {"n": 0, "median": None, "p90": None}
    s = sorted(d)
    return {"n": len(s), "median": statistics.median(s), "p90": s[int(round(0.9 * (len(s) - 1)))]}


def summarize(run_dirs, checkout=None) -> dict:
    """The regret tables of one or two runs. ``checkout``: a chooser (cell -> plan key) for the
    rule as it is in this checkout (``plans.checkout_choice``), scored on every cell and on each
    half, beside the rule the run recorded."""
    runs = [load_cells(d) for d in run_dirs]
    cells = runs[0]
    ops = sorted({c.op for c in cells})
    groups = {"all": cells, **{op: [c for c in cells if c.op == op] for op in ops}}
    out: dict = {"runs": [str(d) for d in run_dirs], "n_cells": len(cells), "ops": {}}
    for name, cs in groups.items():
        fit_half = [c for c in cs if c.half() == 0]
        held = [c for c in cs if c.half() == 1]
        fitted = fit(fit_half)
        in_sample = fit(cs)
        entry = {
            "n_cells": len(cs),
            "plans_per_cell": statistics.fmean(len(c.times) for c in cs) if cs else None,
            "current": [
                score([c for c in r if name == "all" or c.op == name], current) for r in runs
            ],  # fmt: skip
            "fitted": {
                "rule": fitted.record(),
                "describe": fitted.describe(),
                "fit": score(fit_half, fitted.choose),
                "fit_cells": len(fit_half),
                "held_out_cells": len(held),
                "held_out": score(held, fitted.choose),
                "current_held_out": score(held, current),
            },
            "best_in_sample": {
                "rule": in_sample.record(),
                "describe": in_sample.describe(),
                "score": score(cs, in_sample.choose),
            },
            "rule_vs_forced": _rule_vs_forced(cs),
            "split_vs_loop": split_vs_loop(cs) if name != "all" else [],
            "worst": [
                {
                    "cell": f"{c.op} {c.label}",
                    "rule": c.rule_key,
                    "best": c.best_key,
                    "regret": c.times[c.rule_key] / c.best - 1.0,
                }
                for c in sorted(
                    (c for c in cs if c.rule_key in c.times),
                    key=lambda c: -(c.times[c.rule_key] / c.best),
                )[:15]
            ],  # fmt: skip
        }
        if checkout is not None:
            entry["checkout"] = {
                "all": score(cs, checkout),
                "half0": score(fit_half, checkout),
                "half1": score(held, checkout),
            }
        out["ops"][name] = entry
    if len(runs) > 1:
        out["noise"] = noise(runs[0], runs[1])
    return out


def _rule_vs_forced(cells) -> dict:
    d = [abs(c.rule_us / c.times[c.rule_key] - 1.0) for c in cells
         if c.rule_us and c.rule_key in c.times]  # fmt: skip
    if not d:
        return {"n": 0, "median": None, "max": None}
    return {"n": len(d), "median": statistics.median(d), "max": max(d)}


def report_cli(runs, write=None, json_out=None) -> int:
    from .regret_report import report_cli as cli

    return cli(runs, write, json_out)
