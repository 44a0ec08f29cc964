"""``warpgauge artifacts compact``: store the case files of finished runs as deterministic gzip.

Case files are most of a run's bytes (raw timing samples), and the bench writes them as plain
JSON while it runs. For the archive, ``compact_run`` rewrites each ``cases/<case-file>.json`` as
``cases/<case-file>.json.gz`` (``files.gzip_bytes``: mtime 0, fixed level, so the same JSON gives
the same bytes), swaps the manifest entries with ``update_manifest`` (the writers' own code), and
removes the plain files. Every reader accepts both forms, so reports, comparisons and validation
give the same answers before and after.

A run is compacted only if it validates first (nothing unchecked gets new checksums), and it must
validate after. A run with no plain case file left is left alone. The case files of its rank runs
(``ranks/<rank>/``, a multi-GPU run) are compacted with it, their manifests and the run's
manifest entries of them updated. A run whose files an enclosing folder's manifest lists is
refused: compact the enclosing run instead (its checksums would go stale).

Order, so that a kill at any point loses nothing and ``compact`` finishes the job when run again:
write every ``.json.gz`` (atomically), then the manifest, then remove the ``.json`` files. A pair
left behind holds the same JSON twice; the form the manifest does not list is removed first.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .files import (
    CASES_DIR,
    GZIP_SUFFIX,
    MANIFEST_FILE,
    RUN_FILE,
    ArtifactError,
    atomic_write_bytes,
    gzip_bytes,
    list_files,
    read_bytes,
    read_json,
)
from .store import case_paths, update_manifest
from .validate import validate_run

RANKS_DIR = "ranks"  # bench.distributed.RANKS_DIR: the rank runs of a multi-GPU run


@dataclass
class Compacted:
    """What ``compact_run`` did to one run: case files gzipped now (0: it was compact already),
    and the bytes of all of the run's files before and after."""

    run_dir: Path
    case_files: int
    compacted: int
    bytes_before: int
    bytes_after: int


def is_run_dir(path: Path) -> bool:
    """A benchmark run directory: run.json and manifest.json side by side."""
    return (path / RUN_FILE).is_file() and (path / MANIFEST_FILE).is_file()


