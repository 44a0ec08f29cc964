"""Switch a Hugging Face Llama-family model to warpgauge's kernels, in place.

    from warpgauge.integrations.transformers import apply_warpgauge
    model = apply_warpgauge(model)                 # RMSNorms + fused residual add + RMSNorm
    model = apply_warpgauge(model, int4=True)      # ... and INT4 weight-only linears (decode)

What it changes (``transformers`` itself is never imported here; modules are recognised by class
name and attributes, so any version with the Llama layout works):

- ``rms_norm=True``: every ``LlamaRMSNorm``-style module (Llama, Mistral, Qwen2, Qwen3 norms:
  ``weight`` and ``variance_epsilon``, ``y = weight * norm(x)``) becomes a
  :class:`warpgauge.nn.RMSNorm` sharing the same ``weight`` parameter, and every decoder layer of
  the pre-norm layout (``input_layernorm``, ``self_attn``, ``post_attention_layernorm``, ``mlp``)
  gets a forward that fuses ``residual + attention_output`` with ``post_attention_layernorm``
  into one ``add_rms_norm`` call. The state dict keeps its keys.
- ``int4=True``: every ``nn.Linear`` inside the decoder layers (attention and MLP projections;
  never ``lm_head`` or embeddings) becomes an :class:`warpgauge.nn.Int4Linear` (symmetric INT4,
  ``group_size`` values per scale). Linears whose ``in_features`` is not a multiple of
  ``group_size`` are left alone. The weights are quantized: logits change by the quantization
  error, which is the point of weight-only INT4.

Numerics: warpgauge's RMSNorm multiplies by the weight in FP32 and rounds once, where HF rounds
the normalized value to the model dtype first and then multiplies (two roundings), so patched
BF16 logits are at least as close to an FP64 model as the unpatched ones (tests check this).
"""

from __future__ import annotations

import inspect
import types

import torch
from torch import nn

from ..nn import Int4Linear, RMSNorm

__all__ = ["apply_warpgauge", "NORM_CLASSES", "LAYER_CLASSES"]

# Norms with the LlamaRMSNorm contract: y = weight * dtype(x * rsqrt(mean(x^2) + eps)).
# (Gemma's norm multiplies by 1 + weight: not this contract, left alone.)
NORM_CLASSES = frozenset(
    {"LlamaRMSNorm", "MistralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MixtralRMSNorm"}
)
# Decoder layers whose forward is the plain pre-norm block (attention, residual add,
# post-attention norm, MLP, residual add): the add + norm pair can be fused.
LAYER_CLASSES = frozenset(
    {"LlamaDecoderLayer", "MistralDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer"}
)


def apply_warpgauge(
    model: nn.Module,
    rms_norm: bool = True,
    int4: bool = False,
    group_size: int = 128,
    fuse_residual: bool = True,
) -> nn.Module:
    """Patch ``model`` in place (see the module docstring) and return it.

    ``fuse_residual`` (with ``rms_norm``) also replaces the decoder layers' forward to fuse the
    residual add with the post-attention norm. Records what it did in
    ``model.warpgauge_patched`` (a dict of counts)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    done = {"rms_norm": 0, "fused_layers": 0, "int4_linear": 0, "int4_skipped": 0}
    if rms_norm:
        done["rms_norm"] = _replace_norms(model)
        if fuse_residual:
            for layer in model.modules():
                if _patch_layer(layer):
                    done["fused_layers"] += 1
    if int4:
        for layer in model.modules():
            if type(layer).__name__ in LAYER_CLASSES or _is_prenorm_layer(layer):
                n, skipped = _quantize_linears(layer, group_size)
                done["int4_linear"] += n
                done["int4_skipped"] += skipped
    prev = getattr(model, "warpgauge_patched", {})
    model.warpgauge_patched = {k: prev.get(k, 0) + v for k, v in done.items()}
    return model


def _is_norm(m: nn.Module) -> bool:
    return (
        type(m).__name__ in NORM_CLASSES
        and isinstance(getattr(m, "weight", None), nn.Parameter)
        and m.weight.dim() == 1
        and hasattr(m, "variance_epsilon")
    )


def _replace_norms(model: nn.Module) -> int:
    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if _is_norm(child):
                new = RMSNorm(child.weight.shape[0], eps=float(child.variance_epsilon))
                new.weight = child.weight  # the same Parameter: tying and state dict keys stay
                setattr(parent, name, new)
                count += 1
    return count


def _is_prenorm_layer(m: nn.Module) -> bool:
    return all(
        hasattr(m, a) for a in ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")
    )


def _patch_layer(layer: nn.Module) -> bool:
    if type(layer).__name__ not in LAYER_CLASSES or not _is_prenorm_layer(layer):
        return False
    if getattr(layer, "_warpgauge_original_forward", None) is not None:
        return False  # already patched
    if not isinstance(layer.post_attention_layernorm, RMSNorm):
        return False
    original = layer.forward
    sig = inspect.signature(original)
    ann = sig.return_annotation
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = tuple(n for n, p in sig.parameters.items() if p.kind in positional)
    if not names or names[0] != "hidden_states":
        return False  # not the layout this forward mirrors
    layer._warpgauge_original_forward = original
    layer._warpgauge_arg_names = names
    layer._warpgauge_returns_tuple = "tuple" in (ann if isinstance(ann, str) else repr(ann)).lower()
    layer.forward = types.MethodType(_fused_forward, layer)
    return True


def _fused_forward(self, *args, **kwargs):
    """The pre-norm decoder block with ``residual + attn`` and the post-attention RMSNorm fused.

    Every argument but ``hidden_states`` is passed to ``self_attn`` unchanged (by name), so the
    attention mask, positions, cache and rotary embeddings work exactly as in the original.
    (Plain dict and zip work only, so torch.compile traces it without graph breaks.)"""
    if len(args) > len(self._warpgauge_arg_names):
        raise TypeError("too many positional arguments for the decoder layer")
    call = dict(zip(self._warpgauge_arg_names, args))
    call.update(kwargs)
    hidden_states = call.pop("hidden_states")
    residual = hidden_states
    attn = self.self_attn(hidden_states=self.input_layernorm(hidden_states), **call)
    attn_out = attn[0] if isinstance(attn, tuple) else attn
    # h = residual + attn_out (rounded once), y = RMSNorm(h): one kernel
    normed, h = self.post_attention_layernorm(attn_out, residual)
    hidden_states = h + self.mlp(normed)
    if not self._warpgauge_returns_tuple:
        return hidden_states
    outputs = (hidden_states,)
    if call.get("output_attentions"):
        outputs += (attn[1] if isinstance(attn, tuple) and len(attn) > 1 else None,)
    return outputs


def _quantize_linears(layer: nn.Module, group_size: int) -> tuple[int, int]:
    n = skipped = 0
    for parent in list(layer.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                if child.in_features % group_size or child.weight.dtype not in (
                    torch.float16,
                    torch.bfloat16,
                    torch.float32,
                ):
                    skipped += 1
                    continue
                setattr(parent, name, Int4Linear.from_linear(child, group_size))
                n += 1
    return n, skipped
