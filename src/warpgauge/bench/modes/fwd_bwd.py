"""``--mode fwd_bwd``: one training step per sample, forward + backward through autograd.

For every operator that declares a :class:`~warpgauge.bench.operators.GradSpec`, each provider's
closure becomes ``step = lambda: torch.autograd.grad(f(*inputs), leaves, grad_outputs)``: the
inputs named by the GradSpec are leaves with ``requires_grad``, the output gradients are seeded
random tensors made with the inputs, and the step returns the gradients. The runner then does what
it does for any operator: poisons the allocator, gates the gradients against the FP64 gradient of
the operator's contract (``GradSpec.reference``, cast once to the dtype), captures the step in a
CUDA graph (several steps per graph in the warm lane) and samples it interleaved with the other
providers. A provider that has no differentiable form (``Provider.train = False``, e.g. tinygemm)
is recorded as absent, with the reason.

Work model: ``GradSpec.work`` (bytes and FLOPs of forward + backward, e.g. 6 M N K for gemm).
A gradient that is the output gradient's own storage (add's pass-through, row_sum's broadcast
view) is copied inside the step, for every provider alike, so that no result aliases an input.
"""

from __future__ import annotations

import dataclasses

from ..operators import Built, Operator, OpSpec, Provider

GRAD_OUTPUTS = "_grad_outputs"  # key of the output gradients in the inputs dict


def train_inputs(op: Operator):
    """``make_inputs`` of the training step: the forward inputs with leaves, plus the seeded
    output gradients."""

    def make(ctx, g):
        import torch

        inputs = op.make_inputs(ctx, g)
        for name in op.grad.inputs:
            inputs[name] = inputs[name].detach().requires_grad_()
        grads = []
        for shape, dtype in op.out_specs(ctx):
            t = torch.randn(*shape, generator=g, device=ctx.device, dtype=torch.float32)
            grads.append((t * op.grad.grad_scale).to(dtype))
        inputs[GRAD_OUTPUTS] = tuple(grads)
        return inputs

    return make


def grad_references(op: Operator) -> dict:
    def make(key):
        def ref(inputs, ctx):
            return tuple(op.grad.reference(inputs, inputs[GRAD_OUTPUTS], ctx, key))

        return ref

    return {key: make(key) for key in op.references}


def _not_trainable(reason: str):
    return lambda ctx: reason


def train_provider(op: Operator, p: Provider, with_outputs: bool = False,
                   on_first=None) -> Provider:  # fmt: skip
    """The provider's training-step version (see the module docstring). ``with_outputs``: the
    step returns the forward outputs (detached) before the gradients; ``on_first(result,
    notes, inputs, ctx)`` sees the first call's result (the accuracy mode records errors)."""
    if p.train is False:
        reason = p.train_reason or f"{p.label} has no backward"
        return dataclasses.replace(p, available=_not_trainable(reason))
    build = p.train if callable(p.train) else p.build
    names = op.grad.inputs

    def build_step(inputs, ctx):
        import torch

        built = build(inputs, ctx)
        if built.out_buffers:
            raise TypeError(
                f"{p.name}: writes into out= buffers, which autograd cannot differentiate; give "
                "the provider a train= build"
            )
        leaves = tuple(inputs[n] for n in names)
        grad_outputs = inputs[GRAD_OUTPUTS]
        fn = built.fn
        notes = {**built.notes, "step": "autograd.grad(f(*inputs))"}
        first = [on_first is not None]

        given = {t.untyped_storage().data_ptr() for t in grad_outputs}

        def step():
            outs = fn()
            outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
            grads = torch.autograd.grad(outs, leaves, grad_outputs[: len(outs)])
            # A pass-through backward (add) or a broadcast view (row_sum) returns the output
            # gradient's own storage; the step materializes it, as a model's next op would read
            # it, so that the result never aliases an input (the gate after timing checks that).
            grads = tuple(g.clone() if g.untyped_storage().data_ptr() in given else g
                          for g in grads)  # fmt: skip
            result = tuple(o.detach() for o in outs) + grads if with_outputs else grads
            if first[0]:
                first[0] = False
                on_first(result, notes, inputs, ctx)
            return result

        return Built(step, notes=notes)

    return dataclasses.replace(p, build=build_step, description=p.description or "")


def train_spec(op: Operator, compile_modes) -> OpSpec | None:
    if op.grad is None:
        return None
    base = op.spec(compile_modes)
    return dataclasses.replace(
        base,
        make_inputs=train_inputs(op),
        references=grad_references(op),
        work=op.grad.work,
        out_specs=op.grad.shapes,
        providers=tuple(train_provider(op, p) for p in base.providers),
        relative_check=False,  # gradients: atol relative to each gradient's peak
        mode="fwd_bwd",
    )


def specs(operators: dict[str, Operator], suite, **_) -> dict[str, OpSpec]:
    out = {}
    for name, op in operators.items():
        spec = train_spec(op, suite.compile.modes)
        if spec is not None:
            out[name] = spec
    return out
