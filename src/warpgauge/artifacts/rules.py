"""Rules a schema-valid record must also satisfy: statistics that describe their samples, derived
numbers that follow their definitions, consistent run bookkeeping, and the cases a run's config
asks for. Each ``*_problems`` function returns readable lines (empty: fine) and never raises on a
schema-valid record.
"""

from __future__ import annotations

import math

from .files import BEST_PYTORCH_FAMILIES, DERIVED_RTOL, MAX_LISTED, STATS_ATOL_US, STATS_RTOL
from .schemas import make_case_id

DERIVED_KEYS = ("tbps", "tflops", "speedup_vs_best_pytorch", "pct_copy_ceiling")


def _close(a: float, b: float, rtol: float, atol: float = 0.0) -> bool:
    return abs(a - b) <= atol + rtol * abs(b)


def stats_problems(s: dict, where: str) -> list[str]:
    """Consistency of a stats object with its own samples (the schema checks types only).

    n == len(samples); min/max equal the samples' extremes; min <= p10 <= median <= p90 <= max;
    the median lies between the two middle samples; mean equals the samples' mean; 0 <= mad <=
    max - min. Equalities hold to 1 ns plus 1e-6 relative.
    """
    p = []
    xs = s["samples_us"]
    if s["n"] != len(xs):
        p.append(f"{where}.n is {s['n']} but samples_us holds {len(xs)} values")
    srt = sorted(xs)

    def eq(a, b):
        return _close(a, b, STATS_RTOL, STATS_ATOL_US)

    def le(a, b):
        return a <= b + STATS_ATOL_US + STATS_RTOL * abs(b)

    if not eq(s["min_us"], srt[0]):
        p.append(f"{where}.min_us is {s['min_us']} but the smallest sample is {srt[0]}")
    if not eq(s["max_us"], srt[-1]):
        p.append(f"{where}.max_us is {s['max_us']} but the largest sample is {srt[-1]}")
    chain = [("min_us", s["min_us"]), ("p10_us", s["p10_us"]), ("median_us", s["median_us"])]
    chain += [("p90_us", s["p90_us"]), ("max_us", s["max_us"])]
    for (na, a), (nb, b) in zip(chain, chain[1:]):
        if not le(a, b):
            p.append(f"{where}: {na} ({a}) > {nb} ({b})")
    lo, hi = srt[(len(srt) - 1) // 2], srt[len(srt) // 2]
    if not (le(lo, s["median_us"]) and le(s["median_us"], hi)):
        p.append(f"{where}.median_us is {s['median_us']}, outside the middle samples [{lo}, {hi}]")
    mean = math.fsum(xs) / len(xs)
    if not eq(s["mean_us"], mean):
        p.append(f"{where}.mean_us is {s['mean_us']} but the samples' mean is {mean:.6g}")
    if not le(s["mad_us"], srt[-1] - srt[0]):
        p.append(f"{where}.mad_us ({s['mad_us']}) exceeds the samples' range")
    return p


def excluded_from_best(provider: dict) -> str | None:
    """Why the runner left ``provider`` out of "best PyTorch" (``extra.excluded_from_best``, e.g.
    a CUDA-graph-tree lane whose replay copies its inputs), or None."""
    why = (provider.get("extra") or {}).get("excluded_from_best")
    return str(why) if why else None


def best_pytorch(case: dict) -> dict | None:
    """The fastest ok provider of a PyTorch family (``BEST_PYTORCH_FAMILIES``) by device median,
    skipping any the runner marked ``extra.excluded_from_best``: the one every "vs best PyTorch"
    figure is measured against. None if there is none."""
    best = None
    for pr in case["providers"]:
        if pr["status"] != "ok" or pr["family"] not in BEST_PYTORCH_FAMILIES:
            continue
        if excluded_from_best(pr):
            continue
        if best is None or pr["device_time"]["median_us"] < best["device_time"]["median_us"]:
            best = pr
    return best


def expected_derived(case: dict, provider: dict, copy_tbps: float | None) -> dict:
    """The derived numbers of ``provider`` in ``case`` by definition (all null unless status ok):

    - tbps = work.bytes / device_time.median_us / 1e6 (requested bytes per second / 1e12); null if bytes == 0
    - tflops = work.flops / device_time.median_us / 1e6; null if flops == 0
    - pct_copy_ceiling = 100 * tbps / copy_tbps (the run's measured copy ceiling); null without either
    - speedup_vs_best_pytorch = (lowest device median among ok providers of family "pytorch" or
      "compile", except those marked extra.excluded_from_best) / this provider's device median;
      > 1 means faster than the best PyTorch option.
    """
    out = dict.fromkeys(DERIVED_KEYS)
    if provider["status"] != "ok" or not provider.get("device_time"):
        return out
    med = provider["device_time"]["median_us"]
    if case["work"]["bytes"] > 0:
        out["tbps"] = case["work"]["bytes"] / med / 1e6
    if case["work"]["flops"] > 0:
        out["tflops"] = case["work"]["flops"] / med / 1e6
    if out["tbps"] is not None and copy_tbps:
        out["pct_copy_ceiling"] = 100.0 * out["tbps"] / copy_tbps
    best_pr = best_pytorch(case)
    best = None if best_pr is None else best_pr["device_time"]["median_us"]
    if best is not None:
        out["speedup_vs_best_pytorch"] = best / med
    return out


def fill_derived(case: dict, copy_tbps: float | None = None) -> dict:
    """Set every provider's ``derived`` in ``case`` by the rules of ``expected_derived``
    (in place; returns ``case``). ``copy_tbps`` is the run's measured copy ceiling or None."""
    for pr in case["providers"]:
        extra = {k: v for k, v in (pr.get("derived") or {}).items() if k not in DERIVED_KEYS}
        pr["derived"] = {**expected_derived(case, pr, copy_tbps), **extra}
    return case


def case_ceilings(case: dict, run: dict | None = None) -> dict | None:
    """The ceilings a case's rates are checked against: those of the rank (GPU) that measured it
    in a multi-GPU run (``extra.rank.ceilings``), else the run's (None without either)."""
    own = ((case.get("extra") or {}).get("rank") or {}).get("ceilings")
    if isinstance(own, dict):
        return own
    return run["ceilings"] if run is not None else None


def case_problems(case: dict, run: dict | None = None) -> list[str]:
    """Rules a schema-valid case record must also satisfy (``run``: its run record, if known)."""
    p = []
    cid = make_case_id(case["op"], case["dtype"], case["shape_label"], case["lane"])
    if case["case_id"] != cid:
        p.append(f"$.case_id is {case['case_id']!r} but op/dtype/shape_label/lane say {cid!r}")
    if run is not None and case["run_id"] != run["run_id"]:
        p.append(f"$.run_id is {case['run_id']!r} but run.json says {run['run_id']!r}")
    names = [pr["name"] for pr in case["providers"]]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        p.append(f"$.providers: duplicate provider names {dupes}")
    for n in case["order"]:
        if n not in names:
            p.append(f"$.order names {n!r}, which is not a provider of this case")
    baselines = [pr["name"] for pr in case["providers"] if pr["baseline"]]
    if len(baselines) > 1:
        p.append(f"$.providers: more than one baseline: {baselines}")
    ceilings = case_ceilings(case, run)
    copy_tbps = ceilings.get("copy_tbps") if ceilings is not None else None
    for i, pr in enumerate(case["providers"]):
        where = f"$.providers[{i}]"
        if pr["status"] == "ok" and pr["name"] not in case["order"]:
            p.append(f"{where}: {pr['name']!r} was timed (status ok) but is not in $.order")
        for key in ("device_time", "host_time"):
            if pr.get(key):
                p += stats_problems(pr[key], f"{where}.{key}")
        want = expected_derived(case, pr, copy_tbps)
        for key in DERIVED_KEYS:  # further keys in derived are other rules' business
            got = pr["derived"].get(key)
            if got is None:
                continue
            if key == "pct_copy_ceiling" and ceilings is None:
                continue  # needs the run's ceiling; checked by validate_run
            if want[key] is None:
                p.append(
                    f"{where}.derived.{key} is {got} but must be null here (see expected_derived)"
                )
            elif not _close(got, want[key], DERIVED_RTOL):
                p.append(f"{where}.derived.{key} is {got} but its definition gives {want[key]:.6g}")
    return p


def run_problems(run: dict) -> list[str]:
    """Rules a schema-valid run record must also satisfy."""
    p = []
    expected = run["expected_cases"]
    finished, missing = set(run["finished_cases"]), set(run["missing_cases"])
    if finished & missing:
        p.append(f"$: cases both finished and missing: {sorted(finished & missing)[:MAX_LISTED]}")
    if (finished | missing) != set(expected):
        odd = sorted((finished | missing) ^ set(expected))
        p.append(
            "$: finished_cases + missing_cases must be exactly expected_cases; "
            f"they differ in {len(odd)} case(s), e.g. {odd[:3]}"
        )
    if run["status"] == "complete" and missing:
        p.append(f"$.status is 'complete' but {len(missing)} case(s) are missing")
    return p


def ceilings_problems(ceilings: dict, run: dict | None = None) -> list[str]:
    """Each measurement's TB/s / TFLOP/s matches its work and median; run.json's summary values
    are ones that ceilings.json measured."""
    p = []
    if run is not None and ceilings["run_id"] != run["run_id"]:
        p.append(f"$.run_id is {ceilings['run_id']!r} but run.json says {run['run_id']!r}")
    for i, m in enumerate(ceilings["measurements"]):
        where = f"$.measurements[{i}]"
        p += stats_problems(m["device_time"], f"{where}.device_time")
        med = m["device_time"]["median_us"]
        for key, amount in (("tbps", m["work"]["bytes"]), ("tflops", m["work"]["flops"])):
            if m[key] is not None and not _close(m[key], amount / med / 1e6, DERIVED_RTOL):
                p.append(
                    f"{where}.{key} is {m[key]} but work / median gives {amount / med / 1e6:.6g}"
                )
    if run is not None:
        summary = run["ceilings"]
        copies = [m["tbps"] for m in ceilings["measurements"] if m["kind"] == "copy"]
        if summary["copy_tbps"] is not None and not any(
            _close(summary["copy_tbps"], v, DERIVED_RTOL) for v in copies
        ):
            p.append(
                f"run.json ceilings.copy_tbps ({summary['copy_tbps']}) is no copy measurement's tbps"
            )
        for dtype, v in summary["mm_tflops"].items():
            mms = [
                m["tflops"]
                for m in ceilings["measurements"]
                if m["kind"] == "mm" and m["dtype"] == dtype
            ]
            if v is not None and not any(_close(v, t, DERIVED_RTOL) for t in mms):
                p.append(
                    f"run.json ceilings.mm_tflops.{dtype} ({v}) is no {dtype} mm measurement's tflops"
                )
    return p
