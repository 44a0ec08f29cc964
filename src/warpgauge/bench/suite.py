"""Benchmark suites: which (operator, dtype, shape) groups to measure, in which lanes, and how.

A suite is a TOML file (the packaged ones live in ``warpgauge/suites/``; ``default.toml`` documents
every key). ``load_suite`` resolves it into a frozen :class:`Suite`, optionally narrowed to the
``quick`` shapes, some operators or some lanes. ``Suite.to_config()`` is what ``run.json`` stores
and ``Suite.from_config`` rebuilds the same suite from it, so ``--resume`` needs no TOML file.

Nothing here imports torch: dtypes are names ("float16", "bfloat16", "float32").
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import zlib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

LANES = ("cold", "warm")
DTYPES = ("float16", "bfloat16", "float32")
COMPILE_MODES = ("default", "max-autotune", "max-autotune-no-cudagraphs", "reduce-overhead")

# Operator -> how its shapes are written.
SHAPE_KINDS = {
    "add": "numel",
    "row_sum": "rows",
    "softmax": "rows",
    "add_rms_norm": "rows",
    "gemm": "mnk",
    "int4_linear": "int4",
}
OPS = tuple(SHAPE_KINDS)
_SHAPE_HELP = {
    "numel": "an element count such as 257, 1M or 16M (K/M/G = 2^10/2^20/2^30)",
    "rows": "ROWSxWIDTH such as 1024x4096",
    "mnk": "MxNxK such as 4096x4096x4096 (or N^3)",
    "int4": "MxNxK such as 1x4096x4096 (x[M,K] @ W[N,K]^T; K a multiple of group_size)",
}
# Keys each [ops.<op>] table may hold, beyond shapes / quick / dtypes.
_OP_EXTRA_KEYS = {"add_rms_norm": {"eps": 1e-6}, "int4_linear": {"group_size": 128}}
_TOP_KEYS = {
    "name", "description", "seed", "lanes", "dtypes", "max_minutes",
    "sampling", "compile", "ceilings", "quick", "ops",
}  # fmt: skip


class SuiteError(ValueError):
    """A suite file or selection that cannot be used; the message says what to change."""


# ------------------------------------------------------------------------------------ settings


@dataclass(frozen=True)
class Sampling:
    rounds: int = 5
    target_ms: float = 100.0
    host_share: float = 0.35
    min_samples: int = 10
    max_samples: int = 400
    max_host_samples: int = 100
    warmup_calls: int = 3
    graph_target_us: float = 200.0
    max_calls_per_graph: int = 50
    burst_ms: float = 200.0
    burst_skip_ms: float = 250.0
    # The stopping rule and the fault limit (bench/timing.py StopRule; bench/errors.py time_limit)
    max_rse: float = 0.01  # stop once the median's relative standard error is at most this
    max_rounds: int = 16
    batch_ms: float = 2.0  # device time one provider's batch aims at within a round
    provider_timeout_s: float = 300.0  # one provider's build+gate, capture, or batch; 0: none

    def check(self) -> Sampling:
        problems = []
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                problems.append(f"sampling.{f.name} must be a number >= 0, got {v!r}")
        if not problems:
            if self.rounds < 1 or self.min_samples < 1 or self.max_calls_per_graph < 1:
                problems.append("sampling.rounds, min_samples and max_calls_per_graph must be >= 1")
            if self.max_samples < self.min_samples or self.max_host_samples < 1:
                problems.append(
                    "sampling.max_samples must be >= min_samples; max_host_samples >= 1"
                )
            if not 0.0 <= self.host_share < 1.0:
                problems.append("sampling.host_share must be in [0, 1)")
        if problems:
            raise SuiteError("; ".join(problems))
        return self


@dataclass(frozen=True)
class CompileSettings:
    modes: tuple[str, ...] = ("default", "max-autotune", "max-autotune-no-cudagraphs")
    precompile_workers: int = 8
    precompile_share: float = 0.5

    def check(self) -> CompileSettings:
        bad = [m for m in self.modes if m not in COMPILE_MODES]
        if bad:
            raise SuiteError(f"compile.modes: unknown mode(s) {bad}; known: {list(COMPILE_MODES)}")
        if not isinstance(self.precompile_workers, int) or self.precompile_workers < 0:
            raise SuiteError("compile.precompile_workers must be an integer >= 0")
        if not 0.0 < self.precompile_share <= 1.0:
            raise SuiteError("compile.precompile_share must be in (0, 1]")
        return self


@dataclass(frozen=True)
class CeilingSettings:
    copy_bytes: int = 2 << 30
    mm_sizes: tuple[int, ...] = (4096, 8192)

    def check(self) -> CeilingSettings:
        if not isinstance(self.copy_bytes, int) or self.copy_bytes < (1 << 20):
            raise SuiteError("ceilings.copy_bytes must be an integer >= 1 MiB")
        if not self.mm_sizes or any(not isinstance(n, int) or n < 16 for n in self.mm_sizes):
            raise SuiteError("ceilings.mm_sizes must be a non-empty list of integers >= 16")
        return self


# ------------------------------------------------------------------------------------ groups


@dataclass(frozen=True)
class Group:
    """One (operator, dtype, shape): the unit that shares inputs, references and gates. Each lane
    of a group is one case (one artifact)."""

    op: str
    dtype: str
    shape_label: str
    shape_items: tuple[tuple[str, int], ...]

    @property
    def shape(self) -> dict[str, int]:
        return dict(self.shape_items)

    @property
    def key(self) -> str:
        return f"{self.op}/{self.dtype}/{self.shape_label}"

    def case_id(self, lane: str) -> str:
        return f"{self.key}/{lane}"

    def seed(self, base_seed: int) -> int:
        """Seed of this group's inputs: stable across runs, processes and Python versions."""
        return zlib.crc32(f"{base_seed}:{self.key}".encode()) & 0x7FFFFFFF


