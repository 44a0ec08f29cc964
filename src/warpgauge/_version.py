"""warpgauge's version, from its one source: ``[project].version`` in pyproject.toml.

Read from the source tree when this package runs from a checkout (``PYTHONPATH=src`` or an
editable install: the file the code came with), else from the installed distribution's metadata
(which pip wrote from that same field). Nothing is read at import time.
"""

from __future__ import annotations

import functools
import importlib.metadata
from pathlib import Path

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10 (tomli is a dependency there)
    import tomli as tomllib  # type: ignore[no-redef]


def _from_source_tree() -> str | None:
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"  # src/warpgauge/ -> root
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, ValueError):
        return None
    return project.get("version") if project.get("name") == "warpgauge" else None


@functools.cache
def version() -> str | None:
    """The version string, or None when neither a source tree nor metadata says."""
    found = _from_source_tree()
    if found:
        return found
    try:
        return importlib.metadata.version("warpgauge")
    except importlib.metadata.PackageNotFoundError:
        return None
