"""Regret scores of row-plan rules over a plans-mode grid, from the run's artifacts alone.

A cell is one (operator, dtype, rows x width, lane) case of a ``--mode plans`` run; its plan
times are the forced-plan providers' median device times. The regret of a rule in a cell is
``time of the plan the rule picks / best plan time in the cell - 1``, both forced-plan times of
the same run, so the rule's choice is scored, not the noise between two providers running the
same kernel (that gap is reported separately as ``rule vs its forced plan``). A rule whose plan
was not measured in a cell (not a candidate, failed its gate) is scored as missing there.

Rules: ``current`` (the plan ``RowPlan.for_shape`` chose in the run, recorded by the ``rule``
provider) and a family of threshold rules ``Rule(resident_max, split_rows_per_sm, looped_block,
split_block)``. The fit picks the family member with the lowest mean regret on one half of the
cells (by a hash of the cell label) and scores it on the other half. No torch needed.
"""

from __future__ import annotations

import itertools
import statistics
import zlib
from dataclasses import asdict, dataclass

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

    @property
    def best(self) -> float:
        return min(self.times.values())

    @property
    def best_key(self) -> str:
        return min(self.times, key=self.times.get)

    def half(self) -> int:
        return zlib.crc32(self.label.encode()) & 1


@dataclass(frozen=True)
class Rule:
    resident_max: int = 32768
    split_rows_per_sm: float = 1.0
    looped_block: int = 8192
    split_block: int = 4096

    def key(self, rows: int, width: int, sm_count: int) -> str:
        if width <= self.resident_max:
            return "resident"
        if rows < self.split_rows_per_sm * sm_count:
            return f"split_{self.split_block}"
        return f"looped_{self.looped_block}"

    def name(self) -> str:
        return (f"resident<={self.resident_max}, split below {self.split_rows_per_sm:g} rows/SM, "
                f"looped {self.looped_block}, split {self.split_block}")  # fmt: skip


FAMILY = [
    Rule(rm, s, lb, sb)
    for rm, s, lb, sb in itertools.product(
        (8192, 16384, 32768), (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0), (1024, 2048, 4096, 8192),
        (2048, 4096),
    )
]  # fmt: skip


def load_cells(run_dir) -> list[Cell]:
    from warpgauge import artifacts

    run = artifacts.load_run(run_dir)
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
        extra = (rule or {}).get("extra") or {}
        ok_rule = rule is not None and rule["status"] == "ok"
        cells.append(Cell(
            op=case["op"], dtype=case["dtype"], label=case["shape_label"], lane=case["lane"],
            rows=int(case["shape"]["rows"]), width=int(case["shape"]["width"]),
            sm_count=int(extra.get("sm_count") or 0), times=times,
            rule_key=extra.get("plan"), rule_us=rule["device_time"]["median_us"] if ok_rule else None,
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


def family_rule(rule: Rule):
    return lambda c: rule.key(c.rows, c.width, c.sm_count)


def fit(cells) -> tuple[Rule, float]:
    """The family member with the lowest mean regret on ``cells`` (missing = MISSING_REGRET)."""
    best, best_v = FAMILY[0], float("inf")
    for rule in FAMILY:
        r, missing = regrets(cells, family_rule(rule))
        n = len(r) + missing
        if not n:
            continue
        v = (sum(r) + MISSING_REGRET * missing) / n
        if v < best_v:
            best, best_v = rule, v
    return best, best_v


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


def noise(a: list[Cell], b: list[Cell]) -> dict:
    """Run-to-run change of the same plan in the same cell: median and p90 of |t_a / t_b - 1|."""
    idx = {(c.op, c.dtype, c.label, c.lane): c for c in b}
    d = []
    for c in a:
        o = idx.get((c.op, c.dtype, c.label, c.lane))
        if o is None:
            continue
        d += [abs(t / o.times[k] - 1.0) for k, t in c.times.items() if k in o.times]
    if not d:
        return {"n": 0, "median": None, "p90": None}
    s = sorted(d)
    return {"n": len(s), "median": statistics.median(s), "p90": s[int(round(0.9 * (len(s) - 1)))]}


def summarize(run_dirs) -> dict:
    runs = [load_cells(d) for d in run_dirs]
    cells = runs[0]
    ops = sorted({c.op for c in cells})
    groups = {"all": cells, **{op: [c for c in cells if c.op == op] for op in ops}}
    out: dict = {"runs": [str(d) for d in run_dirs], "n_cells": len(cells), "ops": {}}
    for name, cs in groups.items():
        fit_half = [c for c in cs if c.half() == 0]
        held = [c for c in cs if c.half() == 1]
        fitted, fit_v = fit(fit_half)
        in_sample, _ = fit(cs)
        entry = {
            "n_cells": len(cs),
            "plans_per_cell": statistics.fmean(len(c.times) for c in cs) if cs else None,
            "current": [
                score([c for c in r if name == "all" or c.op == name], current) for r in runs
            ],  # fmt: skip
            "fitted": {
                "rule": asdict(fitted),
                "describe": fitted.name(),
                "fit_mean": fit_v,
                "fit_cells": len(fit_half),
                "held_out_cells": len(held),
                "held_out": score(held, family_rule(fitted)),
                "current_held_out": score(held, current),
            },  # fmt: skip
            "best_in_sample": {
                "rule": asdict(in_sample),
                "describe": in_sample.name(),
                "score": score(cs, family_rule(in_sample)),
            },  # fmt: skip
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
