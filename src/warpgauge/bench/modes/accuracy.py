"""``--mode accuracy``: error against FP64 of every provider, forward and gradients, and the
tolerance probe.

Each provider's closure is its training step (``fwd_bwd``) returning the forward outputs
followed by the gradients; the gate compares all of them with the FP64 references (the forward
reference, then the FP64 gradient of the contract) and records the worst. On the first call each
output's own error is written to the provider's ``extra.errors`` (max abs error, err/allowed
under the tolerance table, ok), so a case holds warpgauge's error beside PyTorch's own on the
same inputs. A provider that misses the tolerance is recorded ``failed_gate`` with its errors
(and not timed); the accuracy suite samples little, because the errors are the result.

The tolerance probe is the same mode over many random shapes (the registry's ``probe`` sets:
random row and token counts at a few widths and weight shapes, each compiling kernels once;
``suites/accuracy.toml``); ``warpgauge accuracy-report RUN`` gives the median, p90, p99 and
maximum err/allowed per operator and output.
"""

from __future__ import annotations

import dataclasses
import math

from ..operators import Operator, OpSpec
from . import fwd_bwd


def output_names(op: Operator, ctx) -> list[str]:
    n_out = len(op.out_specs(ctx))
    fwd = ["y", "h"] if op.name == "add_rms_norm" else [f"y{i}" if n_out > 1 else "y"
                                                        for i in range(n_out)]  # fmt: skip
    return fwd + [f"d{n}" for n in op.grad.inputs]


def errors(outs, refs, names) -> list[dict]:
    """Each output's error against its reference under the dtype's tolerance."""
    from warpgauge.reference import compare

    rows = []
    for name, o, r in zip(names, outs, refs):
        try:
            c = compare(o, r.to(o.dtype), o.dtype)
        except (TypeError, ValueError, RuntimeError) as e:
            rows.append({"output": name, "ok": False, "max_abs_err": None, "worst_ratio": None,
                         "error": str(e)[:200]})  # fmt: skip
            continue
        rows.append({
            "output": name,
            "ok": bool(c.ok),
            "max_abs_err": c.max_abs_err if math.isfinite(c.max_abs_err) else None,
            "worst_ratio": c.worst_ratio if math.isfinite(c.worst_ratio) else None,
        })  # fmt: skip
    return rows


def _refs_for(op: Operator, key: str):
    def ref(inputs, ctx):
        grads = op.grad.reference(inputs, inputs[fwd_bwd.GRAD_OUTPUTS], ctx, key)
        return tuple(op.references[key](inputs, ctx)) + tuple(grads)

    return ref


def _recorder(op: Operator):
    def on_first(result, notes, inputs, ctx):
        p_ref = notes.get("_reference", "default")
        refs = _refs_for(op, p_ref)(inputs, ctx)
        notes["errors"] = errors(result, refs, output_names(op, ctx))

    return on_first


def accuracy_spec(op: Operator, compile_modes) -> OpSpec | None:
    if op.grad is None:
        return None
    base = op.spec(compile_modes)
    provs = []
    for p in base.providers:
        tp = fwd_bwd.train_provider(op, p, with_outputs=True, on_first=_recorder(op))
        build = tp.build

        def with_reference(inputs, ctx, _build=build, _key=p.reference):
            built = _build(inputs, ctx)
            built.notes["_reference"] = _key
            return built

        provs.append(dataclasses.replace(tp, build=with_reference))
    return dataclasses.replace(
        base,
        make_inputs=fwd_bwd.train_inputs(op),
        references={k: _refs_for(op, k) for k in op.references},
        work=op.grad.work,
        out_specs=lambda ctx: list(op.out_specs(ctx)) + list(op.grad.shapes(ctx)),
        providers=tuple(provs),
        relative_check=False,
        mode="accuracy",
    )


def specs(operators: dict[str, Operator], suite, **_) -> dict[str, OpSpec]:
    out = {}
    for name, op in operators.items():
        spec = accuracy_spec(op, suite.compile.modes)
        if spec is not None:
            out[name] = spec
    return out
