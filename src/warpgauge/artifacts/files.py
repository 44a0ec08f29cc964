"""File layer of the artifacts: names, JSON encoding, atomic writes, checksums, listing.

Nothing here knows a schema; ``schemas``, ``rules``, ``store`` and ``validate`` build on it.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import math
import os
import tempfile
import zlib
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
# A case file is stored as ``<case-file>.json`` (as the bench writes it) or, once a finished run
# is compacted for the archive, as ``<case-file>.json.gz``: the same JSON bytes, gzipped with
# mtime 0, no file name and level GZIP_LEVEL, so one JSON text always gives the same bytes.
GZIP_SUFFIX = ".gz"
GZIP_LEVEL = 9
CASE_SUFFIXES = (".json", ".json" + GZIP_SUFFIX)
SCHEMA_FILES = (*SCHEMA_NAMES, "common")

# Families whose best (lowest-median) provider is "the best PyTorch provider": what a user would
# pick without warpgauge, eager or compiled.
BEST_PYTORCH_FAMILIES = ("pytorch", "compile")
# Derived numbers must match their definition to 0.5% (room for rounding, e.g. a ceiling stored
# to 3 significant digits; a wrong formula is off by far more).
DERIVED_RTOL = 5e-3
# Stats must match their samples to 1 ns plus this relative tolerance.
STATS_ATOL_US = 1e-3
STATS_RTOL = 1e-6

TMP_SUFFIX = ".tmp"
_INLINE_WIDTH = 88  # flat objects up to this many characters are written on one line
MAX_LISTED = 10  # coverage problems list at most this many ids, then a count


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
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=TMP_SUFFIX)
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


class GzipError(ValueError):
    """A ``.gz`` artifact that does not decompress (corrupted or truncated)."""


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzipped deterministically: mtime 0, no file name, level ``GZIP_LEVEL``, so the
    same bytes in give the same bytes out (and the same manifest checksum) with one zlib."""
    return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)


def read_bytes(path: str | os.PathLike) -> bytes:
    """The content of an artifact file: a ``.gz`` file decompressed, anything else as stored.
    Raises GzipError (a ValueError) for a ``.gz`` file that does not decompress."""
    path = Path(path)
    data = path.read_bytes()
    if not path.name.endswith(GZIP_SUFFIX):
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise GzipError(f"not valid gzip ({e or type(e).__name__})") from e


def read_json(path: str | os.PathLike) -> Any:
    """Parse a JSON file, or a gzipped one (``*.json.gz``, see ``read_bytes``); strict UTF-8,
    NaN/Infinity rejected."""

    def no_constants(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(read_bytes(path).decode("utf-8"), parse_constant=no_constants)


def plain_name(name: str) -> str:
    """A file name or path without its ``.gz``: ``x.json.gz`` -> ``x.json``."""
    return name[: -len(GZIP_SUFFIX)] if name.endswith(GZIP_SUFFIX) else name


def is_case_name(name: str) -> bool:
    """Whether ``name`` has the suffix of a stored case file (``.json`` or ``.json.gz``)."""
    return name.endswith(CASE_SUFFIXES)


def _is_temp(relpath: str) -> bool:
    name = relpath.rsplit("/", 1)[-1]
    return name.startswith(".") and name.endswith(TMP_SUFFIX)


# ------------------------------------------------------------------------------------ checksums


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
