"""The operator registry's building blocks: how one operator is declared once.

An :class:`Operator` holds everything the harness knows about one operator: how its seeded inputs
are made, its FP64 references, its analytical work model, the shapes of its outputs, its
settings (with defaults), the shape kind its suite entries are written in, named suite shape
sets, the gradient reference its training step is gated against, and the providers that compute
it. Providers are registered with the :meth:`Operator.provider` decorator; exactly one is the
baseline. :meth:`Operator.spec` turns the declaration into the :class:`OpSpec` the runner
measures (forward mode); the modes in ``bench/modes/`` derive their own specs from the same
declaration.

Nothing here imports torch at import time: suite parsing reads the registry without it.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FAMILIES = ("warpgauge", "pytorch", "compile", "peer")
COMPILE_PROVIDERS = {
    "default": ("compile", "torch.compile"),
    "max-autotune": ("compile_max_autotune", "torch.compile max-autotune"),
    "max-autotune-no-cudagraphs": (
        "compile_max_autotune_no_cudagraphs",
        "torch.compile max-autotune-no-cudagraphs",
    ),
    "reduce-overhead": ("compile_reduce_overhead", "torch.compile reduce-overhead"),
}
SHAPE_KINDS = ("numel", "rows", "mnk", "int4")


def dtype_by_name(name: str):
    import torch

    table = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
    if name not in table:
        raise ValueError(f"dtype {name!r} is not one of {sorted(table)}")
    return table[name]


@dataclass(frozen=True)
class BuildContext:
    op: str
    dtype: Any  # torch.dtype
    shape: Mapping[str, int]
    settings: Mapping[str, Any]
    device: Any  # torch.device

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).replace("torch.", "")


@dataclass
class Built:
    """A provider's closure plus what the harness needs to know about it."""

    fn: Callable[[], Any]
    out_buffers: tuple = ()  # tensors the closure writes into (poisoned before the gate call)
    notes: dict = field(default_factory=dict)  # recorded in the provider's ``extra``


def _always(ctx: BuildContext) -> str | None:
    return None


@dataclass(frozen=True)
class Provider:
    name: str
    label: str
    family: str
    build: Callable[[dict, BuildContext], Built]
    baseline: bool = False
    available: Callable[[BuildContext], str | None] = _always
    reference: str = "default"
    graph_safe: bool = True  # False: never captured into our CUDA graph (timed per call)
    precompile: bool = False  # warm the compile caches in a worker process first
    compile_mode: str | None = None
    description: str = ""
    # Training step (fwd_bwd / accuracy modes): None = ``build`` works under autograd as is;
    # False = this provider has no differentiable form (absent in those modes, with the reason in
    # ``train_reason``); a callable = the build to use instead (for example without ``out=``).
    train: Callable[[dict, BuildContext], Built] | bool | None = None
    train_reason: str = ""
    plugin: str | None = None  # "package.module:function" of a plug-in provider


@dataclass(frozen=True)
class OpSpec:
    name: str
    make_inputs: Callable[[BuildContext, Any], dict]
    references: Mapping[str, Callable[[dict, BuildContext], tuple]]
    work: Callable[[BuildContext], tuple[int, int, str]]  # (bytes, flops, model name)
    out_specs: Callable[[BuildContext], list[tuple[tuple[int, ...], Any]]]
    providers: tuple[Provider, ...]
    # Gate with reference.compare(relative=True): for outputs whose small values matter as much as
    # the peak (probabilities), so that a provider zeroing small entries fails.
    relative_check: bool = False
    precompile_weight: float = 1.0  # relative compile cost of a group (slow ones start first)
    mode: str = "fwd"

    def provider(self, name: str) -> Provider:
        for p in self.providers:
            if p.name == name:
                return p
        raise KeyError(f"{self.name} has no provider {name!r}")


@dataclass(frozen=True)
class GradSpec:
    """What a training step of the operator differentiates, and its FP64 gradient.

    ``inputs``: names of the inputs that take a gradient (leaves with ``requires_grad``).
    ``reference(inputs, grad_outputs, ctx, reference_key)``: FP64 gradients (one per name in
    ``inputs``, cast once to the input's dtype) of the operator's contract.
    ``work(ctx)``: (bytes, flops, model name) of one forward + backward step.
    ``shapes(ctx)``: (shape, dtype) of each gradient, in ``inputs`` order.
    """

    inputs: tuple[str, ...]
    reference: Callable[..., tuple]
    work: Callable[[BuildContext], tuple[int, int, str]]
    shapes: Callable[[BuildContext], list]
    grad_scale: float = 1.0


