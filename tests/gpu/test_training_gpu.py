"""Training on the GPU (skipped without CUDA): every registration checked by opcheck (forward and
backward, with gradient-tracking inputs), a training step through all operators compiled with
``torch.compile(fullgraph=True)`` at several row counts and replayed as a CUDA graph by
``mode="reduce-overhead"``, and examples/train_tiny.py for 120 steps, eager and compiled.

Run on the H200: ``PYTHONPATH=src python3 -m pytest tests/gpu/test_training_gpu.py -q``
(about 2-4 minutes, mostly torch.compile and GEMM autotuning).
"""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

import warpgauge as wg
from warpgauge.reference import assert_close

_PATH = Path(__file__).resolve().parents[2] / "examples" / "train_tiny.py"


def _load_train_tiny():
    spec = importlib.util.spec_from_file_location("train_tiny", _PATH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


train_tiny = _load_train_tiny()
ops = torch.ops.warpgauge


def _rand(shape, dtype, seed, scale=1.0, grad=False):
    g = torch.Generator(device="cuda").manual_seed(seed)
    t = (torch.randn(shape, generator=g, device="cuda") * scale).to(dtype)
    return t.requires_grad_(grad)


# ------------------------------------------------------------------------------------- opcheck
# opcheck runs test_schema, test_autograd_registration, test_faketensor and
# test_aot_dispatch_dynamic. With requires_grad inputs the last two also trace and run the
# backward formulas registered with register_autograd.

HALF = [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("dtype", HALF + [torch.float32])
def test_opcheck_row_ops_with_grad(dtype):
    x = _rand((8, 300), dtype, 0, grad=True)
    r = _rand((8, 300), dtype, 1, grad=True)
    w = _rand((300,), dtype, 2, grad=True)
    dy = _rand((8, 300), dtype, 3)
    y = torch.softmax(_rand((8, 300), dtype, 4).float(), -1).to(dtype)
    torch.library.opcheck(ops.softmax, (x,))
    torch.library.opcheck(ops.softmax, (_rand((3, 9000), dtype, 5, grad=True),))  # looped/split
    torch.library.opcheck(ops.softmax_backward, (y, dy))
    torch.library.opcheck(ops.add, (x, r))
    torch.library.opcheck(ops.row_sum, (x, None))
    torch.library.opcheck(ops.row_sum, (x, torch.float32))
    torch.library.opcheck(ops.add_rms_norm, (x, r, w, 1e-6))
    torch.library.opcheck(ops.add_rms_norm, (x, r.detach(), w.detach(), 1e-5))  # grad to x only
    h = (x.detach().float() + r.detach().float()).to(dtype)
    torch.library.opcheck(ops.add_rms_norm_backward, (dy, dy, h, w.detach(), 1e-6))
    torch.library.opcheck(ops.add_rms_norm_backward, (dy, None, h, w.detach(), 1e-6))


@pytest.mark.parametrize("dtype", HALF)
def test_opcheck_gemm_with_grad(dtype):
    a = _rand((70, 48), dtype, 0, grad=True)
    b = _rand((48, 33), dtype, 1, grad=True)
    grad = _rand((70, 33), dtype, 2)
    torch.library.opcheck(ops.gemm, (a, b))
    torch.library.opcheck(ops.gemm, (a, b.detach()))  # only dA needed
    torch.library.opcheck(ops.gemm, (a.detach(), b))  # only dB needed
    # transposed operands are stride swaps: the registration must accept non-contiguous views
    bt = _rand((33, 48), dtype, 3, grad=True)
    torch.library.opcheck(ops.gemm, (a, bt.t()))
    torch.library.opcheck(ops.gemm_grad_a, (grad, b.detach()))
    torch.library.opcheck(ops.gemm_grad_b, (grad, a.detach()))


@pytest.mark.parametrize("dtype", HALF)
def test_opcheck_int4_with_grad(dtype):
    w = _rand((96, 256), dtype, 0, scale=0.05)
    q = wg.quantize_int4(w, group_size=128)
    for m in (1, 5, 40):  # FMA GEMV, tensor-core GEMV, tiled
        x = _rand((m, 256), dtype, m, grad=True)
        torch.library.opcheck(ops.int4_linear, (x, q.packed, q.scales, q.group_size))
        g = _rand((m, 96), dtype, 100 + m)
        torch.library.opcheck(ops.int4_linear_grad_input, (g, q.packed, q.scales, q.group_size))


# ------------------------------------------------------------------ a training step, compiled

SIZES = train_tiny.Sizes(
    batch=0, tokens=16, d_in=64, hidden=256, heads=4, classes=10, group_size=128
)


def _models(dtype=torch.bfloat16, seed=0):
    """Two copies of the warpgauge model from the same weights (eager, and one to compile)."""
    init, w_frozen = train_tiny.init_weights(SIZES, seed)
    qweight = wg.quantize_int4(w_frozen.to(dtype).cuda(), SIZES.group_size)
    init = {k: v.cuda() for k, v in init.items()}
    make = lambda: train_tiny.TinyClassifier(  # noqa: E731
        train_tiny.WarpgaugeOps, SIZES, init, qweight, dtype
    ).cuda()
    return make(), make()


def _batch(batch, seed, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, SIZES.tokens, SIZES.d_in, generator=g).to("cuda", dtype)
    labels = torch.randint(0, SIZES.classes, (batch,), generator=g)
    return x, F.one_hot(labels, SIZES.classes).to("cuda", torch.float32)


def _loss_and_grads(model, x, onehot):
    model.zero_grad(set_to_none=True)
    loss = model(x, onehot)
    loss.backward()
    return loss.detach().clone(), {k: p.grad.clone() for k, p in model.params.items()}


def _assert_step_matches(got, want, what):
    loss, grads = got
    loss_e, grads_e = want
    # The warpgauge kernels are the same in both; the glue (casts, silu, the product before the
    # pooling row_sum, log, mean) is fused by Inductor and rounds differently by an ulp here and
    # there. The loss is compared elementwise with the BF16 tolerance table. Gradients are whole
    # BF16 networks' backward passes, where those ulp flips propagate through reductions (on the
    # H200, results/h200-session2, the elementwise check missed by 3.9x on a weight gradient whose
    # entries cancel): they are compared by relative error in norm, ||g - g_eager|| / ||g_eager||,
    # at 1e-2, the upper end of BF16 operand error (METHOD.md), and must be free of NaN.
    assert_close(loss, loss_e, torch.bfloat16, msg=f"{what}: loss")
    for k, g in grads.items():
        ge = grads_e[k].double()
        assert not torch.isnan(g).any(), f"{what}: NaN in grad of {k}"
        rel = float((g.double() - ge).norm() / ge.norm().clamp_min(1e-30))
        assert rel <= 1e-2, f"{what}: grad of {k}: relative error in norm {rel:.3g} > 1e-2"


def test_compiled_training_step_dynamic_rows():
    eager, model = _models()
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    counters.clear()
    for batch in (3, 20, 64, 129):  # rows = batch * 16 tokens: 48 .. 2064, one graph for all
        x, onehot = _batch(batch, batch)
        _assert_step_matches(
            _loss_and_grads(compiled, x, onehot),
            _loss_and_grads(eager, x, onehot),
            f"batch {batch}",
        )
    frames = counters["stats"]["unique_graphs"]
    print(f"compiled graphs for 4 row counts: {frames}")


def test_reduce_overhead_replays_training_step_as_cuda_graph():
    eager, model = _models()
    compiled = torch.compile(model, fullgraph=True, mode="reduce-overhead")
    counters.clear()
    for it in range(4):  # warm-up, record, then replays
        torch.compiler.cudagraph_mark_step_begin()
        x, onehot = _batch(32, 1000 + it)
        _assert_step_matches(
            _loss_and_grads(compiled, x, onehot),
            _loss_and_grads(eager, x, onehot),
            f"iteration {it}",
        )
    skips = counters["inductor"]["cudagraph_skips"]
    assert skips == 0, f"Inductor skipped CUDA graphs {skips} time(s); see the log for the reason"


# ------------------------------------------------------------------------- train_tiny, 120 steps


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_train_tiny_120_steps(compile, tmp_path):
    res = train_tiny.run(steps=120, device="cuda", dtype="bfloat16", compile=compile, out=tmp_path)
    lw, lr = res["losses_wg"], res["losses_ref"]
    assert len(lw) == 120
    worst = res["worst_step"]
    assert res["max_rel_gap"] <= train_tiny.MAX_REL_GAP, (
        f"step {worst}: warpgauge {lw[worst]:.5f} vs PyTorch {lr[worst]:.5f}, gap "
        f"{100 * res['max_rel_gap']:.3f}% > {100 * train_tiny.MAX_REL_GAP}%"
    )
    assert lw[-1] < 0.5 * lw[0], f"the model did not train: loss {lw[0]:.3f} -> {lw[-1]:.3f}"
