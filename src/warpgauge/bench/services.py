"""What the runner touches outside Python, injected: device backend, clock, NVML clocks, operator
registry, artifact writer, telemetry, ceilings, precompile, UI. Tests build :class:`Services` from
fakes; ``default_services`` builds the only configuration that produces numbers (a CUDA device)."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import clocks, timing
from .suite import Suite


class QuietUI:
    """A UI that prints nothing (tests) but remembers what it was told."""

    def __init__(self):
        self.lines: list[str] = []
        self.done: list[str] = []

    def info(self, msg: str) -> None:
        self.lines.append(msg)

    def start(self, total: int, description: str) -> None:
        self.lines.append(f"start {total} {description}")

    def case_done(self, case_id: str, row: dict) -> None:
        self.done.append(case_id)

    def stop(self) -> None:
        pass

    def summary(self, rows: list[dict], copy_tbps: float | None) -> None:
        self.lines.append(f"summary {len(rows)}")


@dataclass
class Services:
    backend: timing.Backend
    clock: timing.Clock
    ops: dict  # op name -> providers.OpSpec
    artifacts: Any  # warpgauge.artifacts (or a stand-in with the same functions)
    provenance: Callable[[], dict]
    telemetry: Callable[[], dict]
    measure_ceilings: Callable[[timing.Backend, Suite], dict] | None = None
    precompile: Callable[..., dict] | None = None
    reset_compiler: Callable[[], None] = lambda: None
    ui: Any = field(default_factory=QuietUI)
    make_generator: Callable[[Any, int], Any] | None = None
    # Context held while graphs are captured and samples taken (real: torch.compile may not
    # recompile in there; a recompile raises and the provider is recorded as an error).
    sampling_guard: Callable[[], Any] = contextlib.nullcontext
    clocks: Any = field(default_factory=clocks.NoClocks)  # NVML reader (clocks.NvmlClocks)
    # Ends the process after a provider hung inside the driver (recorded first; --resume skips it)
    exit_process: Callable[[int], None] = os._exit
    stuck_grace_s: float = 30.0
    # How one lane is sampled: the mode's (timing.sample_rounds except in host mode).
    sampler: Callable[..., list] = timing.sample_rounds


def default_services(suite: Suite, device_index: int = 0, ui=None) -> Services:
    """The real services: CUDA backend, NVML telemetry, the operator registry. Raises
    RuntimeError without a CUDA device."""
    import torch

    from warpgauge import artifacts, environment

    from . import ceilings, modes, precompile

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device is visible")

    def reset_compiler():
        torch._dynamo.reset()

    def sampling_guard():
        set_stance = getattr(torch.compiler, "set_stance", None)
        return set_stance("fail_on_recompile") if set_stance else contextlib.nullcontext()

    def measure(backend, s: Suite):
        dtypes = sorted({g.dtype for g in s.groups})
        return ceilings.measure_ceilings(
            backend, dtypes, s.ceilings.copy_bytes, s.ceilings.mm_sizes
        )

    return Services(
        backend=timing.CudaBackend(device_index),
        clock=timing.MonotonicClock(),
        ops=modes.specs_for(suite, device=torch.device("cuda", device_index)),
        artifacts=artifacts,
        provenance=lambda: environment.provenance(device_index=device_index),
        telemetry=lambda: environment.telemetry_snapshot(device_index),
        measure_ceilings=measure,
        precompile=functools.partial(precompile.run_precompile, device_index=device_index),
        reset_compiler=reset_compiler,
        ui=ui or QuietUI(),
        sampling_guard=sampling_guard,
        clocks=clocks.NvmlClocks(device_index),
        sampler=modes.sampler_for(suite, timing.MonotonicClock()),
        stuck_grace_s=suite.sampling.stuck_grace_s,
    )
