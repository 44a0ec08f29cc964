"""The profile artifact: ``<out>/<profile-id>/profile.json``, the raw ncu pages it came from, and
a SHA-256 manifest (the run manifest's format, so ``artifacts.sha256_file`` rules apply).

``build_record`` turns parsed raw-page rows plus the runner's launch plan into per-target entries:
the kernels each target launched (grouped by the marker kernel's grid size), their metrics, and
the byte-model check: measured DRAM bytes read and written against the target's analytical
model, with a flag when the gap exceeds ``GAP_PCT``. ``validate_profile`` re-checks the manifest,
the schema (when jsonschema is installed) and every derived number.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from warpgauge import artifacts

from . import ncu as ncu_mod
from .schema import PROFILE_SCHEMA

PROFILE_FILE = "profile.json"
SCHEMA_VERSION = 1
# A measured DRAM count more than this far from the model is flagged. Seed 003's INT4 kernel read
# 0.05% over its model; a few percent is room for page-granular metadata and a partial last line.
GAP_PCT = 3.0
# Outputs smaller than this fraction of L2 can stay there, dirty, when the kernel ends: DRAM write
# counters then read low by design, so a write gap there is reported but not flagged.
WRITE_BACK_NOTE = (
    "L2 is write-back: written lines still resident when the kernel ends are not in "
    "dram__bytes_write, so a write count below the model is expected for outputs that fit in L2"
)

MULTI_KERNEL_NOTE = (
    "several kernels: --cache-control all flushes the caches before each one, so an input that a "
    "later kernel of the same call reads again is counted again (in a real sequence it may hit L2)"
)


def gap_pct(measured: float | None, model: float) -> float | None:
    if measured is None or model <= 0:
        return None
    return 100.0 * (measured - model) / model


def _grid_index(row: ncu_mod.KernelRow) -> int | None:
    v = row.number("launch__grid_size")
    if v is not None:
        return int(v) - 1
    g = row.values.get("Grid Size")
    if isinstance(g, (int, float)):
        return int(g) - 1
    if isinstance(g, str):
        nums = [int(n) for n in re.findall(r"\d+", g)]
        if nums:
            return math.prod(nums) - 1
    return None


_NVTX_COL = "Push/Pop_Range"


def nvtx_range(row: ncu_mod.KernelRow, prefix: str) -> str | None:
    """The target name in the row's NVTX push/pop range (``... "<default domain>:wg:NAME:..."``)."""
    for k, v in row.values.items():
        if _NVTX_COL in k and isinstance(v, str) and prefix in v:
            return v.split(prefix, 1)[1].split(":", 1)[0].strip('"')
    return None


def group_rows(
    rows: list[ncu_mod.KernelRow], marker: str | None, names: list[str] | None = None,
    prefix: str = "wg:",
) -> dict[int, list[ncu_mod.KernelRow]]:  # fmt: skip
    """Target index -> its kernels: by the NVTX range of each row when ncu reported ranges
    (``names``: the plan's target names, in index order), else by the marker kernel that opened
    each range (the marker itself dropped)."""
    if names is not None and any(nvtx_range(r, prefix) for r in rows):
        index = {n: i for i, n in enumerate(names)}
        by_nvtx: dict[int, list[ncu_mod.KernelRow]] = {}
        for r in sorted(rows, key=lambda r: r.id):
            if marker and marker in r.name:
                continue
            i = index.get(nvtx_range(r, prefix) or "")
            if i is not None:
                by_nvtx.setdefault(i, []).append(r)
        return by_nvtx
    groups: dict[int, list[ncu_mod.KernelRow]] = {}
    if not marker:
        return groups
    current = None
    for r in sorted(rows, key=lambda r: r.id):
        if marker in r.name:
            current = _grid_index(r)
            if current is not None:
                groups.setdefault(current, [])
            continue
        if current is not None:
            groups[current].append(r)
    return groups


def kernel_entry(row: ncu_mod.KernelRow, fields) -> dict:
    metrics, names = {}, {}
    for f in ncu_mod.FIELDS:
        name, value = ncu_mod.pick(row, f, fields)
        metrics[f] = value
        if name:
            names[f] = name
    return {
        "id": row.id,
        "name": row.name,
        "metrics": metrics,
        "metric_names": names,
        "stalls": ncu_mod.stalls(row),
    }


