"""The JSON Schemas (``warpgauge/schemas/*.json``, Draft 2020-12) and case ids.

jsonschema is imported on first use, never at import time. Without it (``have_jsonschema()`` is
False) ``schema_errors`` returns no errors and ``SCHEMA_SKIPPED`` says why: the writers still
apply every cross-field rule, and ``validate_run`` reports the skipped schema check as a problem.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

from .files import SCHEMA_FILES, _jpath

SCHEMA_SKIPPED = (
    "schemas not checked: jsonschema>=4.18 is not installed "
    "(pip install jsonschema, or pip install 'warpgauge[bench]')"
)


@functools.cache
def _schema_texts() -> dict[str, dict]:
    here = Path(__file__).parent.parent / "schemas"
    return {name: json.loads((here / f"{name}.json").read_text("utf-8")) for name in SCHEMA_FILES}


def schema(name: str) -> dict:
    """The JSON Schema (Draft 2020-12) for ``name``: "run", "case", "ceilings", "manifest" or
    "common" (shared definitions). Returns a fresh copy."""
    if name not in SCHEMA_FILES:
        raise ValueError(f"unknown schema {name!r}; expected one of {', '.join(SCHEMA_FILES)}")
    return json.loads(json.dumps(_schema_texts()[name]))


@functools.cache
def have_jsonschema() -> bool:
    """Whether jsonschema (with referencing) can be imported here."""
    try:
        import jsonschema  # noqa: F401
        import referencing  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def _validator(name: str):
    try:
        from jsonschema import Draft202012Validator
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT202012
    except ImportError as e:
        raise ImportError(
            "validating artifacts needs jsonschema>=4.18 (with referencing): "
            "pip install 'warpgauge[bench]' or the jsonschema wheels"
        ) from e

    texts = _schema_texts()
    registry = Registry().with_resources(
        (s["$id"], Resource.from_contents(s, default_specification=DRAFT202012))
        for s in texts.values()
    )
    if "#" in name:  # a definition, e.g. "common#/$defs/telemetry_snapshot"
        file, pointer = name.split("#", 1)
        target = {"$ref": texts[file]["$id"] + "#" + pointer}
    else:
        target = texts[name]
    return Draft202012Validator(target, registry=registry)


def schema_errors(name: str, obj: Any) -> list[str]:
    """Every way ``obj`` breaks schema ``name`` ("run", "case", "ceilings", "manifest", or a
    definition such as "common#/$defs/telemetry_snapshot"), as sorted ``"$.path: message"`` lines.
    Without jsonschema: an empty list (see ``have_jsonschema``)."""
    if not have_jsonschema():
        return []
    from jsonschema.exceptions import best_match

    out = []
    for err in _validator(name).iter_errors(obj):
        best = best_match([err]) or err  # descends into anyOf/if-then to the informative error
        msg = best.message
        if len(msg) > 240:
            msg = msg[:200] + " ... " + msg[-30:]
        out.append(f"{_jpath(best.absolute_path)}: {msg}")
    return sorted(set(out))


# ------------------------------------------------------------------------------------ case ids


def make_case_id(op: str, dtype: str, shape_label: str, lane: str) -> str:
    """``"<op>/<dtype>/<shape_label>/<lane>"``, e.g. ``softmax/bfloat16/32768x8192/cold``."""
    return f"{op}/{dtype}/{shape_label}/{lane}"


def case_filename(case_id: str) -> str:
    """The file name (inside ``cases/``) of a case: its id with ``/`` replaced by ``__`` plus
    ``.json``. Raises ValueError for an id that is not ``op/dtype/shape_label/lane``."""
    pattern = _schema_texts()["common"]["$defs"]["case_id"]["pattern"]
    if not isinstance(case_id, str) or not re.fullmatch(pattern, case_id):
        raise ValueError(
            f"case id {case_id!r} is not '<op>/<dtype>/<shape-label>/<lane>' "
            "(lowercase op and dtype, no '/' or spaces in the shape label, lane cold|warm)"
        )
    return case_id.replace("/", "__") + ".json"
