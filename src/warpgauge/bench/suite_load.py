"""Resolving a parsed suite document into a :class:`~warpgauge.bench.suite.Suite`.

Which operators, shapes and dtypes a suite holds: its ``[ops.<op>]`` tables, plus, when the suite
names a ``shape_set``, every registered operator that declares that set in its harness module
(``Operator.shapes``). With ``--quick`` an operator uses its table's ``quick`` list, else the
registry set ``quick`` (for ``shape_set = "default"``) or ``<shape_set>_quick`` (else the whole
set, for the small non-default sets); an operator with none is left out of the quick subset. A shapes entry may be a list, a string ``"@name"`` naming
a registry set, or (rows operators) a ``grid = {rows = [...], widths = [...]}`` table.
"""

from __future__ import annotations

from pathlib import Path

from .suite import (
    DTYPES,
    LANES,
    MODES,
    CeilingSettings,
    CompileSettings,
    Group,
    Sampling,
    Suite,
    _as_list,
    _dataclass_from,
)
from .suite_shapes import SuiteError, expand_grid, matches, parse_shape


def _quick_set(shape_set: str) -> str:
    return "quick" if shape_set in ("", "default") else f"{shape_set}_quick"


def _registry_set(op, name: str) -> list | None:
    v = op.shapes.get(name)
    if v is None:
        return None
    return list(v() if callable(v) else v)


def _shapes_entry(op_name: str, op, where: str, value) -> list:
    if isinstance(value, str):
        if not value.startswith("@"):
            raise SuiteError(f'{where} must be a list of shapes or "@set" (a registry set)')
        got = _registry_set(op, value[1:])
        if got is None:
            raise SuiteError(
                f"{where}: {op_name} declares no shape set {value[1:]!r} "
                f"(its sets: {', '.join(sorted(op.shapes)) or 'none'})"
            )
        return got
    return _as_list(where, value, (str, int))


