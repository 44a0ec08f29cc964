"""Writing and reading a run directory: the manifest, the validated writers, ``load_run``."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .files import (
    CASES_DIR,
    CEILINGS_FILE,
    GZIP_SUFFIX,
    MANIFEST_FILE,
    RUN_FILE,
    SCHEMA_VERSION,
    ArtifactError,
    GzipError,
    _file_entry,
    _is_temp,
    atomic_write_json,
    dumps,
    is_case_name,
    list_files,
    read_json,
    utc_now,
)
from .rules import case_problems, ceilings_problems, run_problems
from .schemas import case_filename, schema_errors


def _checked(name: str, record: dict, extra_rules) -> dict:
    """Normalize ``record`` to plain JSON data and validate it; raise ArtifactError on problems."""
    try:
        rec = json.loads(dumps(record))  # exactly what a reader will load back
    except (TypeError, ValueError) as e:
        raise ArtifactError(f"{name} record", [str(e)]) from e
    problems = schema_errors(name, rec)
    if not problems:
        problems = safe_rules(extra_rules, rec)
    if problems:
        label = rec.get("case_id", name) if isinstance(rec, dict) else name
        raise ArtifactError(f"{name} record {label!r}", problems)
    return rec


def safe_rules(rules, *args) -> list[str]:
    """``rules(*args)``; a record whose structure the rules cannot walk (possible only when the
    schema check was skipped for want of jsonschema) becomes one problem, not a crash."""
    try:
        return rules(*args)
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as e:
        return [
            f"$: not the structure the schema describes ({type(e).__name__}: {e}); "
            "install jsonschema for exact messages"
        ]


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
        if run is not None and rec.get("case_id") not in run["expected_cases"]:
            p.append(f"$.case_id {rec['case_id']!r} is not in run.json's expected_cases")
        return p

    rec = _checked("case", record, rules)
    rel = f"{CASES_DIR}/{case_filename(rec['case_id'])}"
    atomic_write_json(run_dir / rel, rec)
    gz = rel + GZIP_SUFFIX  # a compacted form of the same case would now be stale
    stale = [gz] if (run_dir / gz).exists() else []
    for old in stale:
        (run_dir / old).unlink()
    update_manifest(run_dir, [rel], rec["run_id"], remove=stale)
    return run_dir / rel


def write_ceilings(run_dir: str | os.PathLike, record: dict) -> Path:
    """Validate and write ``ceilings.json`` (schema "ceilings"), then update the manifest."""
    run_dir = Path(run_dir)
    rec = _checked("ceilings", record, lambda r: ceilings_problems(r, None))
    atomic_write_json(run_dir / CEILINGS_FILE, rec)
    update_manifest(run_dir, [CEILINGS_FILE], rec["run_id"])
    return run_dir / CEILINGS_FILE


def finish_run(
    run_dir: str | os.PathLike,
    status: str = "complete",
    finished_at: str | None = None,
    host_gpus_after: dict | None = None,
) -> dict:
    """Close a run: finished_cases = expected cases that have a case file (in expected order),
    missing_cases = the rest, ``finished_at`` = the given time or now, ``status`` as given, except
    that "complete" with missing cases is recorded as "interrupted". ``host_gpus_after`` (an
    ``environment.host_gpus()`` reading taken as the run ends) goes to
    ``provenance.host_gpus.after``. Rewrites run.json (and the manifest); returns the record."""
    run_dir = Path(run_dir)
    run = read_json(run_dir / RUN_FILE)
    if host_gpus_after is not None:
        pair = run["provenance"].get("host_gpus") or {"before": None}
        run["provenance"]["host_gpus"] = {**pair, "after": host_gpus_after}
    present = [c for c in run["expected_cases"] if find_case(run_dir, c) is not None]
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


def case_paths(run_dir: str | os.PathLike) -> list[Path]:
    """The stored case files of a run: ``cases/*.json`` and ``cases/*.json.gz``, sorted by name
    (temp files of interrupted writes are not case files)."""
    root = Path(run_dir) / CASES_DIR
    if not root.is_dir():
        return []
    return sorted(
        p for p in root.iterdir() if p.is_file() and is_case_name(p.name) and not _is_temp(p.name)
    )


def find_case(run_dir: str | os.PathLike, case_id: str) -> Path | None:
    """The file that stores ``case_id`` in a run (``cases/<case-file>.json``, else its compacted
    form ``cases/<case-file>.json.gz``), or None when there is none."""
    plain = Path(run_dir) / CASES_DIR / case_filename(case_id)
    for path in (plain, plain.with_name(plain.name + GZIP_SUFFIX)):
        if path.is_file():
            return path
    return None


def read_artifact(path: Path) -> dict:
    """One artifact file (a ``.json.gz`` one decompressed), or ValueError naming the file when
    it is corrupted or truncated (not gzip, not UTF-8, not JSON, not a JSON object).
    FileNotFoundError when it does not exist."""
    try:
        data = read_json(path)
    except GzipError as e:
        raise ValueError(f"{path}: corrupted or truncated: {e}") from e
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: corrupted: not UTF-8 ({e.reason} at byte {e.start})") from e
    except ValueError as e:
        raise ValueError(f"{path}: corrupted or truncated: not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path}: corrupted: holds a JSON {type(data).__name__}, not an object")
    return data


def load_run(run_dir: str | os.PathLike) -> Run:
    """Read a run directory without validating it (use ``validate_run`` for that); case files
    are read in either stored form (``.json`` or ``.json.gz``).
    Raises FileNotFoundError without run.json and ValueError naming the file for one that is
    corrupted or truncated."""
    run_dir = Path(run_dir)
    run = read_artifact(run_dir / RUN_FILE)
    cases = [read_artifact(path) for path in case_paths(run_dir)]
    rank = {c: i for i, c in enumerate(run.get("expected_cases", []))}
    cases.sort(key=lambda c: (rank.get(c.get("case_id"), len(rank)), str(c.get("case_id"))))
    optional = {}
    for name in (CEILINGS_FILE, MANIFEST_FILE):
        path = run_dir / name
        optional[name] = read_artifact(path) if path.exists() else None
    return Run(run_dir, run, cases, optional[CEILINGS_FILE], optional[MANIFEST_FILE])
