"""``--mode host``: host microseconds per eager call, every provider interleaved.

The forward specs, sampled as in ``fwd`` for device time (graph replay), then, in the same
lane, ``host_rounds`` rounds in rotating order of a host-bound loop per provider: after a full
synchronization, ``sampling.host_calls`` back-to-back eager calls timed on the host clock from
the first call to the return of the last; one sample is that time divided by the calls. The GPU
finishes the queue afterwards (a sample whose queue outlasted the loop by more than 1.5x is
counted in ``device_bound``: the device, not the host, may have set the pace). Garbage
collection is off while sampling. The per-call host time lands in each provider's
``host_time`` (``host_time.median_us`` is the claim); the host suite sets ``host_share = 0`` so
that the per-call event samples of the fwd mode do not mix in.

Every provider that trains also appears as ``<name>_grad``: the same forward call with the
differentiable inputs requiring grad, so autograd records the call (warpgauge routes it through
``torch.ops.warpgauge.*``): the host cost of the autograd path beside PyTorch's own.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Sequence

from .. import timing
from ..operators import Built, Operator, OpSpec, Provider
from . import fwd


def specs(operators: dict[str, Operator], suite, **kw) -> dict[str, OpSpec]:
    return {k: _host_spec(operators[k], v) for k, v in fwd.specs(operators, suite, **kw).items()}


def grad_provider(op: Operator, p: Provider) -> Provider:
    """``p`` called with its differentiable inputs requiring grad (forward only)."""
    build = p.train if callable(p.train) else p.build
    names = op.grad.inputs

    def build_grad(inputs, ctx):
        leaves = dict(inputs)
        for n in names:
            leaves[n] = inputs[n].detach().requires_grad_()
        built = build(leaves, ctx)
        notes = {**built.notes, "requires_grad": list(names),
                 "excluded_from_best": "the same forward with inputs requiring grad: compared "
                 "for its host cost, not as a PyTorch option of its own"}  # fmt: skip
        return Built(built.fn, notes=notes)

    return dataclasses.replace(p, name=f"{p.name}_grad", label=f"{p.label}, inputs require grad",
                               build=build_grad, baseline=False)  # fmt: skip


def _host_spec(op: Operator, spec: OpSpec) -> OpSpec:
    provs = list(spec.providers)
    if op.grad is not None:
        provs += [grad_provider(op, p) for p in spec.providers if p.train is not False]
    return dataclasses.replace(spec, providers=tuple(provs), mode="host")


def host_loop(backend, clock, fn: Callable, calls: int) -> tuple[float, float]:
    """(host us per call, wall us per call until the device is idle) of ``calls`` calls."""
    backend.sync()
    t0 = clock.now()
    for _ in range(calls):
        fn()
    t1 = clock.now()
    backend.sync()
    t2 = clock.now()
    return (t1 - t0) * 1e6 / calls, (t2 - t0) * 1e6 / calls


class HostSampler:
    """The runner's sampler in host mode: ``timing.sample_rounds`` for the device samples, then
    the host-bound loops (module docstring), in a seeded balanced order (``timing.round_orders``)
    with the runner's per-provider guard around each loop. Same signature as ``sample_rounds``."""

    def __init__(self, clock, calls: int, rounds: int = 9):
        self.clock = clock
        self.calls = max(1, int(calls))
        self.rounds = max(1, int(rounds))
        self.device_bound: dict[str, int] = {}

    def __call__(self, backend, timed: Sequence[timing.Timed], lane: str, rule, *args, **kwargs):
        import contextlib

        out = timing.sample_rounds(backend, timed, lane, rule, *args, **kwargs)
        guard = kwargs.get("guard") or (lambda t: contextlib.nullcontext())
        names = [t.name for t in timed if t.error is None]
        by_name = {t.name: t for t in timed}
        for t in timed:
            t.host_samples = []
        for t in timed:
            if t.error is None:
                t.fn()  # one untimed call: caches primed after the device sampling
        enabled = gc.isenabled()
        gc.disable()
        try:
            for order in timing.round_orders(names, self.rounds, kwargs.get("seed", 0)):
                for name in order:
                    t = by_name[name]
                    if t.error is not None:
                        continue
                    try:
                        with guard(t):
                            host_us, wall_us = host_loop(backend, self.clock, t.fn, self.calls)
                    except Exception as e:
                        t.error = f"while sampling host time: {type(e).__name__}: {e}"
                        t.exception = e
                        t.host_samples = []
                        continue
                    t.host_samples.append(host_us)
                    if wall_us > 1.5 * host_us:
                        self.device_bound[name] = self.device_bound.get(name, 0) + 1
        finally:
            if enabled:
                gc.enable()
        return out