# ------------------------------------------------------------------------------------ helpers


def randn(ctx: BuildContext, g, *shape, scale: float = 1.0):
    import torch

    t = torch.randn(*shape, generator=g, device=ctx.device, dtype=torch.float32)
    if scale != 1.0:
        t.mul_(scale)
    return t.to(ctx.dtype)


def kernel_work(module: str, *args) -> tuple[int, int, str]:
    mod = importlib.import_module(f"warpgauge.kernels.{module}")
    w = mod.work(*args)
    return int(w.bytes), int(w.flops), f"warpgauge.kernels.{module}.work"


def wg():
    import warpgauge

    return warpgauge


def wg_has(fn_name: str) -> Callable[[BuildContext], str | None]:
    def check(ctx: BuildContext) -> str | None:
        try:
            mod = wg()
        except Exception as e:  # pragma: no cover - the package itself failed to import
            return f"import warpgauge failed: {type(e).__name__}: {e}"
        if not hasattr(mod, fn_name):
            return f"warpgauge.{fn_name} is not in this build of warpgauge"
        return None

    return check


def module_available(module: str, pip_name: str) -> Callable[[BuildContext], str | None]:
    def check(ctx: BuildContext) -> str | None:
        if ctx.device.type != "cuda":
            return f"{pip_name} needs a CUDA device"
        try:
            if importlib.util.find_spec(module) is None:
                return f"{pip_name} is not installed (pip install {pip_name})"
        except (ImportError, ValueError) as e:
            return f"{pip_name} cannot be located: {e}"
        return None

    return check


def peer_import(module: str):
    """Import a peer's module; an import failure is reported as the provider's error."""
    return importlib.import_module(module)


