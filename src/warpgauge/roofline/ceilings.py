"""The run's measured roofs, read from its artifacts (never typed in, never keyed by GPU name).

Two formats are read:

- version 1 (``results/20261130-065525-default``): ``ceilings.json`` holds one calibration
  measurement per candidate (copy, square ``torch.mm`` per dtype and size); ``run.json``'s
  ``ceilings`` names the selected values (``copy_tbps``, ``mm_tflops[dtype]``). No confirmation
  runs: the roof is that single median, and its range is unknown (``confirmations`` = 0).
- with confirmations (the bench's calibrate-select-confirm, ``bench/ceilings.py``): for each
  selected candidate one measurement with ``extra.role == "confirmation"`` whose ``extra.runs``
  holds the seven runs (each a ``median_us``) and whose ``tbps``/``tflops`` is the ceiling (the
  rate of the median run); ``run.json`` adds ``copy_tbps_range`` / ``mm_tflops_range[dtype]``.
  Also accepted, for other writers:
  ``run.json`` ``ceilings.copy_tbps_range`` / ``mm_tflops_range[dtype]`` (``[min, max]``), and in
  ``ceilings.json`` a ``confirmations`` entry, either top level (keyed ``copy``/``memory``/
  ``mm_<dtype>``/``<dtype>``) or inside a measurement, holding ``{median, min, max, n}``, a list
  of rates, or a list of records with ``tbps``/``tflops``.

The roof used is always the median (of the confirmations when there are any); min and max are
drawn as a band.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Roof:
    name: str  # "memory" or "tensor:<dtype>"
    unit: str  # "TB/s" or "TFLOP/s"
    median: float
    min: float | None
    max: float | None
    # independent confirmation runs behind median/min/max: 0 = calibration only, None = a range
    # was recorded without its count
    confirmations: int | None
    source: str

    def as_dict(self) -> dict:
        return asdict(self)


def _rates(obj, rate_key: str) -> dict | None:
    """{median, min, max, n} from one ``confirmations`` value, or None if unreadable."""
    if isinstance(obj, dict):
        if "median" in obj:
            return {
                "median": float(obj["median"]),
                "min": _f(obj.get("min")),
                "max": _f(obj.get("max")),
                "n": int(obj.get("n") or len(obj.get("runs") or obj.get("values") or []) or 0),
            }
        for key in ("runs", "values", "samples"):
            if key in obj:
                return _rates(obj[key], rate_key)
        return None
    if isinstance(obj, list) and obj:
        vals = []
        for v in obj:
            if isinstance(v, (int, float)):
                vals.append(float(v))
            elif isinstance(v, dict):
                r = v.get(rate_key, v.get("rate", v.get("value")))
                if isinstance(r, (int, float)):
                    vals.append(float(r))
        if vals:
            return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
                    "n": len(vals)}  # fmt: skip
    return None


def _f(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) else None


def _top_level(ceilings: dict | None, keys: tuple[str, ...], rate_key: str) -> dict | None:
    conf = (ceilings or {}).get("confirmations")
    if conf is None:
        conf = ((ceilings or {}).get("extra") or {}).get("confirmations")
    if isinstance(conf, dict):
        for k in keys:
            if k in conf:
                got = _rates(conf[k], rate_key)
                if got:
                    return got
    if isinstance(conf, list):  # a list of {kind, dtype, ...} records
        for c in conf:
            if not isinstance(c, dict):
                continue
            tag = c.get("name") or c.get("kind") or c.get("ceiling")
            tag2 = f"{c.get('kind')}_{c.get('dtype')}" if c.get("dtype") else None
            if tag in keys or tag2 in keys or c.get("dtype") in keys:
                got = _rates(c, rate_key)
                if got:
                    return got
    return None


def _runs_of(m: dict, rate_key: str) -> dict | None:
    """{median, min, max, n} of a bench confirmation measurement (``extra.role == "confirmation"``,
    ``extra.runs[*].median_us``): rates from the measurement's own work; the median is the
    measurement's rate (the rate of the median run, as run.json reports it)."""
    extra = m.get("extra") or {}
    runs = extra.get("runs")
    if extra.get("role") != "confirmation" or not isinstance(runs, list) or not runs:
        return None
    amount = (m.get("work") or {}).get("bytes" if rate_key == "tbps" else "flops")
    times = [r.get("median_us") for r in runs if isinstance(r, dict)]
    if not amount or not times or any(not isinstance(t, (int, float)) or t <= 0 for t in times):
        return None
    rates = [amount / t / 1e6 for t in times]
    median = m.get(rate_key) if isinstance(m.get(rate_key), (int, float)) else None
    return {"median": float(median if median is not None else statistics.median(rates)),
            "min": min(rates), "max": max(rates), "n": len(rates)}  # fmt: skip


def _in_measurement(ceilings: dict | None, kind: str, dtype: str | None, rate_key: str):
    for m in (ceilings or {}).get("measurements", []):
        if m.get("kind") != kind or (dtype is not None and m.get("dtype") != dtype):
            continue
        got = _runs_of(m, rate_key)
        if got:
            return got, m.get("name")
        for holder in (m, m.get("extra") or {}):
            if "confirmations" in holder:
                got = _rates(holder["confirmations"], rate_key)
                if got:
                    return got, m.get("name")
    return None, None


def read_roofs(run: dict, ceilings: dict | None) -> dict:
    """{"memory": Roof | None, "tensor": {dtype: Roof}} from run.json and ceilings.json."""
    summary = run.get("ceilings") or {}
    out: dict = {"memory": None, "tensor": {}}
    copy = summary.get("copy_tbps")
    conf, where = _in_measurement(ceilings, "copy", None, "tbps")
    conf = conf or _top_level(ceilings, ("copy", "memory", "copy_tbps", "bandwidth"), "tbps")
    rng = summary.get("copy_tbps_range")
    if conf or copy:
        out["memory"] = _roof("memory", "TB/s", copy, conf, rng, where or "copy")
    for dtype, v in (summary.get("mm_tflops") or {}).items():
        if v is None:
            continue
        conf, where = _in_measurement(ceilings, "mm", dtype, "tflops")
        conf = conf or _top_level(ceilings, (f"mm_{dtype}", dtype, f"mm:{dtype}"), "tflops")
        rng = (summary.get("mm_tflops_range") or {}).get(dtype)
        out["tensor"][dtype] = _roof(
            f"tensor:{dtype}", "TFLOP/s", v, conf, rng, where or f"mm {dtype}"
        )
    return out


def _roof(name, unit, selected, conf, rng, where) -> Roof:
    if conf:
        return Roof(name, unit, conf["median"], conf["min"], conf["max"], conf["n"],
                    f"ceilings.json confirmations ({where})")  # fmt: skip
    lo, hi = (rng or [None, None])[:2] if isinstance(rng, (list, tuple)) else (None, None)
    if lo is None:
        note = "run.json ceilings: calibration median, no confirmation runs"
        return Roof(name, unit, float(selected), None, None, 0, note)
    return Roof(name, unit, float(selected), _f(lo), _f(hi), None, "run.json ceilings (range)")
