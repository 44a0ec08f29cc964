"""``warpgauge artifacts ...``: upkeep of committed run directories (no GPU needed).

    warpgauge artifacts compact RUN_DIR [RUN_DIR ...]   gzip the case files of finished runs

The work lives in ``artifacts.compact``, imported when a command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(
    no_args_is_help=True,
    help="Upkeep of run directories: compact finished runs for the archive.",
)


@app.callback()
def _group() -> None:
    """Upkeep of run directories: compact finished runs for the archive."""


@app.command()
def compact(
    paths: Annotated[
        list[Path],
        typer.Argument(help="Run directories, or folders searched for runs (run.json + manifest)."),
    ],
) -> None:
    """Store each run's case files as deterministic .json.gz, lossless and validated.

    Each run must validate before and after; its manifest is updated; a run already compacted
    is left alone. Prints the bytes before and after."""
    from .compact import compact_cli

    raise typer.Exit(compact_cli(paths))
