"""Run artifacts: versioned JSON records, atomic writes, a SHA-256 manifest, and a validator.

A run directory (``results/<run-id>/``) holds ``run.json``, one ``cases/<case-file>.json`` per
(operator, dtype, shape, lane) (or, once compacted for the archive, ``cases/<case-file>.json.gz``:
``compact``), ``ceilings.json``, ``manifest.json`` and, once rendered, ``report/``. docs/artifacts.md describes every field; the JSON Schemas in ``schemas/`` are the
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

Modules: ``files`` (names, JSON, atomic writes, checksums), ``schemas`` (JSON Schemas, case
ids), ``rules`` (cross-field rules, derived numbers), ``coverage`` (the cases a config asks for),
``store`` (manifest, writers, ``load_run``), ``validate`` (``validate_run``), ``compact`` (gzip
the case files of finished runs; ``warpgauge artifacts compact``, imported on use). Every public name is
re-exported here; import from ``warpgauge.artifacts``.

jsonschema is imported inside the functions that validate, never at import time.
"""

from .coverage import config_problems, expected_cases, packaged_suite_check
from .files import (
    BEST_PYTORCH_FAMILIES,
    CASE_SUFFIXES,
    CASES_DIR,
    CEILINGS_FILE,
    DERIVED_RTOL,
    GZIP_LEVEL,
    GZIP_SUFFIX,
    MANIFEST_FILE,
    REPORT_DIR,
    RUN_FILE,
    SCHEMA_NAMES,
    SCHEMA_VERSION,
    STATS_ATOL_US,
    STATS_RTOL,
    ArtifactError,
    GzipError,
    _is_temp,
    atomic_write_bytes,
    atomic_write_json,
    dumps,
    gzip_bytes,
    is_case_name,
    list_files,
    plain_name,
    read_bytes,
    read_json,
    sha256_file,
    to_plain,
    utc_now,
)
from .rules import (
    DERIVED_KEYS,
    best_pytorch,
    case_problems,
    ceilings_problems,
    excluded_from_best,
    expected_derived,
    fill_derived,
    run_problems,
    stats_problems,
)
from .schemas import (
    SCHEMA_SKIPPED,
    case_filename,
    have_jsonschema,
    make_case_id,
    schema,
    schema_errors,
)
from .store import (
    Run,
    case_paths,
    find_case,
    finish_run,
    load_run,
    read_artifact,
    update_manifest,
    write_case,
    write_ceilings,
    write_manifest,
    write_run,
)
from .validate import Validation, check_run, validate_cli, validate_run

__all__ = [
    "ArtifactError", "BEST_PYTORCH_FAMILIES", "CASE_SUFFIXES", "CASES_DIR", "CEILINGS_FILE",
    "DERIVED_KEYS", "DERIVED_RTOL", "GZIP_LEVEL", "GZIP_SUFFIX", "GzipError", "MANIFEST_FILE", "REPORT_DIR", "RUN_FILE", "Run", "SCHEMA_NAMES",
    "SCHEMA_SKIPPED", "SCHEMA_VERSION", "STATS_ATOL_US", "STATS_RTOL", "Validation", "_is_temp",
    "atomic_write_bytes", "atomic_write_json", "best_pytorch", "case_filename", "case_paths",
    "case_problems", "find_case", "gzip_bytes", "is_case_name", "plain_name", "read_bytes",
    "ceilings_problems", "check_run", "config_problems", "dumps", "excluded_from_best",
    "expected_cases", "expected_derived", "fill_derived", "finish_run", "have_jsonschema",
    "list_files", "load_run", "make_case_id", "packaged_suite_check", "read_artifact", "read_json",
    "run_problems", "schema", "schema_errors", "sha256_file", "stats_problems", "to_plain",
    "update_manifest", "utc_now", "validate_cli", "validate_run", "write_case", "write_ceilings",
    "write_manifest", "write_run",
]  # fmt: skip
