"""apply_warpgauge on a tiny, randomly initialised Llama model built offline (no download).

Kernels run under the interpreter on the CPU. The reference is the unpatched model in FP64 with
the same weights; an FP32 model must match it to the FP32 row of the tolerance table, patched or
not. The GPU test (tests/gpu/test_transformers_gpu.py) repeats this at a real width in BF16."""

import copy

import pytest
import torch

from warpgauge.reference import assert_close

from .conftest import DEVICE

transformers = pytest.importorskip("transformers")

from warpgauge.integrations.transformers import apply_warpgauge  # noqa: E402
from warpgauge.nn import Int4Linear, RMSNorm  # noqa: E402

LAYERS = 2


def _model(dtype=torch.float32, hidden=64, inter=128):
    cfg = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rms_norm_eps=1e-5,
    )
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1:  # norm weights off 1.0, so using the wrong weight shows
                p.normal_(1.0, 0.2)
    return m.to(dtype).to(DEVICE)


def _ids(batch=2, length=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 128, (batch, length), generator=g).to(DEVICE)


@torch.no_grad()
def test_rms_norm_patch_matches_fp64_logits():
    m = _model()
    ids = _ids()
    ref = copy.deepcopy(m).double()(ids).logits
    patched = apply_warpgauge(copy.deepcopy(m))
    assert patched.warpgauge_patched == {
        "rms_norm": 2 * LAYERS + 1,
        "fused_layers": LAYERS,
        "int4_linear": 0,
        "int4_skipped": 0,
    }
    assert isinstance(patched.model.norm, RMSNorm)
    assert all(
        isinstance(layer.post_attention_layernorm, RMSNorm) for layer in patched.model.layers
    )
    assert patched.state_dict().keys() == m.state_dict().keys()
    out = patched(ids).logits
    assert_close(m(ids).logits, ref.float(), msg="unpatched fp32 vs fp64")
    assert_close(out, ref.float(), msg="patched fp32 vs fp64")
    # in place: the new norms hold the very Parameters the old ones had (tying, optimizers)
    before = m.model.norm.weight
    assert apply_warpgauge(m) is m and m.model.norm.weight is before
    # applying twice changes nothing more
    apply_warpgauge(patched)
    assert patched.warpgauge_patched["fused_layers"] == LAYERS
    assert torch.equal(patched(ids).logits, out)


@torch.no_grad()
def test_patched_generate_gives_the_same_tokens():
    m = _model()
    ids = _ids(batch=1, length=5, seed=1)
    kw = dict(
        max_new_tokens=6, min_new_tokens=6, do_sample=False, eos_token_id=None, pad_token_id=0
    )
    want = m.generate(ids, **kw)
    got = apply_warpgauge(copy.deepcopy(m)).generate(ids, **kw)
    assert torch.equal(got, want)


def test_patched_model_trains_like_the_fp64_model():
    m = _model()
    ids = _ids(seed=2)
    ref = copy.deepcopy(m).double()
    patched = apply_warpgauge(copy.deepcopy(m))
    patched(ids, labels=ids).loss.backward()
    ref(ids, labels=ids).loss.backward()
    grads = dict(ref.named_parameters())
    for name, p in patched.named_parameters():
        if "norm" in name:
            assert_close(p.grad, grads[name].grad.float(), msg=name)


@torch.no_grad()
def test_int4_patch_matches_the_dequantized_model():
    m = _model(torch.bfloat16, hidden=128, inter=256)
    patched = apply_warpgauge(copy.deepcopy(m), int4=True, group_size=128)
    # q, k, v, o, gate, up (in_features 128) quantized; down (in 256) too: 7 per layer
    assert patched.warpgauge_patched["int4_linear"] == 7 * LAYERS
    assert isinstance(patched.lm_head, torch.nn.Linear)  # never the head or the embeddings
    quantized = {n: q for n, q in patched.named_modules() if isinstance(q, Int4Linear)}
    deq, exact = copy.deepcopy(m), copy.deepcopy(m).double()
    for model, dtype in ((deq, torch.bfloat16), (exact, torch.float64)):
        for name, mod in model.named_modules():
            if name in quantized:
                w = quantized[name].qweight.dequantize(torch.float32)
                mod.weight.copy_(w.to(dtype))
    ids = _ids(batch=1, length=7, seed=3)
    ref = exact(ids).logits
    e_wg = float((patched(ids).logits.double() - ref).abs().max())
    e_hf = float((deq(ids).logits.double() - ref).abs().max())
    scale = float(ref.abs().max())
    assert e_wg <= 1.25 * e_hf + 1e-3 * scale, (e_wg, e_hf, scale)


def test_apply_rejects_a_non_module_and_leaves_other_models_alone():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        apply_warpgauge("llama")
    plain = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.LayerNorm(128))
    apply_warpgauge(plain, int4=True)
    assert plain.warpgauge_patched["rms_norm"] == 0 and isinstance(plain[0], torch.nn.Linear)


def test_decode_example_without_a_gpu_says_so_and_exits_2(tmp_path, capsys):
    import importlib.util
    from pathlib import Path

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the example would measure")
    path = Path(__file__).parents[1] / "examples" / "decode_tokens.py"
    spec = importlib.util.spec_from_file_location("decode_tokens", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--quick", "--out", str(tmp_path / "d.json")]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err
    assert not (tmp_path / "d.json").exists()
    assert set(mod.VARIANTS) == {"hf", "warpgauge", "warpgauge-int4", "torch-int4"}