def target_entry(target, plan_entry: dict | None, kernels: list[dict], l2_bytes=None) -> dict:
    """One target's record: model, measured sums over its kernels, gaps and the flag."""
    model = {"read": target.model.read, "write": target.model.write, "total": target.model.total}
    entry = {
        "name": target.name,
        "op": target.op,
        "family": target.family,
        "kernel_family": target.kernel_family,
        "dtype": target.dtype,
        "shape": target.shape,
        "model_bytes": model,
        "plan": (plan_entry or {}).get("plan"),
        "status": "ok",
        "error": None,
        "kernels": kernels,
        "measured_bytes": None,
        "gap_pct": None,
        "flag": None,
    }
    if plan_entry is None or not plan_entry.get("built"):
        entry["status"] = "not built"
        entry["error"] = (plan_entry or {}).get("error") or "not in the runner's plan"
        return entry
    if not kernels:
        entry["status"] = "no kernels"
        entry["error"] = "ncu recorded no kernel for this target (timed out or filtered)"
        return entry
    read = _sum(k["metrics"]["dram_bytes_read"] for k in kernels)
    write = _sum(k["metrics"]["dram_bytes_write"] for k in kernels)
    total = None if read is None or write is None else read + write
    entry["measured_bytes"] = {"read": read, "write": write, "total": total}
    gaps = {
        "read": gap_pct(read, model["read"]),
        "write": gap_pct(write, model["write"]),
        "total": gap_pct(total, model["total"]),
    }
    entry["gap_pct"] = gaps
    entry["flag"] = flag_for(gaps, model, l2_bytes)
    if len(kernels) > 1:
        entry["flag"]["note"] = "; ".join(
            n for n in (entry["flag"]["note"], MULTI_KERNEL_NOTE) if n
        )
    return entry


def flag_for(gaps: dict, model: dict, l2_bytes: int | None, threshold: float = GAP_PCT) -> dict:
    """Is the byte model off? ``read`` beyond ``GAP_PCT`` always flags; ``write`` beyond it flags
    unless the output fits in L2 and the count is low (write-back, see WRITE_BACK_NOTE)."""
    reasons = []
    r, w = gaps["read"], gaps["write"]
    if r is None:
        reasons.append("no DRAM read count")
    elif abs(r) > threshold:
        reasons.append(f"DRAM read {r:+.2f}% vs model")
    note = None
    if w is not None and abs(w) > threshold:
        fits = l2_bytes is not None and model["write"] <= l2_bytes
        if w < 0 and fits:
            note = WRITE_BACK_NOTE
        else:
            reasons.append(f"DRAM write {w:+.2f}% vs model")
    return {"over_threshold": bool(reasons), "threshold_pct": threshold, "reasons": reasons,
            "note": note}  # fmt: skip


def _sum(values) -> float | None:
    vals = list(values)
    if not vals or any(v is None for v in vals):
        return None
    return float(sum(vals))


def build_record(
    profile_id: str,
    targets: list,
    plans: list[dict],
    rows: list[ncu_mod.KernelRow],
    discovery: ncu_mod.Discovery | None,
    meta: dict,
) -> dict:
    """The profile.json record. ``plans``: the runner's plan files (one per ncu process), each
    with the indices of its own target list; ``rows`` are grouped per plan by ``meta['groups']``."""
    fields = discovery.fields if discovery else None
    by_name = {}
    for plan, plan_rows in zip(plans, meta.pop("_rows_per_plan", [rows])):
        names = [pe["name"] for pe in sorted(plan["targets"], key=lambda e: e["index"])]
        groups = group_rows(plan_rows, plan.get("marker"), names, plan.get("nvtx_prefix", "wg:"))
        for pe in plan["targets"]:
            ks = [kernel_entry(r, fields) for r in groups.get(pe["index"], [])]
            by_name[pe["name"]] = (pe, ks)
    l2 = (meta.get("gpu") or {}).get("l2_bytes")
    entries = []
    for t in targets:
        pe, ks = by_name.get(t.name, (None, []))
        entries.append(target_entry(t, pe, ks, l2))
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "profile",
        "profile_id": profile_id,
        "created_at": artifacts.utc_now(),
        **meta,
        "gap_threshold_pct": GAP_PCT,
        "targets": entries,
    }