def split_case_id(case_id: str) -> tuple[str, str, str, str]:
    parts = case_id.split("/")
    if len(parts) != 4:
        raise SuiteError(f"case id {case_id!r} is not op/dtype/shape/lane")
    return parts[0], parts[1], parts[2], parts[3]


_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _numel_label(n: int) -> str:
    for suffix, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n % scale == 0:
            return f"{n // scale}{suffix}"
    return str(n)


def parse_shape(op: str, text: Any, settings: dict | None = None) -> tuple[str, dict[str, int]]:
    """(canonical label, shape dict) of one shape entry of ``op``; SuiteError if malformed."""
    kind = SHAPE_KINDS[op]
    settings = settings or {}
    s = str(text).strip().replace(" ", "")
    bad = SuiteError(f"ops.{op}: shape {text!r} is not {_SHAPE_HELP[kind]}")
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
    m3 = re.fullmatch(r"(\d+)\^3", s)
    if m3:
        dims = [int(m3.group(1))] * 3
    else:
        m = re.fullmatch(r"(\d+)x(\d+)x(\d+)", s, flags=re.IGNORECASE)
        if not m:
            raise bad
        dims = [int(g) for g in m.groups()]
    if min(dims) < 1:
        raise bad
    M, N, K = dims
    label = f"{M}x{N}x{K}"
    if kind == "mnk":
        return label, {"M": M, "N": N, "K": K}
    gs = int(settings.get("group_size", 128))
    if K % gs or K % 2:
        raise SuiteError(f"ops.{op}: shape {text!r}: K={K} must be a multiple of group_size={gs}")
    if gs != 128:
        label += f",g={gs}"
    return label, {"M": M, "N": N, "K": K, "group_size": gs}


# ------------------------------------------------------------------------------------ suite


