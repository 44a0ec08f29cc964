"""Modes of ``warpgauge bench``: the same engine, different work per sample.

``fwd`` (one forward call), ``fwd_bwd`` (a training step through autograd), ``host`` (host
microseconds per eager call), ``accuracy`` (error against FP64, forward and gradients; the
tolerance probe) and ``plans`` (every candidate row plan of every cell; regret scores). A mode is
a function from the operator registry to the :class:`~warpgauge.bench.operators.OpSpec` table the
runner measures (``specs_for``), plus, for ``host``, the sampler the runner calls
(``sampler_for``). Every mode writes the same validated artifacts; ``config.mode`` names it.
"""

from __future__ import annotations

import importlib

from ..suite import MODES, SuiteError

__all__ = ["MODES", "filter_providers", "sampler_for", "specs_for"]


def _module(mode: str):
    if mode not in MODES:
        raise SuiteError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")
    return importlib.import_module(f"{__name__}.{mode}")


def _wanted(p, op: str, names) -> bool:
    """``names`` holds provider names or globs, bare or as ``op.name`` (``plans.looped_*``)."""
    import fnmatch

    keys = (p.name, f"{op}.{p.name}")
    return any(fnmatch.fnmatchcase(k, n.replace(":", ".")) for n in names for k in keys)


def filter_providers(specs: dict, only=(), skip=()) -> dict:
    """Keep the providers named in ``only`` (all when empty) and drop those in ``skip``; names are
    ``provider`` or ``op.provider``, or globs of either (``'*_grad'``, ``'softmax.split_*'``).
    Raises SuiteError when a name matches nothing."""
    import dataclasses

    for names, flag in ((only, "--only"), (skip, "--skip")):
        bad = [n for n in names
               if not any(_wanted(p, o, [n]) for o, s in specs.items() for p in s.providers)]  # fmt: skip
        if bad:
            known = sorted({p.name for s in specs.values() for p in s.providers})
            raise SuiteError(f"{flag}: no provider named {bad}; known: {', '.join(known)}")
    out = {}
    for op, s in specs.items():
        provs = tuple(
            p for p in s.providers
            if (not only or _wanted(p, op, only)) and not _wanted(p, op, skip)
        )  # fmt: skip
        if provs:
            out[op] = dataclasses.replace(s, providers=provs)
    return out


def specs_for(suite, *, sm_count: int | None = None, device=None) -> dict:
    """The OpSpec table ``suite`` is measured with: its mode applied to the registered operators
    of the suite (after loading its provider plug-ins), then its --only / --skip selection."""
    from .. import plugins
    from ..operators import operators

    plugins.load(suite.plugins)
    ops = {k: v for k, v in operators().items() if k in suite.ops}
    if suite.mode == "plans" and sm_count is None:
        import torch

        from warpgauge._device import device_info

        sm_count = device_info(torch.device(device or "cuda")).sm_count
    specs = _module(suite.mode).specs(ops, suite, sm_count=sm_count)
    missing = [op for op in suite.ops if op not in specs]
    if missing:
        raise SuiteError(
            f"mode {suite.mode}: operator(s) {missing} have no {suite.mode} form "
            f"(it covers {', '.join(specs) or 'none'}); drop them with --ops"
        )
    return filter_providers(specs, suite.providers_only, suite.providers_skip)


def sampler_for(suite, clock):
    """The sampling function the runner calls for one lane (``timing.sample_rounds`` except in
    host mode: then 3 x ``sampling.rounds`` host-loop samples per provider)."""
    from .. import timing

    if suite.mode == "host":
        from .host import HostSampler

        return HostSampler(clock, suite.sampling.host_calls, 3 * suite.sampling.rounds)
    return timing.sample_rounds


def job_config(suite, group) -> dict:
    """A suite config narrowed to one group: what a precompile worker needs to build the same
    providers as the measuring process (mode, compile modes, plug-ins, selection)."""
    import dataclasses

    return dataclasses.replace(suite, groups=(group,)).to_config()


def specs_for_config(cfg: dict, device=None) -> dict:
    """``specs_for`` of the suite recorded in ``cfg`` (a run's or a job's config)."""
    from ..suite import Suite

    return specs_for(Suite.from_config(cfg), device=device)
