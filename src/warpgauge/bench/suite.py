"""Benchmark suites: which (operator, dtype, shape) groups to measure, in which lanes, and how.

A suite is a TOML file (the packaged ones live in ``warpgauge/suites/``; ``default.toml`` documents
every key). ``load_suite`` resolves it into a frozen :class:`Suite`, optionally narrowed to the
``quick`` shapes, some operators, some lanes, some shapes (a glob filter) or some providers.
``Suite.to_config()`` is what ``run.json`` stores and ``Suite.from_config`` rebuilds the same suite
from it, so ``--resume`` needs no TOML file.

A suite names its measuring mode (``mode = "fwd"``, the default; ``fwd_bwd``, ``host``,
``accuracy``, ``plans``: ``bench/modes/``) and may take every registered operator's shapes from
a named set in the operator registry (``shape_set = "default"``), so a new operator joins the
suites by declaring its shapes in its own module. ``[ops.<op>]`` tables override or add.

Nothing here imports torch: dtypes are names ("float16", "bfloat16", "float32").
"""

from __future__ import annotations

import dataclasses
import hashlib
import zlib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from .suite_shapes import SuiteError, expand_grid, matches, parse_shape

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

LANES = ("cold", "warm")
DTYPES = ("float16", "bfloat16", "float32")
COMPILE_MODES = ("default", "max-autotune", "max-autotune-no-cudagraphs", "reduce-overhead")

MODES = ("fwd", "fwd_bwd", "host", "accuracy", "plans")
# The packaged suite each mode runs when no --suite is given.
MODE_SUITES = {"fwd": "default", "fwd_bwd": "training", "host": "host", "accuracy": "accuracy",
               "plans": "plans"}  # fmt: skip
_TOP_KEYS = {
    "name", "description", "seed", "lanes", "dtypes", "max_minutes", "mode", "shape_set",
    "sampling", "compile", "ceilings", "quick", "ops",
}  # fmt: skip


def __getattr__(name: str):
    """``OPS`` and ``SHAPE_KINDS``: derived from the operator registry on first use."""
    if name in ("OPS", "SHAPE_KINDS"):
        from .operators import operators

        ops = operators()
        return tuple(ops) if name == "OPS" else {k: o.shape_kind for k, o in ops.items()}
    raise AttributeError(name)


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
    host_calls: int = 200  # host mode: back-to-back eager calls per host-time sample
    # The stopping rule and the fault limit (bench/timing.py StopRule; bench/errors.py time_limit)
    max_rse: float = 0.01  # stop once the median's relative standard error is at most this
    max_rounds: int = 16
    batch_ms: float = 2.0  # device time one provider's batch aims at within a round
    provider_timeout_s: float = 300.0  # one provider's build+gate, capture, or batch; 0: none
    stuck_grace_s: float = 30.0  # past the limit, how long a call blocked in the driver may take

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
    mode: str = "fwd"
    shape_set: str = ""
    shape_filter: tuple[str, ...] = ()  # globs the groups were selected with (recorded only)
    providers_only: tuple[str, ...] = ()  # provider names ("name" or "op.name") to keep
    providers_skip: tuple[str, ...] = ()  # provider names to leave out
    plugins: tuple[str, ...] = ()  # "package.module:function" provider plug-ins
    source_sha256: str = ""  # of the suite's TOML text: validate re-resolves a packaged suite
    selection: dict = field(default_factory=dict)  # the group filters applied: {ops, lanes, quick}

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
            "mode": self.mode,
            "shape_set": self.shape_set,
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
            "source_sha256": self.source_sha256,
            # group filters (validate re-resolves a packaged suite with them); a shape filter
            # makes that check a subset check
            "selection": {
                **dict(self.selection),
                **({"shapes": list(self.shape_filter)} if self.shape_filter else {}),
            },
            # provider filters and plug-ins (they change the providers, never the cases)
            "providers": {
                "only": list(self.providers_only),
                "skip": list(self.providers_skip),
                "plugins": list(self.plugins),
            },
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
            sel = dict(cfg.get("selection", {}))
            provs = cfg.get("providers", {})
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
                mode=cfg.get("mode", "fwd"),
                shape_set=cfg.get("shape_set", ""),
                shape_filter=tuple(sel.pop("shapes", ())),
                providers_only=tuple(provs.get("only", ())),
                providers_skip=tuple(provs.get("skip", ())),
                plugins=tuple(provs.get("plugins", ())),
                source_sha256=cfg.get("source_sha256", ""),
                selection=sel,
            )
        except (KeyError, TypeError) as e:
            raise SuiteError(f"run.json config cannot be read back as a suite: {e!r}") from e

    def with_overrides(self, *, max_minutes=None, precompile_workers=None, mode=None, only=None,
                       skip=None, plugins=None) -> Suite:  # fmt: skip
        out = self
        if max_minutes is not None:
            out = dataclasses.replace(out, max_minutes=float(max_minutes))
        if precompile_workers is not None:
            comp = dataclasses.replace(out.compile, precompile_workers=int(precompile_workers))
            out = dataclasses.replace(out, compile=comp.check())
        if mode is not None:
            if mode not in MODES:
                raise SuiteError(f"--mode: unknown mode {mode!r}; known: {', '.join(MODES)}")
            out = dataclasses.replace(out, mode=mode)
        if only:
            out = dataclasses.replace(out, providers_only=tuple(only))
        if skip:
            out = dataclasses.replace(out, providers_skip=tuple(skip))
        if plugins:
            out = dataclasses.replace(out, plugins=tuple(dict.fromkeys((*out.plugins, *plugins))))
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
    shapes: list[str] | None = None,
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
        from .suite_load import resolve

        suite = resolve(doc, source, quick, ops, lanes, shapes)
    except SuiteError as e:
        raise SuiteError(f"{source}: {e}") from None
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    selection = {"ops": list(ops) if ops else None, "lanes": list(lanes) if lanes else None,
                 "quick": quick}  # fmt: skip
    return dataclasses.replace(suite, source_sha256=digest, selection=selection)


def load_suite(
    spec: str = "default",
    *,
    quick: bool = False,
    ops: list[str] | None = None,
    lanes: list[str] | None = None,
    shapes: list[str] | None = None,
) -> Suite:
    """Load a packaged suite by name (``default``) or a TOML file by path, and select."""
    text, source = _read_suite_text(spec)
    return parse_suite(text, source=source, quick=quick, ops=ops, lanes=lanes, shapes=shapes)


__all__ = [
    "COMPILE_MODES", "DTYPES", "LANES", "MODES", "MODE_SUITES", "CeilingSettings",
    "CompileSettings", "Group", "Sampling", "Suite", "SuiteError", "expand_grid", "load_suite",
    "matches", "packaged_suites", "parse_shape", "parse_suite", "split_case_id",
]  # fmt: skip
