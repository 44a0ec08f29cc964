"""Run artifacts: versioned JSON records, atomic writes, a SHA-256 manifest, and a validator.

A run directory (``results/<run-id>/``) holds ``run.json``, one ``cases/<case-file>.json`` per
(operator, dtype, shape, lane), ``ceilings.json``, ``manifest.json`` and, once rendered,
``report/``. docs/artifacts.md describes every field; the JSON Schemas in ``schemas/`` are the
machine-readable form. The runner computes every number; this module only checks and stores them.

Writing (the runner's calls, in order)::

    write_run(run_dir, run_record)        # status "running", finished_cases [], missing_cases = expected
    write_ceilings(run_dir, ceilings)     # optional, then write_run again with run["ceilings"] filled
    fill_derived(case, copy_tbps)         # optional helper: derived numbers by the documented rules
    write_case(run_dir, case)             # per finished case: validate, write atomically, update manifest
    finish_run(run_dir, "complete")       # or "interrupted": finished/missing from the case files

Every ``write_*`` validates first (schema, then cross-field rules) and raises ``ArtifactError``
listing every problem, so a bad record never reaches the disk. Reading: ``load_run``. Checking:
``validate_run`` (schema, checksums, coverage, status); ``validate_cli`` for ``warpgauge validate``.

jsonschema is imported inside the functions that validate, never at import time.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
RUN_FILE = "run.json"
CEILINGS_FILE = "ceilings.json"
MANIFEST_FILE = "manifest.json"
CASES_DIR = "cases"
REPORT_DIR = "report"
SCHEMA_NAMES = ("run", "case", "ceilings", "manifest")
_SCHEMA_FILES = (*SCHEMA_NAMES, "common")

# Families whose best (lowest-median) provider is "the best PyTorch provider": what a user would
# pick without warpgauge, eager or compiled.
BEST_PYTORCH_FAMILIES = ("pytorch", "compile")
# Derived numbers must match their definition to 0.5% (room for rounding, e.g. a ceiling stored
# to 3 significant digits; a wrong formula is off by far more).
DERIVED_RTOL = 5e-3
# Stats must match their samples to 1 ns plus this relative tolerance.
STATS_ATOL_US = 1e-3
STATS_RTOL = 1e-6

_TMP_SUFFIX = ".tmp"
_INLINE_WIDTH = 88  # flat objects up to this many characters are written on one line
_MAX_LISTED = 10  # coverage problems list at most this many ids, then a count


class ArtifactError(ValueError):
    """A record failed validation; ``problems`` lists every reason (with JSON paths)."""

    def __init__(self, what: str, problems: list[str]):
        self.what = what
        self.problems = list(problems)
        lines = "\n  ".join(self.problems)
        super().__init__(f"{what}: {len(self.problems)} problem(s):\n  {lines}")


def utc_now() -> str:
    """The current time as the artifacts spell it: ISO 8601 UTC with a ``Z``, millisecond precision."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ------------------------------------------------------------------------------------ JSON


def _jpath(parts) -> str:
    out = "$"
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif str(p).isidentifier():
            out += f".{p}"
        else:
            out += f"[{json.dumps(str(p))}]"
    return out


def to_plain(obj: Any, _path: tuple = ()) -> Any:
    """A copy of ``obj`` made of JSON types only: dicts with str keys, lists, str, int, finite
    float, bool, None. Tuples become lists; numpy and 0-d torch scalars become Python numbers.

    Raises ValueError for NaN/Infinity (JSON has none: record null and say why) and TypeError
    for anything else, naming the JSON path.
    """
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(
                f"{_jpath(_path)}: {obj!r} is not finite; JSON has no NaN or Infinity "
                "(record null and give the reason)"
            )
        return float(obj)
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"{_jpath(_path)}: key {k!r} is not a string")
            out[k] = to_plain(v, (*_path, k))
        return out
    if isinstance(obj, (list, tuple)):
        return [to_plain(v, (*_path, i)) for i, v in enumerate(obj)]
    if callable(getattr(obj, "item", None)) and tuple(getattr(obj, "shape", (None,))) == ():
        return to_plain(obj.item(), _path)  # numpy scalar, 0-d array or tensor
    raise TypeError(f"{_jpath(_path)}: {type(obj).__name__} is not JSON data")