# ------------------------------------------------------------------------------ manifest


def write_manifest(out_dir: Path, profile_id: str) -> Path:
    """manifest.json over every file in ``out_dir`` (schema "manifest"; no jsonschema needed)."""
    files = {
        rel: {
            "sha256": artifacts.sha256_file(out_dir / rel),
            "bytes": (out_dir / rel).stat().st_size,
        }
        for rel in artifacts.list_files(out_dir)
        if rel != artifacts.MANIFEST_FILE and not rel.endswith(".tmp")
    }
    record = {
        "schema_version": 1,
        "kind": "manifest",
        "run_id": profile_id,
        "files": dict(sorted(files.items())),
    }
    return artifacts.atomic_write_json(out_dir / artifacts.MANIFEST_FILE, record)


def validate_profile(out_dir: str | Path) -> list[str]:
    """Every problem with a profile directory (empty list: valid)."""
    out_dir = Path(out_dir)
    problems: list[str] = []
    man_path = out_dir / artifacts.MANIFEST_FILE
    if not man_path.is_file():
        return [f"{artifacts.MANIFEST_FILE}: missing"]
    man = artifacts.read_json(man_path)
    listed = man.get("files", {})
    for rel, e in listed.items():
        p = out_dir / rel
        if not p.is_file():
            problems.append(f"{rel}: listed in the manifest but missing")
        elif p.stat().st_size != e["bytes"] or artifacts.sha256_file(p) != e["sha256"]:
            problems.append(f"{rel}: checksum mismatch")
    for rel in artifacts.list_files(out_dir):
        if rel != artifacts.MANIFEST_FILE and rel not in listed:
            problems.append(f"{rel}: not listed in the manifest")
    if PROFILE_FILE not in listed:
        problems.append(f"{PROFILE_FILE}: not in the manifest")
        return problems
    rec = artifacts.read_json(out_dir / PROFILE_FILE)
    if man.get("run_id") != rec.get("profile_id"):
        problems.append("manifest run_id differs from profile_id")
    problems += [f"{PROFILE_FILE}: {p}" for p in schema_problems(rec)]
    problems += [f"{PROFILE_FILE}: {p}" for p in record_problems(rec)]
    return problems


def schema_problems(rec: dict) -> list[str]:
    try:
        import jsonschema
    except ImportError:
        return []  # the GPU machine has no jsonschema; CPU validation covers it
    v = jsonschema.Draft202012Validator(PROFILE_SCHEMA)
    return sorted(
        f"{'/'.join(str(p) for p in e.absolute_path) or '$'}: {e.message}"
        for e in v.iter_errors(rec)
    )


def record_problems(rec: dict) -> list[str]:
    """Cross-field rules: measured sums equal the kernels' sums, gaps follow from them, flags
    follow from the gaps and the threshold."""
    p = []
    thr = rec.get("gap_threshold_pct", GAP_PCT)
    l2 = (rec.get("gpu") or {}).get("l2_bytes")
    for i, t in enumerate(rec.get("targets", [])):
        where = f"targets[{i}] ({t.get('name')})"
        if t.get("status") != "ok":
            continue
        ks = t["kernels"]
        for side in ("read", "write"):
            want = _sum(k["metrics"][f"dram_bytes_{side}"] for k in ks)
            got = t["measured_bytes"][side]
            if want != got:
                p.append(f"{where}: measured_bytes.{side} {got} but its kernels sum to {want}")
            g = gap_pct(got, t["model_bytes"][side])
            if (g is None) != (t["gap_pct"][side] is None) or (
                g is not None
                and not math.isclose(g, t["gap_pct"][side], rel_tol=1e-6, abs_tol=1e-9)
            ):
                p.append(f"{where}: gap_pct.{side} {t['gap_pct'][side]} but the bytes give {g}")
        model = t["model_bytes"]
        if model["read"] + model["write"] != model["total"]:
            p.append(f"{where}: model_bytes.total is not read + write")
        want_flag = flag_for(t["gap_pct"], model, l2, thr)["over_threshold"]  # notes aside
        if bool(t["flag"]["over_threshold"]) != want_flag:
            p.append(
                f"{where}: flag.over_threshold {t['flag']['over_threshold']} but gaps say {want_flag}"
            )
    return p
