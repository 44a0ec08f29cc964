"""Which cases a run must hold, recomputed from what the run asked for, never from its own list.

``run.json`` lists ``expected_cases``, but a list can be edited along with the files it covers.
So the validator derives the expected cases from the recorded config (``config.groups`` x
``config.lanes``, in that order: exactly what ``Suite.case_ids()`` produces) and, when the run
names a packaged suite whose SHA-256 (``config.source_sha256``) matches the file in this
install, re-resolves that suite with the recorded selection (``config.selection``: ``ops``,
``lanes``, ``quick``) and checks that ``config.groups`` is what it selects.

A mode or filter that changes which cases a run holds must record it in ``config.selection``;
any selection key besides ``ops``, ``lanes`` and ``quick`` (a shape filter, say) makes the
packaged-suite check a subset check: every recorded group must still be one the suite defines.
"""

from __future__ import annotations

import hashlib
from importlib import resources

from .files import MAX_LISTED
from .schemas import make_case_id

PACKAGE_PREFIX = "package:warpgauge/suites/"
_KNOWN_SELECTION = {"ops", "lanes", "quick"}


def _listed(items: list[str]) -> str:
    head = ", ".join(items[:MAX_LISTED])
    more = len(items) - MAX_LISTED
    return head + (f", ... and {more} more" if more > 0 else "")


def _group_key(g: dict) -> tuple:
    return (g["op"], g["dtype"], g["shape_label"], tuple(sorted(g["shape"].items())))


def expected_cases(config: dict) -> list[str] | None:
    """The case ids a config asks for: each of ``config.groups`` in each of ``config.lanes``
    (group-major, like ``Suite.case_ids``). None when the config records no groups."""
    groups = config.get("groups")
    if not isinstance(groups, list):
        return None
    return [
        make_case_id(g["op"], g["dtype"], g["shape_label"], lane)
        for g in groups
        for lane in config["lanes"]
    ]


def config_problems(config: dict) -> list[str]:
    """The config's groups are well formed and agree with ``config.ops``."""
    groups = config.get("groups")
    if groups is None:
        return [
            "$.config.groups: missing; the expected cases cannot be recomputed from the config "
            "(the runner records every (op, dtype, shape_label, shape) it was asked to measure)"
        ]
    p = []
    if not isinstance(groups, list):
        return ["$.config.groups: not a list"]
    for i, g in enumerate(groups):
        if not (
            isinstance(g, dict)
            and all(isinstance(g.get(k), str) for k in ("op", "dtype", "shape_label"))
            and isinstance(g.get("shape"), dict)
        ):
            p.append(f"$.config.groups[{i}]: needs op, dtype, shape_label (strings) and shape")
    if p:
        return p
    keys = [_group_key(g) for g in groups]
    dupes = sorted({"/".join(k[:3]) for k in keys if keys.count(k) > 1})
    if dupes:
        p.append(f"$.config.groups: listed twice: {_listed(dupes)}")
    ops_in_groups = list(dict.fromkeys(g["op"] for g in groups))
    if list(config.get("ops", [])) != ops_in_groups:
        p.append(
            f"$.config.ops is {config.get('ops')} but config.groups hold the operators "
            f"{ops_in_groups}"
        )
    return p


def expected_vs_recorded(config_expected: list[str], recorded: list[str]) -> list[str]:
    """run.json's expected_cases must be exactly what the config asks for."""
    p = []
    rec = set(recorded)
    dropped = [c for c in config_expected if c not in rec]
    if dropped:
        p.append(
            f"run.json: $.expected_cases lacks {len(dropped)} case(s) that config.groups x "
            f"config.lanes ask for: {_listed(dropped)}"
        )
    want = set(config_expected)
    added = [c for c in recorded if c not in want]
    if added:
        p.append(
            f"run.json: $.expected_cases lists {len(added)} case(s) the config does not ask for: "
            f"{_listed(added)}"
        )
    return p


def packaged_suite_check(config: dict) -> tuple[list[str], list[str]]:
    """(problems, notes) from re-resolving the packaged suite the run names, when its hash
    matches. Notes say why the check could not run (not a packaged suite, no hash recorded,
    the suite changed since the run); they are not problems."""
    source = config.get("source") or ""
    if not source.startswith(PACKAGE_PREFIX):
        why = "a suite file" if source else "no suite source recorded"
        return [], [f"cases checked against config.groups only ({why}, not a packaged suite)"]
    name = source[len(PACKAGE_PREFIX) :]
    recorded_hash = config.get("source_sha256")
    if not recorded_hash:
        return [], [
            f"cases checked against config.groups only: the run names {name} but records no "
            "source_sha256 (made before suite hashes were recorded)"
        ]
    res = resources.files("warpgauge").joinpath("suites", name)
    if not res.is_file():
        return [], [f"cases checked against config.groups only: {name} is not in this install"]
    text = res.read_text(encoding="utf-8")
    if hashlib.sha256(text.encode("utf-8")).hexdigest() != recorded_hash:
        return [], [
            f"cases checked against config.groups only: the packaged {name} changed since "
            "the run (its SHA-256 differs from config.source_sha256)"
        ]
    selection = config.get("selection") or {}
    try:
        from warpgauge.bench.suite import parse_suite

        suite = parse_suite(
            text,
            source=source,
            quick=bool(config.get("quick", selection.get("quick", False))),
            ops=selection.get("ops"),
            lanes=selection.get("lanes"),
        )
    except Exception as e:  # a suite module that cannot read its own file: say so, go on
        return [], [f"packaged suite {name} could not be re-resolved: {type(e).__name__}: {e}"]
    resolved = {
        (g.op, g.dtype, g.shape_label, tuple(sorted(g.shape.items()))): g for g in suite.groups
    }
    recorded = {_group_key(g) for g in config["groups"]}
    p = []
    foreign = sorted("/".join(k[:3]) for k in recorded - set(resolved))
    if foreign:
        p.append(
            f"$.config.groups holds {len(foreign)} group(s) that the packaged {name} "
            f"(hash matches) does not define with that shape: {_listed(foreign)}"
        )
    narrowed = set(selection) - _KNOWN_SELECTION
    if not narrowed:
        lost = [g.key for k, g in resolved.items() if k not in recorded]
        if lost:
            p.append(
                f"$.config.groups lacks {len(lost)} group(s) that the packaged {name} (hash "
                f"matches) selects with the recorded selection: {_listed(lost)}"
            )
        if set(config["lanes"]) != set(suite.lanes):
            p.append(
                f"$.config.lanes is {config['lanes']} but the packaged {name} selects "
                f"{list(suite.lanes)}"
            )
    return p, []


def coverage_problems(run: dict, present) -> tuple[list[str], list[str], list[str]]:
    """(problems, notes, expected): the config, the recorded expected cases, the packaged suite,
    and which expected cases have a case file (``present``: ids of the case files on disk).
    ``expected`` is the config's list, or run.json's when the config records no usable groups."""
    config = run["config"]
    problems = [f"run.json: {p}" for p in config_problems(config)]
    notes: list[str] = []
    expected = expected_cases(config) if not problems else None
    if expected is None:
        expected = list(run["expected_cases"])
    else:
        problems += expected_vs_recorded(expected, run["expected_cases"])
        more, notes = packaged_suite_check(config)
        problems += [f"run.json: {p}" for p in more]
    missing = [c for c in expected if c not in present]
    if missing:
        problems.append(
            f"coverage: {len(missing)} of {len(expected)} expected case(s) have no case file: "
            + _listed(missing)
        )
    return problems, notes, expected