def find_runs(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The run directories named by ``paths``: each path that is a run, else every run under it
    (a run's own subfolders, its rank runs included, are not searched). Raises ArtifactError for
    a path that is neither a directory nor holds a run."""
    found: list[Path] = []
    problems = []
    for p in map(Path, paths):
        if not p.is_dir():
            problems.append(f"{p}: not a directory")
            continue
        if is_run_dir(p):
            found.append(p)
            continue
        runs = []
        for dirpath, dirnames, _ in os.walk(p):
            d = Path(dirpath)
            if is_run_dir(d):
                runs.append(d)
                dirnames[:] = []  # its ranks/ and report/ belong to it
            else:
                dirnames.sort()
        if not runs:
            problems.append(f"{p}: no run directory (run.json + manifest.json) in or under it")
        found += sorted(runs)
    if problems:
        raise ArtifactError("artifacts compact", problems)
    return list(dict.fromkeys(found))


def _case_dirs(run_dir: Path) -> list[Path]:
    """The run and its rank runs: every directory whose ``cases/`` this run's manifest covers."""
    ranks = run_dir / RANKS_DIR
    subs = sorted(p for p in ranks.iterdir() if (p / RUN_FILE).is_file()) if ranks.is_dir() else []
    return [run_dir, *subs]


def _listed(d: Path) -> set[str]:
    try:
        return set(read_json(d / MANIFEST_FILE)["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return set()


def _enclosing_manifest(run_dir: Path) -> Path | None:
    """An enclosing folder's manifest that lists files of this run's ``cases/``, if any (the
    search stops at the top of a git checkout)."""
    here = run_dir.resolve()
    for up in here.parents:
        if (up / MANIFEST_FILE).is_file():
            prefix = here.relative_to(up).as_posix() + "/" + CASES_DIR + "/"
            if any(rel.startswith(prefix) for rel in _listed(up)):
                return up / MANIFEST_FILE
        if (up / ".git").exists():
            return None
    return None


def _plain_cases(d: Path) -> list[Path]:
    return [p for p in case_paths(d) if not p.name.endswith(GZIP_SUFFIX)]


def _drop_leftover_pairs(d: Path, listings: list[set[str]]) -> None:
    """A kill between the steps of an earlier compaction leaves ``x.json`` beside ``x.json.gz``
    holding the same JSON: remove the form that no manifest covering ``d`` lists while every one
    lists the other (``listings``: their relpaths, relative to ``d``). Nothing is lost."""
    for plain in _plain_cases(d):
        gz = plain.with_name(plain.name + GZIP_SUFFIX)
        if not gz.is_file():
            continue
        rel = plain.relative_to(d).as_posix()
        forms = {"plain": rel, "gz": rel + GZIP_SUFFIX}
        everywhere = {k for k, r in forms.items() if all(r in s for s in listings)}
        nowhere = {k for k, r in forms.items() if not any(r in s for s in listings)}
        if len(everywhere) != 1 or len(nowhere) != 1:
            continue  # both or neither listed: not ours to decide; validation names both
        try:
            same = read_bytes(gz) == plain.read_bytes()
        except (OSError, ValueError):
            same = False
        if same:
            (gz if "gz" in nowhere else plain).unlink()


def _bytes(run_dir: Path) -> int:
    return sum((run_dir / rel).stat().st_size for rel in list_files(run_dir))


def _compact_dir(d: Path, advance: Callable[[], None]) -> tuple[list[str], list[str]]:
    """Write a ``.json.gz`` beside every plain case file of ``d`` and update its manifest;
    the plain files stay until every manifest is updated. Returns (new, old) relpaths."""
    new, old = [], []
    for path in _plain_cases(d):
        data = path.read_bytes()
        gz = path.with_name(path.name + GZIP_SUFFIX)
        atomic_write_bytes(gz, gzip_bytes(data))
        if read_bytes(gz) != data:  # what is on disk must give back the JSON exactly
            raise ArtifactError(str(gz), ["does not decompress to the case file it replaces"])
        new.append(gz.relative_to(d).as_posix())
        old.append(path.relative_to(d).as_posix())
        advance()
    if (d / MANIFEST_FILE).is_file() and new:
        update_manifest(d, new, remove=old)
    return new, old


def compact_run(
    run_dir: str | os.PathLike, advance: Callable[[], None] = lambda: None
) -> Compacted:
    """Store every case file of a run (and of its rank runs) as ``.json.gz``; see the module
    docstring. ``advance`` is called once per file compressed. Raises ArtifactError, listing
    the problems, for a run that does not validate before (then nothing is changed, except that
    the spare copy of a pair an interrupted compaction left is removed) or after."""
    run_dir = Path(run_dir)
    if not is_run_dir(run_dir):
        raise ArtifactError(str(run_dir), ["not a run directory (needs run.json + manifest.json)"])
    outer = _enclosing_manifest(run_dir)
    if outer is not None:
        raise ArtifactError(
            str(run_dir), [f"{outer} lists its case files; compact {outer.parent} instead"]
        )
    dirs = _case_dirs(run_dir)
    top = _listed(run_dir)
    for d in dirs:
        sub = "" if d == run_dir else d.relative_to(run_dir).as_posix() + "/"
        from_top = {r[len(sub) :] for r in top if r.startswith(sub)}
        _drop_leftover_pairs(d, [from_top] if d == run_dir else [_listed(d), from_top])
    before = _bytes(run_dir)
    problems = validate_run(run_dir)
    if problems:
        raise ArtifactError(f"{run_dir}: does not validate, so it is not compacted", problems)
    n_cases = len(case_paths(run_dir))
    if not any(_plain_cases(d) for d in dirs):
        return Compacted(run_dir, n_cases, 0, before, before)
    done, top_new, top_old = 0, [], []
    for d in dirs:
        new, old = _compact_dir(d, advance)
        done += len(new)
        if d != run_dir and new:  # the run's manifest lists its rank runs' files too
            sub = d.relative_to(run_dir).as_posix() + "/"
            top_new += [sub + r for r in new] + [sub + MANIFEST_FILE]
            top_old += [sub + r for r in old]
    if top_new:
        update_manifest(run_dir, [r for r in top_new if (run_dir / r).is_file()], remove=top_old)
    for d in dirs:  # every manifest now lists the .json.gz files: the plain ones can go
        for path in _plain_cases(d):
            if path.with_name(path.name + GZIP_SUFFIX).is_file():
                path.unlink()
    problems = validate_run(run_dir)
    if problems:
        raise ArtifactError(f"{run_dir}: compacted, but no longer validates", problems)
    return Compacted(run_dir, n_cases, done, before, _bytes(run_dir))


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def compact_cli(paths: list[str | os.PathLike]) -> int:
    """``warpgauge artifacts compact RUN_DIR...``: compact every run named or found under the
    paths; a table of bytes before and after. Exit 0 when every run is compact and valid, 1 when
    some run was refused (the others are still compacted), 2 when a path holds no run."""
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    console = Console(highlight=False)
    try:
        runs = find_runs(paths)
    except ArtifactError as e:
        console.print(str(e), markup=False, soft_wrap=True)
        return 2
    total = sum(len(_plain_cases(d)) for r in runs for d in _case_dirs(r))
    done: list[Compacted] = []
    refused: list[ArtifactError] = []
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("compacting case files", total=total)
        for r in runs:
            progress.update(task, description=f"compacting {r}")
            try:
                done.append(compact_run(r, lambda: progress.advance(task)))
            except ArtifactError as e:
                refused.append(e)
    table = Table(title="warpgauge artifacts compact")
    for col, just in (("run", "left"), ("case files", "right"), ("gzipped now", "right"),
                      ("before", "right"), ("after", "right")):  # fmt: skip
        table.add_column(col, justify=just, overflow="fold")
    for c in done:
        now = str(c.compacted) if c.compacted else "already compact"
        table.add_row(str(c.run_dir), str(c.case_files), now, _mib(c.bytes_before),
                      _mib(c.bytes_after))  # fmt: skip
    before, after = sum(c.bytes_before for c in done), sum(c.bytes_after for c in done)
    if len(done) > 1:
        table.add_row("all", str(sum(c.case_files for c in done)),
                      str(sum(c.compacted for c in done)), _mib(before), _mib(after))  # fmt: skip
    if done:
        console.print(table)
    for e in refused:
        console.print(f"REFUSED: {e}", markup=False, soft_wrap=True)
    saved = before - after
    console.print(
        f"{len(done)} run(s) compact and valid, {len(refused)} refused; "
        f"{before:,} -> {after:,} bytes ({saved:,} saved)",
        markup=False,
        soft_wrap=True,
    )
    return 1 if refused else 0