def compile_available(ctx: BuildContext) -> str | None:
    if ctx.device.type != "cuda":
        return "torch.compile lanes are measured on a CUDA device only"
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed (Inductor's GPU backend needs it)"
    return None


def _compile(fn: Callable, mode: str) -> Callable:
    import torch

    kwargs: dict[str, Any] = {"fullgraph": True, "dynamic": False}
    if mode != "default":
        kwargs["mode"] = mode
    return torch.compile(fn, **kwargs)


def compile_providers(target: Callable[[dict, BuildContext], tuple[Callable, tuple]], modes,
                      reference: str = "default") -> tuple[Provider, ...]:  # fmt: skip
    """One provider per torch.compile mode, each compiling the same eager contract.

    ``target(inputs, ctx)`` returns (function to compile, its arguments). Shapes are static
    (``dynamic=False``): each shape gets the kernel a user compiling for that shape would get.
    The ``max-autotune`` mode wraps its result in Inductor's own CUDA graphs, which cannot be
    nested inside ours, so that lane is timed per call (``graph_safe=False``).
    """
    out = []
    for mode in modes:
        name, label = COMPILE_PROVIDERS[mode]

        def build(inputs, ctx, _mode=mode):
            fn, args = target(inputs, ctx)
            compiled = _compile(fn, _mode)
            return Built(lambda: compiled(*args), notes={"compile_mode": _mode})

        out.append(
            Provider(
                name=name,
                label=label,
                family="compile",
                build=build,
                available=compile_available,
                reference=reference,
                graph_safe=mode not in ("max-autotune", "reduce-overhead"),
                precompile=True,
                compile_mode=mode,
                description=f"torch.compile(mode={mode!r}, fullgraph=True, dynamic=False) of the eager contract",
            )
        )
    return tuple(out)


# ------------------------------------------------------------------------------------ operator


class Operator:
    """One operator, declared once (see the module docstring).

    ``shapes``: named suite shape sets, e.g. ``{"default": [...], "quick": [...]}``; a suite file
    that names a set (``shape_set = "default"``) gets every registered operator's shapes from it.
    ``settings``: the operator's suite settings and their defaults (``{"eps": 1e-6}``).
    ``sample``: a small shape (in the suite's written form) for ``warpgauge providers``;
    ``test_shape``: one small enough for the CPU tests under the Triton interpreter.
    ``plan_call(inputs, ctx, plan)``: a closure running the operator with a forced row plan
    (row operators only; the ``plans`` mode).
    """

    def __init__(
        self,
        name: str,
        *,
        order: int,
        shape_kind: str,
        make_inputs: Callable,
        references: Mapping[str, Callable],
        work: Callable,
        out_specs: Callable,
        sample: str,
        test_shape: str | None = None,
        shapes: Mapping[str, Sequence[str]] | None = None,
        settings: Mapping[str, Any] | None = None,
        dtypes: Sequence[str] | None = None,
        relative_check: bool = False,
        precompile_weight: float = 1.0,
        grad: GradSpec | None = None,
        plan_call: Callable | None = None,
        compile_target: Callable | None = None,
        compile_reference: str = "default",
        description: str = "",
    ):
        if shape_kind not in SHAPE_KINDS:
            raise ValueError(f"operator {name}: shape_kind must be one of {SHAPE_KINDS}")
        self.name = name
        self.order = order
        self.shape_kind = shape_kind
        self.make_inputs = make_inputs
        self.references = dict(references)
        self.work = work
        self.out_specs = out_specs
        self.sample = sample
        self.test_shape = test_shape or sample  # small enough for the CPU interpreter's tests
        self.shapes = {k: (v if callable(v) else list(v)) for k, v in (shapes or {}).items()}
        self.settings = dict(settings or {})
        self.dtypes = tuple(dtypes) if dtypes else None
        self.relative_check = relative_check
        self.precompile_weight = float(precompile_weight)
        self.grad = grad
        self.plan_call = plan_call
        self.compile_target = compile_target
        self.compile_reference = compile_reference
        self.description = description
        # (position, Provider); compile lanes are inserted at the position of compile_lanes()
        self._entries: list[Provider | str] = []

    # -------------------------------------------------------------------------------- providers

    def provider(
        self,
        name: str,
        label: str,
        family: str,
        *,
        baseline: bool = False,
        available: Callable[[BuildContext], str | None] | None = None,
        reference: str = "default",
        graph_safe: bool = True,
        precompile: bool = False,
        description: str = "",
        train: Callable | bool | None = None,
        train_reason: str = "",
        plugin: str | None = None,
    ) -> Callable:
        """Decorator: register ``build(inputs, ctx) -> Built`` as a provider of this operator."""
        if family not in FAMILIES:
            raise ValueError(
                f"{self.name}.{name}: family must be one of {FAMILIES}, got {family!r}"
            )
        if reference not in self.references:
            raise ValueError(
                f"{self.name}.{name}: reference {reference!r} is not one of {sorted(self.references)}"
            )

        def deco(build: Callable) -> Callable:
            if any(isinstance(e, Provider) and e.name == name for e in self._entries):
                raise ValueError(f"{self.name} already has a provider named {name!r}")
            if baseline and any(isinstance(e, Provider) and e.baseline for e in self._entries):
                raise ValueError(f"{self.name}: {name!r} cannot be a second baseline")
            self._entries.append(
                Provider(
                    name=name, label=label, family=family, build=build, baseline=baseline,
                    available=available or _always, reference=reference, graph_safe=graph_safe,
                    precompile=precompile, description=description, train=train,
                    train_reason=train_reason, plugin=plugin,
                )
            )  # fmt: skip
            return build

        return deco

    def compile_lanes(self) -> None:
        """Place the torch.compile providers (one per suite compile mode) here in the order."""
        if self.compile_target is None:
            raise ValueError(f"{self.name}: compile_lanes() needs compile_target")
        self._entries.append("compile")

    def remove_plugins(self) -> None:
        self._entries = [e for e in self._entries if isinstance(e, str) or e.plugin is None]

    def providers(self, compile_modes: Sequence[str]) -> tuple[Provider, ...]:
        out: list[Provider] = []
        for e in self._entries:
            if isinstance(e, str):
                out += compile_providers(self.compile_target, compile_modes, self.compile_reference)
            else:
                out.append(e)
        return tuple(out)

    def spec(self, compile_modes: Sequence[str]) -> OpSpec:
        provs = self.providers(compile_modes)
        if sum(p.baseline for p in provs) != 1:
            raise ValueError(f"{self.name}: exactly one provider must be the baseline")
        return OpSpec(
            name=self.name,
            make_inputs=self.make_inputs,
            references=self.references,
            work=self.work,
            out_specs=self.out_specs,
            providers=provs,
            relative_check=self.relative_check,
            precompile_weight=self.precompile_weight,
        )
