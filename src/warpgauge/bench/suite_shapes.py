"""How suite shapes are written and read: one parser per shape kind, grids, and shape filters.

Shape kinds come from the operator registry (``Operator.shape_kind``):

- ``numel``: an element count such as 257, 1M or 16M (K/M/G = 2^10/2^20/2^30);
- ``rows``: ROWSxWIDTH such as 1024x4096;
- ``mnk``: MxNxK such as 4096x4096x4096 (or N^3), optionally with layout flags after commas
  (``at``: A transposed, ``bt``: B transposed, ``sliced``: operands cut from wider tensors);
- ``int4``: MxNxK such as 1x4096x4096 (x[M,K] @ W[N,K]^T; K a multiple of group_size).

Nothing here imports torch.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Any


class SuiteError(ValueError):
    """A suite file or selection that cannot be used; the message says what to change."""


SHAPE_HELP = {
    "numel": "an element count such as 257, 1M or 16M (K/M/G = 2^10/2^20/2^30)",
    "rows": "ROWSxWIDTH such as 1024x4096",
    "mnk": "MxNxK such as 4096x4096x4096 (or N^3), optionally ,at ,bt or ,sliced",
    "int4": "MxNxK such as 1x4096x4096 (x[M,K] @ W[N,K]^T; K a multiple of group_size)",
}
MNK_FLAGS = ("at", "bt", "sliced")
_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def shape_kind(op: str) -> str:
    from .operators import operators

    ops = operators()
    if op not in ops:
        raise SuiteError(f"unknown operator {op!r}; known: {list(ops)}")
    return ops[op].shape_kind


def _numel_label(n: int) -> str:
    for suffix, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n % scale == 0:
            return f"{n // scale}{suffix}"
    return str(n)


def parse_shape(op: str, text: Any, settings: dict | None = None) -> tuple[str, dict[str, int]]:
    """(canonical label, shape dict) of one shape entry of ``op``; SuiteError if malformed."""
    kind = shape_kind(op)
    settings = settings or {}
    s = str(text).strip().replace(" ", "")
    bad = SuiteError(f"ops.{op}: shape {text!r} is not {SHAPE_HELP[kind]}")
    if kind == "numel":
        m = re.fullmatch(r"(\d+)([KMG]?)", s, flags=re.IGNORECASE)
        if not m:
            raise bad
        n = int(m.group(1)) * _SUFFIX[m.group(2).upper()]
        if n < 1:
            raise bad
        return _numel_label(n), {"numel": n}
    if kind == "rows":
        m = re.fullmatch(r"(\d+)x(\d+)", s, flags=re.IGNORECASE)
        if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
            raise bad
        r, w = int(m.group(1)), int(m.group(2))
        return f"{r}x{w}", {"rows": r, "width": w}
    head, *flags = s.split(",")
    m3 = re.fullmatch(r"(\d+)\^3", head)
    if m3:
        dims = [int(m3.group(1))] * 3
    else:
        m = re.fullmatch(r"(\d+)x(\d+)x(\d+)", head, flags=re.IGNORECASE)
        if not m:
            raise bad
        dims = [int(g) for g in m.groups()]
    if min(dims) < 1:
        raise bad
    M, N, K = dims
    label = f"{M}x{N}x{K}"
    if kind == "mnk":
        flags = [f.lower() for f in flags if f]
        unknown = [f for f in flags if f not in MNK_FLAGS]
        if unknown:
            raise SuiteError(
                f"ops.{op}: shape {text!r}: unknown layout flag(s) {unknown}; known: {MNK_FLAGS}"
            )
        shape = {"M": M, "N": N, "K": K}
        for f in MNK_FLAGS:  # canonical order
            if f in flags:
                shape[f] = 1
                label += f",{f}"
        return label, shape
    if flags:
        raise bad
    gs = int(settings.get("group_size", 128))
    if K % gs or K % 2:
        raise SuiteError(f"ops.{op}: shape {text!r}: K={K} must be a multiple of group_size={gs}")
    if gs != 128:
        label += f",g={gs}"
    return label, {"M": M, "N": N, "K": K, "group_size": gs}


def expand_grid(op: str, grid: Any) -> list[str]:
    """A ``grid = {rows = [...], widths = [...], max_elements = N}`` table -> ROWSxWIDTH entries
    (rows-kind operators only), every pair with rows * width <= max_elements."""
    if shape_kind(op) != "rows":
        raise SuiteError(f"[ops.{op}]: grid is for ROWSxWIDTH operators only")
    if not isinstance(grid, dict) or not {"rows", "widths"} <= set(grid):
        raise SuiteError(f"[ops.{op}]: grid must be a table with rows and widths lists")
    bad = sorted(set(grid) - {"rows", "widths", "max_elements"})
    if bad:
        raise SuiteError(
            f"[ops.{op}].grid: unknown key(s) {bad}; known: max_elements, rows, widths"
        )
    rows, widths = grid["rows"], grid["widths"]
    cap = grid.get("max_elements", 1 << 28)
    for name, v in (("rows", rows), ("widths", widths)):
        if (
            not isinstance(v, list)
            or not v
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v)
        ):
            raise SuiteError(f"[ops.{op}].grid.{name} must be a non-empty list of integers >= 1")
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise SuiteError(f"[ops.{op}].grid.max_elements must be an integer >= 1")
    return [f"{r}x{w}" for w in widths for r in rows if r * w <= cap]


def matches(patterns: list[str] | None, op: str, dtype: str, label: str) -> bool:
    """Shape filter: a group is kept when any glob matches its shape label, its ``op/label`` or
    its ``op/dtype/label`` (``--shapes '*x4096'``, ``--shapes 'softmax/1024x*'``)."""
    if not patterns:
        return True
    keys = (label, f"{op}/{label}", f"{op}/{dtype}/{label}")
    return any(fnmatch.fnmatchcase(k, p) for p in patterns for k in keys)