@dataclass(frozen=True)
class Suite:
    name: str
    groups: tuple[Group, ...]
    lanes: tuple[str, ...] = LANES
    seed: int = 2026
    description: str = ""
    quick: bool = False
    max_minutes: float = 9.0
    sampling: Sampling = field(default_factory=Sampling)
    compile: CompileSettings = field(default_factory=CompileSettings)
    ceilings: CeilingSettings = field(default_factory=CeilingSettings)
    op_settings: dict = field(default_factory=dict)  # op -> {"eps": .., "group_size": ..}
    source: str = ""
    source_sha256: str = ""  # of the suite's TOML text: validate re-resolves a packaged suite
    selection: dict = field(default_factory=dict)  # the filters applied: {ops, lanes, quick}

    @property
    def ops(self) -> list[str]:
        seen: list[str] = []
        for g in self.groups:
            if g.op not in seen:
                seen.append(g.op)
        return seen

    def cases(self) -> list[tuple[Group, str]]:
        return [(g, lane) for g in self.groups for lane in self.lanes]

    def case_ids(self) -> list[str]:
        return [g.case_id(lane) for g, lane in self.cases()]

    def settings_for(self, op: str) -> dict:
        return dict(self.op_settings.get(op, {}))

    def to_config(self) -> dict:
        """The resolved suite as run.json's ``config``."""
        return {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "source_sha256": self.source_sha256,
            "selection": dict(self.selection),
            "lanes": list(self.lanes),
            "ops": self.ops,
            "quick": self.quick,
            "seed": self.seed,
            "max_minutes": self.max_minutes,
            "sampling": dataclasses.asdict(self.sampling),
            "compile": {**dataclasses.asdict(self.compile), "modes": list(self.compile.modes)},
            "ceilings": {
                **dataclasses.asdict(self.ceilings),
                "mm_sizes": list(self.ceilings.mm_sizes),
            },
            "op_settings": {k: dict(v) for k, v in self.op_settings.items()},
            "groups": [
                {"op": g.op, "dtype": g.dtype, "shape_label": g.shape_label, "shape": g.shape}
                for g in self.groups
            ],
        }

    @classmethod
    def from_config(cls, cfg: dict) -> Suite:
        """Rebuild the suite a run was made with (``run.json``'s ``config``)."""
        try:
            groups = tuple(
                Group(g["op"], g["dtype"], g["shape_label"], tuple(sorted(g["shape"].items())))
                for g in cfg["groups"]
            )
            comp = dict(cfg.get("compile", {}))
            comp["modes"] = tuple(comp.get("modes", CompileSettings.modes))
            ceil = dict(cfg.get("ceilings", {}))
            ceil["mm_sizes"] = tuple(ceil.get("mm_sizes", CeilingSettings.mm_sizes))
            return cls(
                name=cfg["name"],
                groups=groups,
                lanes=tuple(cfg["lanes"]),
                seed=int(cfg["seed"]),
                description=cfg.get("description", ""),
                quick=bool(cfg.get("quick", False)),
                max_minutes=float(cfg.get("max_minutes", 9.0)),
                sampling=Sampling(**cfg.get("sampling", {})).check(),
                compile=CompileSettings(**comp).check(),
                ceilings=CeilingSettings(**ceil).check(),
                op_settings={k: dict(v) for k, v in cfg.get("op_settings", {}).items()},
                source=cfg.get("source", ""),
                source_sha256=cfg.get("source_sha256", ""),
                selection=dict(cfg.get("selection", {})),
            )
        except (KeyError, TypeError) as e:
            raise SuiteError(f"run.json config cannot be read back as a suite: {e!r}") from e

    def with_overrides(self, *, max_minutes=None, precompile_workers=None) -> Suite:
        out = self
        if max_minutes is not None:
            out = dataclasses.replace(out, max_minutes=float(max_minutes))
        if precompile_workers is not None:
            comp = dataclasses.replace(out.compile, precompile_workers=int(precompile_workers))
            out = dataclasses.replace(out, compile=comp.check())
        return out


# ------------------------------------------------------------------------------------ loading


def packaged_suites() -> list[str]:
    """Names of the suites shipped inside the package."""
    root = resources.files("warpgauge").joinpath("suites")
    return sorted(p.name[: -len(".toml")] for p in root.iterdir() if p.name.endswith(".toml"))


def _read_suite_text(spec: str) -> tuple[str, str]:
    """(TOML text, source description) of a packaged suite name or a file path."""
    path = Path(spec)
    if path.suffix == ".toml" or path.exists() or "/" in spec:
        if not path.is_file():
            raise SuiteError(f"suite file {spec} does not exist")
        return path.read_text(encoding="utf-8"), str(path.resolve())
    res = resources.files("warpgauge").joinpath("suites", f"{spec}.toml")
    if not res.is_file():
        raise SuiteError(
            f"no suite named {spec!r}; packaged suites: {', '.join(packaged_suites())}, "
            "or pass the path of a .toml file"
        )
    return res.read_text(encoding="utf-8"), f"package:warpgauge/suites/{spec}.toml"


def _as_list(where: str, v, item_type=str) -> list:
    types = item_type if isinstance(item_type, tuple) else (item_type,)
    if not isinstance(v, list) or not all(
        isinstance(x, types) and not isinstance(x, bool) for x in v
    ):
        names = " or ".join(t.__name__ for t in types)
        raise SuiteError(f"{where} must be a list of {names} values, got {v!r}")
    return v


def _dataclass_from(cls, where: str, table: dict, base=None):
    if not isinstance(table, dict):
        raise SuiteError(f"[{where}] must be a table")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - names)
    if unknown:
        raise SuiteError(f"[{where}]: unknown key(s) {unknown}; known: {sorted(names)}")
    values = dataclasses.asdict(base) if base is not None else {}
    values.update(table)
    for k in ("modes", "mm_sizes"):
        if k in values and isinstance(values[k], list):
            values[k] = tuple(values[k])
    try:
        return cls(**values).check()
    except TypeError as e:
        raise SuiteError(f"[{where}]: {e}") from e


