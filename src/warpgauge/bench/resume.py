"""Before a run is resumed: make its directory consistent again after a hard kill."""

from __future__ import annotations

import contextlib
from pathlib import Path


def repair_run_dir(art, ui, run_dir: Path) -> None:
    """Before resuming: drop temp files of writes that never completed (a SIGKILL mid-write)
    and list in the manifest any complete, valid case file a kill left unlisted."""
    is_temp = getattr(art, "_is_temp", lambda rel: rel.rsplit("/", 1)[-1].startswith("."))
    manifest_path = run_dir / art.MANIFEST_FILE
    listed = set()
    if manifest_path.exists():
        with contextlib.suppress(Exception):
            listed = set(art.read_json(manifest_path)["files"])
    run = art.read_json(run_dir / art.RUN_FILE)
    for rel in art.list_files(run_dir):
        path = run_dir / rel
        if is_temp(rel):
            path.unlink()
            ui.info(f"resume: removed {rel}, the temp file of an interrupted write")
            continue
        if not rel.startswith(art.CASES_DIR + "/") or rel in listed:
            continue
        try:
            case = art.read_json(path)
            problems = art.schema_errors("case", case) or art.case_problems(case, run)
            stored = rel[: -len(".gz")] if rel.endswith(".json.gz") else rel  # compacted form
            if not problems and stored != f"{art.CASES_DIR}/{art.case_filename(case['case_id'])}":
                problems = ["file name does not match its case id"]
        except Exception as e:
            problems = [str(e)]
        if problems:
            path.unlink()
            ui.info(
                f"resume: removed {rel}, not a valid case file ({problems[0]}); it is measured again"
            )
        else:
            art.update_manifest(run_dir, [rel], run["run_id"])
            ui.info(f"resume: listed {rel} in the manifest (written just before an interruption)")