def resolve(doc, source, quick, ops_filter, lanes_filter, shapes_filter=None) -> Suite:
    from .operators import operators

    registered = operators()
    name = doc.get("name", Path(source).stem if source else "suite")
    if not isinstance(name, str) or not name:
        raise SuiteError("name must be a non-empty string")
    seed = doc.get("seed", 2026)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SuiteError(f"seed must be an integer, got {seed!r}")
    mode = doc.get("mode", "fwd")
    if mode not in MODES:
        raise SuiteError(f"mode must be one of {list(MODES)}, got {mode!r}")
    shape_set = doc.get("shape_set", "")
    if not isinstance(shape_set, str):
        raise SuiteError("shape_set must be the name of a registry shape set (a string)")
    suite_lanes = _as_list("lanes", doc.get("lanes", list(LANES)))
    default_dtypes = _as_list("dtypes", doc.get("dtypes", ["float16", "bfloat16"]))
    max_minutes = doc.get("max_minutes", 9.0)

    sampling = _dataclass_from(Sampling, "sampling", doc.get("sampling", {}))
    compile_settings = _dataclass_from(CompileSettings, "compile", doc.get("compile", {}))
    ceilings = _dataclass_from(CeilingSettings, "ceilings", doc.get("ceilings", {}))

    quick_table = doc.get("quick", {})
    if not isinstance(quick_table, dict):
        raise SuiteError("[quick] must be a table")
    bad_q = sorted(set(quick_table) - {"dtypes", "max_minutes", "sampling", "lanes"})
    if bad_q:
        raise SuiteError(
            f"[quick]: unknown key(s) {bad_q}; known: dtypes, lanes, max_minutes, sampling"
        )
    if quick:
        if "sampling" in quick_table:
            sampling = _dataclass_from(
                Sampling, "quick.sampling", quick_table["sampling"], sampling
            )
        max_minutes = quick_table.get("max_minutes", max_minutes)
        suite_lanes = _as_list("quick.lanes", quick_table.get("lanes", suite_lanes))
    if (
        isinstance(max_minutes, bool)
        or not isinstance(max_minutes, (int, float))
        or max_minutes <= 0
    ):
        raise SuiteError(f"max_minutes must be a number > 0, got {max_minutes!r}")

    bad_lanes = [x for x in suite_lanes if x not in LANES]
    if bad_lanes or not suite_lanes:
        raise SuiteError(f"lanes must be a non-empty subset of {list(LANES)}, got {suite_lanes}")
    if lanes_filter:
        unknown_l = [x for x in lanes_filter if x not in LANES]
        if unknown_l:
            raise SuiteError(f"--lanes: unknown lane(s) {unknown_l}; known: {list(LANES)}")
        suite_lanes = [x for x in LANES if x in lanes_filter]

    ops_table = doc.get("ops", {})
    if not isinstance(ops_table, dict):
        raise SuiteError("[ops] must hold [ops.<operator>] tables")
    unknown_ops = sorted(set(ops_table) - set(registered))
    if unknown_ops:
        raise SuiteError(f"unknown operator(s) {unknown_ops}; known: {list(registered)}")
    tables = dict(ops_table)
    if shape_set:
        for op_name, op in registered.items():
            if op_name not in tables and shape_set in op.shapes:
                tables[op_name] = {}
    if not tables:
        raise SuiteError("the suite has no [ops.<operator>] tables (and no shape_set)")
    if ops_filter:
        missing = [o for o in ops_filter if o not in registered]
        if missing:
            raise SuiteError(f"--ops: unknown operator(s) {missing}; known: {list(registered)}")
        absent = [o for o in ops_filter if o not in tables]
        if absent:
            raise SuiteError(f"--ops: operator(s) {absent} are not in this suite ({list(tables)})")

    groups: list[Group] = []
    op_settings: dict[str, dict] = {}
    for op_name in sorted(tables, key=lambda o: registered[o].order) if shape_set else tables:
        table, op = tables[op_name], registered[op_name]
        where = f"ops.{op_name}"
        if not isinstance(table, dict):
            raise SuiteError(f"[{where}] must be a table")
        extras = op.settings
        known = {"shapes", "quick", "dtypes", "grid", *extras}
        bad = sorted(set(table) - known)
        if bad:
            raise SuiteError(f"[{where}]: unknown key(s) {bad}; known: {sorted(known)}")
        settings = {k: table.get(k, v) for k, v in extras.items()}
        _check_settings(where, settings)
        if "shapes" in table:
            shapes = _shapes_entry(op_name, op, f"{where}.shapes", table["shapes"])
        elif shape_set and shape_set in op.shapes:
            shapes = _registry_set(op, shape_set)
        else:
            shapes = []
        if "grid" in table:
            shapes = shapes + expand_grid(op_name, table["grid"])
        if not shapes:
            raise SuiteError(f"[{where}] lists no shapes")
        parsed = [parse_shape(op_name, s, settings) for s in shapes]
        if "quick" in table:
            quick_shapes = _shapes_entry(op_name, op, f"{where}.quick", table["quick"])
        elif "shapes" not in table and "grid" not in table:
            quick_shapes = _registry_set(op, _quick_set(shape_set))
            if quick_shapes is None and shape_set not in ("", "default"):
                quick_shapes = _registry_set(op, shape_set)  # a small set is its own quick subset
        else:
            quick_shapes = None
        if quick_shapes is not None:
            for s in quick_shapes:
                parse_shape(op_name, s, settings)  # validate even when not selected
        dtypes = _as_list(f"{where}.dtypes", table.get("dtypes", list(op.dtypes or default_dtypes)))
        bad_dt = [d for d in dtypes if d not in DTYPES]
        if bad_dt or not dtypes:
            raise SuiteError(f"[{where}]: dtypes must be a non-empty subset of {list(DTYPES)}")
        if ops_filter and op_name not in ops_filter:
            continue
        if quick:
            if not quick_shapes:
                continue  # no quick shapes: the operator is not in the quick subset
            parsed = [parse_shape(op_name, s, settings) for s in quick_shapes]
            qd = quick_table.get("dtypes")
            if qd is not None:
                dtypes = [d for d in dtypes if d in _as_list("quick.dtypes", qd)] or dtypes[:1]
        seen = set()
        kept = 0
        for label, shape in parsed:
            if label in seen:
                raise SuiteError(f"[{where}]: shape {label} is listed twice")
            seen.add(label)
            for dt in dtypes:
                if matches(shapes_filter, op_name, dt, label):
                    groups.append(Group(op_name, dt, label, tuple(sorted(shape.items()))))
                    kept += 1
        if kept:
            op_settings[op_name] = settings
    if not groups:
        raise SuiteError(
            "the selection is empty (check --ops, --quick, --shapes and the [quick] shapes)"
        )
    return Suite(
        name=name,
        groups=tuple(groups),
        lanes=tuple(suite_lanes),
        seed=seed,
        description=str(doc.get("description", "")),
        quick=quick,
        max_minutes=float(max_minutes),
        sampling=sampling,
        compile=compile_settings,
        ceilings=ceilings,
        op_settings=op_settings,
        source=source,
        mode=mode,
        shape_set=shape_set,
        shape_filter=tuple(shapes_filter or ()),
    )


def _check_settings(where: str, settings: dict) -> None:
    gs = settings.get("group_size")
    if gs is not None and (isinstance(gs, bool) or not isinstance(gs, int) or gs < 16 or gs % 16):
        raise SuiteError(f"[{where}]: group_size must be a positive multiple of 16 (e.g. 128)")
    if "eps" in settings and (
        not isinstance(settings["eps"], (int, float)) or not settings["eps"] > 0
    ):
        raise SuiteError(f"[{where}]: eps must be a number > 0")


__all__ = ["CeilingSettings", "CompileSettings", "resolve"]