def dumps(obj: Any) -> str:
    """Deterministic, readable JSON: 2-space indent, lists of scalars and short flat objects on
    one line, insertion order kept, final newline."""

    def enc(o, depth):
        pad = "  " * (depth + 1)
        if isinstance(o, dict):
            if not o:
                return "{}"
            if all(not isinstance(v, (dict, list)) for v in o.values()):
                flat = json.dumps(o, allow_nan=False, ensure_ascii=False, separators=(", ", ": "))
                if len(flat) <= _INLINE_WIDTH:
                    return flat
            items = [f"{pad}{json.dumps(k)}: {enc(v, depth + 1)}" for k, v in o.items()]
            return "{\n" + ",\n".join(items) + "\n" + "  " * depth + "}"
        if isinstance(o, list):
            if all(not isinstance(v, (dict, list)) for v in o):
                return json.dumps(o, allow_nan=False, ensure_ascii=False)
            items = [pad + enc(v, depth + 1) for v in o]
            return "[\n" + ",\n".join(items) + "\n" + "  " * depth + "]"
        return json.dumps(o, allow_nan=False, ensure_ascii=False)

    return enc(to_plain(obj), 0) + "\n"


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform can open a directory
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` so that ``path`` holds either its old content or all of ``data``.

    The bytes go to a temp file in the same directory (``.<name>.<random>.tmp``), are flushed and
    fsynced, then ``os.replace`` swaps it in and the directory is fsynced. On any exception the
    temp file is removed and the old file is untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=_TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return path


def atomic_write_json(path: str | os.PathLike, obj: Any) -> Path:
    """Serialize ``obj`` (see ``dumps``) and write it atomically (see ``atomic_write_bytes``).

    Serialization happens before any file is touched, so an unserializable object (NaN, a
    custom class) raises without leaving anything behind.
    """
    return atomic_write_bytes(path, dumps(obj).encode("utf-8"))


def read_json(path: str | os.PathLike) -> Any:
    """Parse a JSON file (strict UTF-8; NaN/Infinity rejected)."""

    def no_constants(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(Path(path).read_bytes().decode("utf-8"), parse_constant=no_constants)


def _is_temp(relpath: str) -> bool:
    name = relpath.rsplit("/", 1)[-1]
    return name.startswith(".") and name.endswith(_TMP_SUFFIX)


# ------------------------------------------------------------------------------------ schemas


@functools.cache
def _schema_texts() -> dict[str, dict]:
    here = Path(__file__).parent / "schemas"
    return {name: json.loads((here / f"{name}.json").read_text("utf-8")) for name in _SCHEMA_FILES}


def schema(name: str) -> dict:
    """The JSON Schema (Draft 2020-12) for ``name``: "run", "case", "ceilings", "manifest" or
    "common" (shared definitions). Returns a fresh copy."""
    if name not in _SCHEMA_FILES:
        raise ValueError(f"unknown schema {name!r}; expected one of {', '.join(_SCHEMA_FILES)}")
    return json.loads(json.dumps(_schema_texts()[name]))


@functools.cache
def _validator(name: str):
    try:
        from jsonschema import Draft202012Validator
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT202012
    except ImportError as e:
        raise ImportError(
            "validating artifacts needs jsonschema>=4.18 (with referencing): "
            "pip install 'warpgauge[bench]' or the jsonschema wheels"
        ) from e

    texts = _schema_texts()
    registry = Registry().with_resources(
        (s["$id"], Resource.from_contents(s, default_specification=DRAFT202012))
        for s in texts.values()
    )
    if "#" in name:  # a definition, e.g. "common#/$defs/telemetry_snapshot"
        file, pointer = name.split("#", 1)
        target = {"$ref": texts[file]["$id"] + "#" + pointer}
    else:
        target = texts[name]
    return Draft202012Validator(target, registry=registry)


def schema_errors(name: str, obj: Any) -> list[str]:
    """Every way ``obj`` breaks schema ``name`` ("run", "case", "ceilings", "manifest", or a
    definition such as "common#/$defs/telemetry_snapshot"), as sorted ``"$.path: message"`` lines."""
    from jsonschema.exceptions import best_match

    out = []
    for err in _validator(name).iter_errors(obj):
        best = best_match([err]) or err  # descends into anyOf/if-then to the informative error
        msg = best.message
        if len(msg) > 240:
            msg = msg[:200] + " ... " + msg[-30:]
        out.append(f"{_jpath(best.absolute_path)}: {msg}")
    return sorted(set(out))


# ------------------------------------------------------------------------------------ case ids


def make_case_id(op: str, dtype: str, shape_label: str, lane: str) -> str:
    """``"<op>/<dtype>/<shape_label>/<lane>"``, e.g. ``softmax/bfloat16/32768x8192/cold``."""
    return f"{op}/{dtype}/{shape_label}/{lane}"


def case_filename(case_id: str) -> str:
    """The file name (inside ``cases/``) of a case: its id with ``/`` replaced by ``__`` plus
    ``.json``. Raises ValueError for an id that is not ``op/dtype/shape_label/lane``."""
    pattern = _schema_texts()["common"]["$defs"]["case_id"]["pattern"]
    if not isinstance(case_id, str) or not re.fullmatch(pattern, case_id):
        raise ValueError(
            f"case id {case_id!r} is not '<op>/<dtype>/<shape-label>/<lane>' "
            "(lowercase op and dtype, no '/' or spaces in the shape label, lane cold|warm)"
        )
    return case_id.replace("/", "__") + ".json"


# ------------------------------------------------------------------------------------ rules beyond the schema


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


def best_pytorch(case: dict) -> dict | None:
    """The fastest ok provider of a PyTorch family (``BEST_PYTORCH_FAMILIES``) by device median:
    the one every "vs best PyTorch" figure is measured against. None if there is none."""
    best = None
    for pr in case["providers"]:
        if pr["status"] != "ok" or pr["family"] not in BEST_PYTORCH_FAMILIES:
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
      "compile") / this provider's device median; > 1 means faster than the best PyTorch option.
    """
    out = dict.fromkeys(("tbps", "tflops", "speedup_vs_best_pytorch", "pct_copy_ceiling"))
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
        pr["derived"] = expected_derived(case, pr, copy_tbps)
    return case


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
    copy_tbps = run["ceilings"]["copy_tbps"] if run is not None else None
    for i, pr in enumerate(case["providers"]):
        where = f"$.providers[{i}]"
        if pr["status"] == "ok" and pr["name"] not in case["order"]:
            p.append(f"{where}: {pr['name']!r} was timed (status ok) but is not in $.order")
        for key in ("device_time", "host_time"):
            if pr.get(key):
                p += stats_problems(pr[key], f"{where}.{key}")
        want = expected_derived(case, pr, copy_tbps)
        for key, got in pr["derived"].items():
            if got is None:
                continue
            if key == "pct_copy_ceiling" and run is None:
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
        p.append(f"$: cases both finished and missing: {sorted(finished & missing)[:_MAX_LISTED]}")
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


def _checked(name: str, record: dict, extra_rules) -> dict:
    """Normalize ``record`` to plain JSON data and validate it; raise ArtifactError on problems."""
    try:
        rec = json.loads(dumps(record))  # exactly what a reader will load back
    except (TypeError, ValueError) as e:
        raise ArtifactError(f"{name} record", [str(e)]) from e
    problems = schema_errors(name, rec)
    if not problems:
        problems = extra_rules(rec)
    if problems:
        label = rec.get("case_id", name) if isinstance(rec, dict) else name
        raise ArtifactError(f"{name} record {label!r}", problems)
    return rec


# ------------------------------------------------------------------------------------ manifest


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _file_entry(path: Path) -> dict:
    return {"sha256": sha256_file(path), "bytes": path.stat().st_size}


def list_files(run_dir: str | os.PathLike) -> list[str]:
    """POSIX paths (relative to ``run_dir``) of every file under it, sorted, temp files included."""
    root = Path(run_dir)
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel_dir = Path(dirpath).relative_to(root)
        out += [(rel_dir / f).as_posix() for f in filenames]
    return sorted(out)


def _run_id_on_disk(run_dir: Path) -> str | None:
    for name in (RUN_FILE, MANIFEST_FILE):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            return str(read_json(run_dir / name)["run_id"])
    return None


def write_manifest(run_dir: str | os.PathLike, run_id: str | None = None) -> Path:
    """Recompute ``manifest.json`` from disk: SHA-256 and size of every file in the run directory
    except the manifest and leftover temp files, report files included.

    This trusts whatever is on disk now; the ``write_*`` functions update only the entries of
    the files they wrote, so a file corrupted in between is still caught by ``validate_run``.
    """
    run_dir = Path(run_dir)
    run_id = run_id or _run_id_on_disk(run_dir)
    if run_id is None:
        raise ArtifactError(MANIFEST_FILE, ["no run id: write run.json first or pass run_id"])
    files = {
        rel: _file_entry(run_dir / rel)
        for rel in list_files(run_dir)
        if rel != MANIFEST_FILE and not _is_temp(rel)
    }
    return _write_manifest_record(run_dir, run_id, files)


def _write_manifest_record(run_dir: Path, run_id: str, files: dict) -> Path:
    record = {
        "schema_version": SCHEMA_VERSION,
        "kind": "manifest",
        "run_id": run_id,
        "files": dict(sorted(files.items())),
    }
    problems = schema_errors("manifest", record)
    if problems:
        raise ArtifactError(MANIFEST_FILE, problems)
    return atomic_write_json(run_dir / MANIFEST_FILE, record)


def update_manifest(
    run_dir: str | os.PathLike, relpaths=(), run_id: str | None = None, remove=()
) -> Path:
    """Add or refresh the manifest entries of ``relpaths`` (files that exist), drop those of
    ``remove``; every other entry stays as it was. Creates the manifest if there is none."""
    run_dir = Path(run_dir)
    path = run_dir / MANIFEST_FILE
    files: dict = {}
    if path.exists():
        try:
            old = read_json(path)
        except ValueError as e:
            raise ArtifactError(MANIFEST_FILE, [f"unreadable ({e}); not overwriting it"]) from e
        problems = schema_errors("manifest", old)
        if problems:
            raise ArtifactError(MANIFEST_FILE, ["invalid; not overwriting it", *problems])
        if run_id is not None and old["run_id"] != run_id:
            raise ArtifactError(
                MANIFEST_FILE, [f"belongs to run {old['run_id']!r}, not {run_id!r}"]
            )
        run_id, files = old["run_id"], old["files"]
    run_id = run_id or _run_id_on_disk(run_dir)
    if run_id is None:
        raise ArtifactError(MANIFEST_FILE, ["no run id: write run.json first or pass run_id"])
    for rel in remove:
        files.pop(rel, None)
    for rel in relpaths:
        files[rel] = _file_entry(run_dir / rel)
    return _write_manifest_record(run_dir, run_id, files)


# ------------------------------------------------------------------------------------ writers


def _existing_run(run_dir: Path) -> dict | None:
    """run.json if it is present and schema-valid, else None."""
    try:
        run = read_json(run_dir / RUN_FILE)
    except (OSError, ValueError):
        return None
    return run if not schema_errors("run", run) else None


def write_run(run_dir: str | os.PathLike, run_record: dict) -> Path:
    """Validate ``run_record`` (schema "run" + ``run_problems``), write ``run.json`` atomically,
    update the manifest. Call at the start (status "running", finished_cases [],
    missing_cases = expected_cases) and whenever the record changes; ``finish_run`` at the end."""
    run_dir = Path(run_dir)
    rec = _checked("run", run_record, run_problems)
    old_id = _run_id_on_disk(run_dir)
    if old_id is not None and old_id != rec["run_id"]:
        raise ArtifactError(RUN_FILE, [f"{run_dir} holds run {old_id!r}, not {rec['run_id']!r}"])
    atomic_write_json(run_dir / RUN_FILE, rec)
    update_manifest(run_dir, [RUN_FILE], rec["run_id"])
    return run_dir / RUN_FILE


def write_case(run_dir: str | os.PathLike, record: dict) -> Path:
    """Validate a case record (schema "case" + ``case_problems`` against run.json when present,
    and its id must be one of run.json's expected_cases), write ``cases/<case_filename>``
    atomically, then update the manifest. Returns the file's path. Raises ArtifactError."""
    run_dir = Path(run_dir)
    run = _existing_run(run_dir)

    def rules(rec):
        p = case_problems(rec, run)
        if run is not None and rec["case_id"] not in run["expected_cases"]:
            p.append(f"$.case_id {rec['case_id']!r} is not in run.json's expected_cases")
        return p

    rec = _checked("case", record, rules)
    rel = f"{CASES_DIR}/{case_filename(rec['case_id'])}"
    atomic_write_json(run_dir / rel, rec)
    update_manifest(run_dir, [rel], rec["run_id"])
    return run_dir / rel


def write_ceilings(run_dir: str | os.PathLike, record: dict) -> Path:
    """Validate and write ``ceilings.json`` (schema "ceilings"), then update the manifest."""
    run_dir = Path(run_dir)
    rec = _checked("ceilings", record, lambda r: ceilings_problems(r, None))
    atomic_write_json(run_dir / CEILINGS_FILE, rec)
    update_manifest(run_dir, [CEILINGS_FILE], rec["run_id"])
    return run_dir / CEILINGS_FILE


def finish_run(
    run_dir: str | os.PathLike, status: str = "complete", finished_at: str | None = None
) -> dict:
    """Close a run: finished_cases = expected cases that have a case file (in expected order),
    missing_cases = the rest, ``finished_at`` = the given time or now, ``status`` as given, except
    that "complete" with missing cases is recorded as "interrupted". Rewrites run.json (and the
    manifest) and returns the record written."""
    run_dir = Path(run_dir)
    run = read_json(run_dir / RUN_FILE)
    present = [
        c for c in run["expected_cases"] if (run_dir / CASES_DIR / case_filename(c)).exists()
    ]
    run["finished_cases"] = present
    run["missing_cases"] = [c for c in run["expected_cases"] if c not in set(present)]
    run["status"] = "interrupted" if status == "complete" and run["missing_cases"] else status
    run["finished_at"] = finished_at or utc_now()
    write_run(run_dir, run)
    return run


# ------------------------------------------------------------------------------------ reading


@dataclass
class Run:
    """A loaded run: its record, its case records (in expected_cases order, then any others by
    id), and the ceilings and manifest records where present."""

    run_dir: Path
    run: dict
    cases: list[dict] = field(default_factory=list)
    ceilings: dict | None = None
    manifest: dict | None = None

    @property
    def run_id(self) -> str:
        return self.run["run_id"]

    def case(self, case_id: str) -> dict | None:
        return next((c for c in self.cases if c.get("case_id") == case_id), None)


def load_run(run_dir: str | os.PathLike) -> Run:
    """Read a run directory without validating it (use ``validate_run`` for that).
    Raises FileNotFoundError without run.json and ValueError for a file that is not JSON."""
    run_dir = Path(run_dir)
    run = read_json(run_dir / RUN_FILE)
    cases = []
    for path in sorted((run_dir / CASES_DIR).glob("*.json")):
        try:
            cases.append(read_json(path))
        except ValueError as e:
            raise ValueError(f"{path}: not valid JSON: {e}") from e
    rank = {c: i for i, c in enumerate(run.get("expected_cases", []))}
    cases.sort(key=lambda c: (rank.get(c.get("case_id"), len(rank)), str(c.get("case_id"))))
    optional = {}
    for name in (CEILINGS_FILE, MANIFEST_FILE):
        path = run_dir / name
        optional[name] = read_json(path) if path.exists() else None
    return Run(run_dir, run, cases, optional[CEILINGS_FILE], optional[MANIFEST_FILE])


# ------------------------------------------------------------------------------------ validation


def _parse(run_dir: Path, rel: str, problems: list[str]):
    try:
        return read_json(run_dir / rel)
    except UnicodeDecodeError as e:
        problems.append(f"{rel}: not UTF-8 ({e.reason} at byte {e.start})")
    except ValueError as e:
        problems.append(f"{rel}: not valid JSON ({e})")
    except OSError as e:
        problems.append(f"{rel}: unreadable ({e.strerror})")
    return None


def _listed(ids: list[str]) -> str:
    head = ", ".join(ids[:_MAX_LISTED])
    return head + (f", ... and {len(ids) - _MAX_LISTED} more" if len(ids) > _MAX_LISTED else "")


def validate_run(run_dir: str | os.PathLike, *, include_report: bool = True) -> list[str]:
    """Every problem with a run directory, as readable lines; empty means valid.

    Checks, in order: leftover temp files; the manifest (schema, run id, each listed file present
    with the recorded size and SHA-256, every file on disk listed); run.json, ceilings.json and
    each case file (JSON, schema with JSON paths, the cross-field rules of ``run_problems``,
    ``ceilings_problems`` and ``case_problems``, file name = ``case_filename(case_id)``);
    coverage (each expected case has a file, no case file outside expected_cases, finished_cases
    all present) and the run status (anything but "complete" is a problem). A changed byte in
    any file fails the checksum. ``include_report=False`` ignores ``report/``.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return [f"{run_dir}: not a directory"]
    problems: list[str] = []

    def keep(rel: str) -> bool:
        return include_report or not rel.startswith(REPORT_DIR + "/")

    on_disk = [rel for rel in list_files(run_dir) if keep(rel)]
    for rel in on_disk:
        if _is_temp(rel):
            problems.append(f"{rel}: leftover temp file of an interrupted write")
    on_disk = [rel for rel in on_disk if not _is_temp(rel)]

    # run.json first: other checks compare against it
    run = None
    if RUN_FILE not in on_disk:
        problems.append(f"{RUN_FILE}: missing")
    else:
        run = _parse(run_dir, RUN_FILE, problems)
        if run is not None:
            errs = schema_errors("run", run)
            problems += [f"{RUN_FILE}: {e}" for e in errs]
            if errs:
                run = None
            else:
                problems += [f"{RUN_FILE}: {e}" for e in run_problems(run)]

    # manifest: checksums of everything else
    if MANIFEST_FILE not in on_disk:
        problems.append(f"{MANIFEST_FILE}: missing (no checksums to verify)")
    else:
        manifest = _parse(run_dir, MANIFEST_FILE, problems)
        errs = [] if manifest is None else schema_errors("manifest", manifest)
        problems += [f"{MANIFEST_FILE}: {e}" for e in errs]
        if manifest is not None and not errs:
            if run is not None and manifest["run_id"] != run["run_id"]:
                problems.append(
                    f"{MANIFEST_FILE}: run_id {manifest['run_id']!r} but run.json says {run['run_id']!r}"
                )
            listed = {rel: e for rel, e in manifest["files"].items() if keep(rel)}
            if MANIFEST_FILE in listed:
                problems.append(f"{MANIFEST_FILE}: lists itself")
            for rel, entry in listed.items():
                path = run_dir / rel
                if rel == MANIFEST_FILE:
                    continue
                if not path.is_file():
                    problems.append(f"{rel}: listed in the manifest but missing")
                    continue
                size, digest = path.stat().st_size, sha256_file(path)
                if size != entry["bytes"] or digest != entry["sha256"]:
                    problems.append(
                        f"{rel}: checksum mismatch (manifest: {entry['bytes']} bytes, "
                        f"sha256 {entry['sha256'][:12]}...; on disk: {size} bytes, sha256 {digest[:12]}...)"
                    )
            for rel in on_disk:
                if rel != MANIFEST_FILE and rel not in listed:
                    problems.append(f"{rel}: not listed in the manifest")

    # ceilings.json
    if CEILINGS_FILE in on_disk:
        ceilings = _parse(run_dir, CEILINGS_FILE, problems)
        if ceilings is not None:
            errs = schema_errors("ceilings", ceilings)
            problems += [f"{CEILINGS_FILE}: {e}" for e in errs]
            if not errs:
                problems += [f"{CEILINGS_FILE}: {e}" for e in ceilings_problems(ceilings, run)]
    elif run is not None and (
        run["ceilings"]["copy_tbps"] or any(run["ceilings"]["mm_tflops"].values())
    ):
        problems.append(f"{CEILINGS_FILE}: missing, but run.json reports measured ceilings")

    # case files
    present: dict[str, str] = {}  # case id -> relpath
    for rel in on_disk:
        if not rel.startswith(CASES_DIR + "/"):
            continue
        if not rel.endswith(".json") or rel.count("/") != 1:
            problems.append(f"{rel}: not a case file (cases/ holds <case-file>.json only)")
            continue
        case = _parse(run_dir, rel, problems)
        if case is None:
            continue
        errs = schema_errors("case", case)
        problems += [f"{rel}: {e}" for e in errs]
        cid = case.get("case_id") if isinstance(case, dict) else None
        if errs:
            if isinstance(cid, str):
                present.setdefault(cid, rel)
            continue
        problems += [f"{rel}: {e}" for e in case_problems(case, run)]
        if rel != f"{CASES_DIR}/{case_filename(cid)}":
            problems.append(f"{rel}: holds case {cid!r}, whose file is {case_filename(cid)}")
        if cid in present:
            problems.append(f"{rel}: case {cid!r} also in {present[cid]}")
        present.setdefault(cid, rel)

    # coverage and status
    if run is not None:
        expected = run["expected_cases"]
        missing = [c for c in expected if c not in present]
        if missing:
            problems.append(
                f"coverage: {len(missing)} of {len(expected)} expected case(s) have no case file: "
                + _listed(missing)
            )
        expected_set = set(expected)
        for cid, rel in sorted(present.items()):
            if cid not in expected_set:
                problems.append(
                    f"coverage: {rel} holds case {cid!r}, which expected_cases does not list"
                )
        claimed = [c for c in run["finished_cases"] if c not in present]
        if claimed:
            problems.append(f"{RUN_FILE}: finished_cases without a case file: " + _listed(claimed))
        if run["status"] != "complete":
            problems.append(
                f"{RUN_FILE}: status is {run['status']!r}, not 'complete' "
                f"({len(missing)} of {len(expected)} expected cases missing)"
            )
    return problems


def validate_cli(run_dir: str | os.PathLike) -> int:
    """``warpgauge validate RUN``: print the verdict and every problem; 0 if valid, 1 if not."""
    problems = validate_run(run_dir)
    if problems:
        print(f"INVALID: {run_dir}: {len(problems)} problem(s)")
        for p in problems:
            print(f"  - {p}")
        return 1
    n = len(list((Path(run_dir) / CASES_DIR).glob("*.json")))
    files = len([r for r in list_files(run_dir) if r != MANIFEST_FILE])
    print(f"OK: {run_dir}: {n} case file(s), {files} file(s) match the manifest")
    return 0