def parse_suite(
    text: str,
    *,
    source: str = "<string>",
    quick: bool = False,
    ops: list[str] | None = None,
    lanes: list[str] | None = None,
) -> Suite:
    """Parse suite TOML ``text`` and resolve the selection; SuiteError on any problem."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SuiteError(f"{source}: not valid TOML: {e}") from e
    unknown = sorted(set(doc) - _TOP_KEYS)
    if unknown:
        raise SuiteError(
            f"{source}: unknown top-level key(s) {unknown}; known: {sorted(_TOP_KEYS)}"
        )
    try:
        suite = _resolve(doc, source, quick, ops, lanes)
    except SuiteError as e:
        raise SuiteError(f"{source}: {e}") from None
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    selection = {"ops": list(ops) if ops else None, "lanes": list(lanes) if lanes else None}
    return dataclasses.replace(suite, source_sha256=digest, selection={**selection, "quick": quick})


def _resolve(doc, source, quick, ops_filter, lanes_filter) -> Suite:
    name = doc.get("name", Path(source).stem if source else "suite")
    if not isinstance(name, str) or not name:
        raise SuiteError("name must be a non-empty string")
    seed = doc.get("seed", 2026)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SuiteError(f"seed must be an integer, got {seed!r}")
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

    ops_table = doc.get("ops")
    if not isinstance(ops_table, dict) or not ops_table:
        raise SuiteError("the suite has no [ops.<operator>] tables")
    unknown_ops = sorted(set(ops_table) - set(OPS))
    if unknown_ops:
        raise SuiteError(f"unknown operator(s) {unknown_ops}; known: {list(OPS)}")
    if ops_filter:
        missing = [o for o in ops_filter if o not in OPS]
        if missing:
            raise SuiteError(f"--ops: unknown operator(s) {missing}; known: {list(OPS)}")
        absent = [o for o in ops_filter if o not in ops_table]
        if absent:
            raise SuiteError(
                f"--ops: operator(s) {absent} are not in this suite ({list(ops_table)})"
            )

    groups: list[Group] = []
    op_settings: dict[str, dict] = {}
    for op, table in ops_table.items():
        if not isinstance(table, dict):
            raise SuiteError(f"[ops.{op}] must be a table")
        extras = _OP_EXTRA_KEYS.get(op, {})
        known = {"shapes", "quick", "dtypes", *extras}
        bad = sorted(set(table) - known)
        if bad:
            raise SuiteError(f"[ops.{op}]: unknown key(s) {bad}; known: {sorted(known)}")
        settings = {k: table.get(k, v) for k, v in extras.items()}
        gs = settings.get("group_size")
        if gs is not None and (
            isinstance(gs, bool) or not isinstance(gs, int) or gs < 16 or gs % 16
        ):
            raise SuiteError(f"[ops.{op}]: group_size must be a positive multiple of 16 (e.g. 128)")
        if "eps" in settings and (
            not isinstance(settings["eps"], (int, float)) or not settings["eps"] > 0
        ):
            raise SuiteError(f"[ops.{op}]: eps must be a number > 0")
        shapes = _as_list(f"ops.{op}.shapes", table.get("shapes", []), (str, int))
        if not shapes:
            raise SuiteError(f"[ops.{op}] lists no shapes")
        parsed = [parse_shape(op, s, settings) for s in shapes]
        quick_shapes = table.get("quick")
        if quick_shapes is not None:
            for s in _as_list(f"ops.{op}.quick", quick_shapes, (str, int)):
                parse_shape(op, s, settings)  # validate even when not selected
        dtypes = _as_list(f"ops.{op}.dtypes", table.get("dtypes", default_dtypes))
        bad_dt = [d for d in dtypes if d not in DTYPES]
        if bad_dt or not dtypes:
            raise SuiteError(f"[ops.{op}]: dtypes must be a non-empty subset of {list(DTYPES)}")
        if ops_filter and op not in ops_filter:
            continue
        if quick:
            if not quick_shapes:
                continue  # no quick shapes: the operator is not in the quick subset
            parsed = [parse_shape(op, s, settings) for s in quick_shapes]
            qd = quick_table.get("dtypes")
            if qd is not None:
                dtypes = [d for d in dtypes if d in _as_list("quick.dtypes", qd)]
        op_settings[op] = settings
        seen = set()
        for label, shape in parsed:
            if label in seen:
                raise SuiteError(f"[ops.{op}]: shape {label} is listed twice")
            seen.add(label)
            for dt in dtypes:
                groups.append(Group(op, dt, label, tuple(sorted(shape.items()))))
    if not groups:
        raise SuiteError("the selection is empty (check --ops, --quick and the [quick] shapes)")
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
    )


def load_suite(
    spec: str = "default",
    *,
    quick: bool = False,
    ops: list[str] | None = None,
    lanes: list[str] | None = None,
) -> Suite:
    """Load a packaged suite by name (``default``) or a TOML file by path, and select."""
    text, source = _read_suite_text(spec)
    return parse_suite(text, source=source, quick=quick, ops=ops, lanes=lanes)
