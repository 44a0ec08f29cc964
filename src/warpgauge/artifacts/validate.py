"""``warpgauge validate``: every problem with a run directory, each naming its file."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .coverage import coverage_problems
from .files import (
    CASES_DIR,
    CEILINGS_FILE,
    GZIP_SUFFIX,
    MANIFEST_FILE,
    MAX_LISTED,
    REPORT_DIR,
    RUN_FILE,
    GzipError,
    _is_temp,
    is_case_name,
    list_files,
    plain_name,
    read_json,
    sha256_file,
)
from .rules import case_problems, ceilings_problems, run_problems
from .schemas import SCHEMA_SKIPPED, case_filename, have_jsonschema, schema_errors
from .store import safe_rules


@dataclass
class Validation:
    """The outcome of ``check_run``: ``problems`` (empty: valid), ``notes`` (checks that could
    not run and why; not problems), and what was looked at."""

    run_dir: str
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    case_files: int = 0
    files_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {
            "run_dir": self.run_dir,
            "valid": self.ok,
            "problems": self.problems,
            "notes": self.notes,
            "case_files": self.case_files,
            "files_checked": self.files_checked,
        }


def _parse(run_dir: Path, rel: str, problems: list[str]):
    try:
        data = read_json(run_dir / rel)
    except GzipError as e:
        problems.append(f"{rel}: corrupted or truncated: {e}")
    except UnicodeDecodeError as e:
        problems.append(f"{rel}: corrupted: not UTF-8 ({e.reason} at byte {e.start})")
    except ValueError as e:
        problems.append(f"{rel}: corrupted or truncated: not valid JSON ({e})")
    except OSError as e:
        problems.append(f"{rel}: unreadable ({e.strerror})")
    else:
        if isinstance(data, dict):
            return data
        problems.append(f"{rel}: corrupted: holds a JSON {type(data).__name__}, not an object")
    return None


def _listed(ids: list[str]) -> str:
    head = ", ".join(ids[:MAX_LISTED])
    return head + (f", ... and {len(ids) - MAX_LISTED} more" if len(ids) > MAX_LISTED else "")


def _check_record(name: str, rel: str, rec: dict, rules, *args) -> tuple[list[str], bool]:
    """(problems, schema_ok) of one parsed record: schema first, then its cross-field rules."""
    errs = schema_errors(name, rec)
    if errs:
        return [f"{rel}: {e}" for e in errs], False
    return [f"{rel}: {e}" for e in safe_rules(rules, rec, *args)], True


def _check_manifest(run_dir, on_disk, run, keep, problems) -> None:
    if MANIFEST_FILE not in on_disk:
        problems.append(f"{MANIFEST_FILE}: missing (no checksums to verify)")
        return
    manifest = _parse(run_dir, MANIFEST_FILE, problems)
    errs = [] if manifest is None else schema_errors("manifest", manifest)
    problems += [f"{MANIFEST_FILE}: {e}" for e in errs]
    if manifest is None or errs or not isinstance(manifest.get("files"), dict):
        if manifest is not None and not errs:
            problems.append(f"{MANIFEST_FILE}: $.files is not an object")
        return
    if run is not None and manifest.get("run_id") != run["run_id"]:
        problems.append(
            f"{MANIFEST_FILE}: run_id {manifest.get('run_id')!r} but run.json says {run['run_id']!r}"
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
        want_size, want_sha = entry.get("bytes"), str(entry.get("sha256"))
        if size != want_size or digest != want_sha:
            what = "truncated or grown" if size != want_size else "corrupted"
            problems.append(
                f"{rel}: checksum mismatch, {what} (manifest: {want_size} bytes, sha256 "
                f"{want_sha[:12]}...; on disk: {size} bytes, sha256 {digest[:12]}...)"
            )
    for rel in on_disk:
        if rel != MANIFEST_FILE and rel not in listed:
            problems.append(f"{rel}: not listed in the manifest")


def check_run(run_dir: str | os.PathLike, *, include_report: bool = True) -> Validation:
    """Validate a run directory; see ``validate_run`` for what is checked."""
    run_dir = Path(run_dir)
    out = Validation(str(run_dir))
    if not run_dir.is_dir():
        out.problems.append(f"{run_dir}: not a directory")
        return out
    problems = out.problems
    if not have_jsonschema():
        problems.append(SCHEMA_SKIPPED)

    def keep(rel: str) -> bool:
        return include_report or not rel.startswith(REPORT_DIR + "/")

    on_disk = [rel for rel in list_files(run_dir) if keep(rel)]
    for rel in on_disk:
        if _is_temp(rel):
            problems.append(f"{rel}: leftover temp file of an interrupted write")
    on_disk = [rel for rel in on_disk if not _is_temp(rel)]
    out.files_checked = len(on_disk)

    run = None  # run.json first: the other checks compare against it
    if RUN_FILE not in on_disk:
        problems.append(f"{RUN_FILE}: missing")
    else:
        run = _parse(run_dir, RUN_FILE, problems)
        if run is not None:
            found, schema_ok = _check_record("run", RUN_FILE, run, run_problems)
            problems += found
            run = run if schema_ok and not any("not the structure" in p for p in found) else None

    _check_manifest(run_dir, on_disk, run, keep, problems)

    if CEILINGS_FILE in on_disk:
        ceilings = _parse(run_dir, CEILINGS_FILE, problems)
        if ceilings is not None:
            problems += _check_record("ceilings", CEILINGS_FILE, ceilings, ceilings_problems, run)[
                0
            ]
    elif run is not None and (
        run["ceilings"]["copy_tbps"] or any(run["ceilings"]["mm_tflops"].values())
    ):
        problems.append(f"{CEILINGS_FILE}: missing, but run.json reports measured ceilings")

    present: dict[str, str] = {}  # case id -> relpath
    case_rels = [rel for rel in on_disk if rel.startswith(CASES_DIR + "/")]
    both = {rel for rel in case_rels if rel.endswith(".json") and rel + GZIP_SUFFIX in case_rels}
    for rel in sorted(both):
        problems.append(
            f"{rel} and {rel}{GZIP_SUFFIX}: one case file stored in both forms; keep one "
            "(the .json.gz that `warpgauge artifacts compact` writes holds the same JSON)"
        )
    for rel in case_rels:
        if not is_case_name(rel) or rel.count("/") != 1:
            problems.append(
                f"{rel}: not a case file (cases/ holds <case-file>.json or <case-file>.json.gz only)"
            )
            continue
        out.case_files += 1
        case = _parse(run_dir, rel, problems)
        if case is None:
            continue
        found, schema_ok = _check_record("case", rel, case, case_problems, run)
        problems += found
        cid = case.get("case_id")
        if not isinstance(cid, str):
            continue
        if schema_ok:
            try:
                name = case_filename(cid)
            except ValueError as e:
                problems.append(f"{rel}: {e}")
                continue
            if plain_name(rel) != f"{CASES_DIR}/{name}":
                problems.append(f"{rel}: holds case {cid!r}, whose file is {name} (or {name}.gz)")
            pair = plain_name(rel) == plain_name(present.get(cid, "")) and plain_name(rel) in both
            if cid in present and not pair:  # a pair of forms is reported above
                problems.append(f"{rel}: case {cid!r} also in {present[cid]}")
        present.setdefault(cid, rel)

    if run is not None:
        try:
            found, notes, expected = coverage_problems(run, set(present))
        except (KeyError, TypeError, AttributeError) as e:  # only without the schema check
            found, notes = [f"{RUN_FILE}: $.config: unreadable ({type(e).__name__}: {e})"], []
            expected = list(run["expected_cases"])
        problems += found
        out.notes += notes
        expected_set = set(expected)
        for cid, rel in sorted(present.items()):
            if cid not in expected_set:
                problems.append(
                    f"coverage: {rel} holds case {cid!r}, which the run's config does not ask for"
                )
        claimed = [c for c in run["finished_cases"] if c not in present]
        if claimed:
            problems.append(f"{RUN_FILE}: finished_cases without a case file: " + _listed(claimed))
        if run["status"] != "complete":
            missing = [c for c in expected if c not in present]
            problems.append(
                f"{RUN_FILE}: status is {run['status']!r}, not 'complete' "
                f"({len(missing)} of {len(expected)} expected cases missing)"
            )
    return out


def validate_run(run_dir: str | os.PathLike, *, include_report: bool = True) -> list[str]:
    """Every problem with a run directory, as readable lines that name the file; empty = valid.

    Checks, in order: that jsonschema is there to check schemas; leftover temp files; run.json
    (JSON, schema with JSON paths, ``run_problems``); the manifest (schema, run id, each listed
    file present with the recorded size and SHA-256, every file on disk listed); ceilings.json
    and each case file (``.json``, or ``.json.gz`` decompressed: JSON, schema,
    ``ceilings_problems`` / ``case_problems``, file name = ``case_filename(case_id)`` plus
    ``.gz`` for the compacted form; one case in both forms is a problem naming both files); coverage against the cases the recorded config asks for
    (``coverage.coverage_problems``: config.groups x config.lanes, and the packaged suite when
    its hash matches), not against run.json's own list; and the run status (anything but
    "complete" is a problem). A corrupted or truncated file is named with what is wrong with it.
    ``include_report=False`` ignores ``report/``.
    """
    return check_run(run_dir, include_report=include_report).problems


def validate_cli(run_dir: str | os.PathLike, as_json: bool = False) -> int:
    """``warpgauge validate RUN [--json]``: print the verdict and every problem; 0 if valid, 1 if
    not. ``as_json`` prints one JSON object (``Validation.to_json``) instead."""
    v = check_run(run_dir)
    if as_json:
        print(json.dumps(v.to_json(), indent=2))
        return 0 if v.ok else 1
    if v.problems:
        print(f"INVALID: {run_dir}: {len(v.problems)} problem(s)")
        for p in v.problems:
            print(f"  - {p}")
    else:
        files = v.files_checked - 1  # the manifest does not list itself
        print(f"OK: {run_dir}: {v.case_files} case file(s), {files} file(s) match the manifest")
    for n in v.notes:
        print(f"  note: {n}")
    return 0 if v.ok else 1
