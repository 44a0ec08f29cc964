"""Run-to-run determinism on the GPU (skipped without CUDA): 100 repeated calls, bit-identical.

The paths whose order of floating-point additions could vary between calls are the ones that
split a reduction across programs:

- RMSNorm dW (``add_rms_norm_backward``): a sum over rows, cut into row groups that write FP32
  partials; a finish kernel adds the groups in a fixed order. Many rows (groups > 1) and few rows.
- GEMM at a split-K-prone shape (small M x N, long K): one program per output tile walks K in a
  fixed order (no split-K path, no atomics), so repeated calls must agree bit for bit.
- INT4 split-K: FP32 partials ``[split_k, M, N]`` reduced in the fixed order 0..split_k-1.
- Row operators on split plans (row_sum / softmax / RMSNorm partial statistics) for completeness.

Each check compares all 100 results with the first with ``torch.equal`` (bitwise for non-NaN
data; inputs are random normal, so the outputs hold no NaN) and with the FP64 reference once.
"""

from __future__ import annotations

import pytest
import torch

import warpgauge as wg
from warpgauge._device import interpreter_enabled
from warpgauge.kernels import rmsnorm as rms_k
from warpgauge.kernels import row_sum as row_sum_k
from warpgauge.kernels import softmax as softmax_k
from warpgauge.kernels.int4 import Int4Plan, int4_linear
from warpgauge.kernels.plans import RowPlan
from warpgauge.reference import (
    add_rms_norm_ref,
    assert_close,
    gemm_ref,
    int4_linear_ref,
    row_sum_ref,
    softmax_ref,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or interpreter_enabled(),
        reason="needs a CUDA GPU (and TRITON_INTERPRET unset)",
    ),
]

REPEATS = 100


def _rand(*shape, dtype=torch.bfloat16, seed=0, scale=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(*shape, generator=g, device="cuda") * scale).to(dtype)


def _all_equal(fn) -> tuple[torch.Tensor, int]:
    """Call ``fn`` REPEATS times; return the first result and how many later ones differ."""
    first = fn()
    if isinstance(first, tuple):
        first = torch.cat([t.reshape(-1).float() for t in first])
        call = lambda: torch.cat([t.reshape(-1).float() for t in fn()])  # noqa: E731
    else:
        call = fn
    assert not torch.isnan(first).any(), "determinism inputs must not produce NaN"
    differ = sum(int(not torch.equal(call(), first)) for _ in range(REPEATS - 1))
    return first, differ


def _rms_ref_dw(dy, h, w, eps):
    h64 = h.double().requires_grad_(True)
    w64 = w.double().requires_grad_(True)
    rstd = torch.rsqrt(h64.square().mean(-1, keepdim=True) + eps)
    (h64 * rstd * w64).backward(dy.double())
    return w64.grad.to(w.dtype), h64.grad.to(h.dtype)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows,width", [(16384, 4096), (8, 32769), (64, 131072), (3000, 777)])
def test_rms_norm_dw_bit_identical(rows, width, dtype):
    h = _rand(rows, width, dtype=dtype, seed=1)
    w = _rand(width, dtype=dtype, seed=2)
    dy = _rand(rows, width, dtype=dtype, seed=3)
    eps = 1e-6
    first, differ = _all_equal(lambda: rms_k.add_rms_norm_backward(dy, None, h, w, eps)[1])
    assert differ == 0, f"dW differed in {differ} of {REPEATS - 1} repeats"
    dw_ref, _ = _rms_ref_dw(dy, h, w, eps)
    # dW sums `rows` terms: compare against the FP64 sum with the dtype's tolerance table.
    assert_close(first.to(dtype), dw_ref, msg="dW")


def test_rms_norm_autograd_step_bit_identical():
    """The whole training step of the public op (dx, dresidual, dw) through autograd."""
    x = _rand(4096, 4096, seed=4)
    r = _rand(4096, 4096, seed=5)
    w = _rand(4096, seed=6)
    dy = _rand(4096, 4096, seed=7)

    def step():
        xs, rs, ws = (t.detach().requires_grad_(True) for t in (x, r, w))
        y, h = wg.add_rms_norm(xs, rs, ws)
        y.backward(dy)
        return xs.grad, rs.grad, ws.grad

    _, differ = _all_equal(step)
    assert differ == 0


@pytest.mark.parametrize("M,N,K", [(64, 64, 16384), (1, 4096, 14336), (127, 255, 65537)])
def test_gemm_bit_identical(M, N, K):
    a = _rand(M, K, seed=8)
    b = _rand(K, N, seed=9)
    first, differ = _all_equal(lambda: wg.gemm(a, b))
    assert differ == 0
    assert_close(first, gemm_ref(a, b))


def test_gemm_backward_bit_identical():
    a = _rand(2048, 1024, seed=10)
    b = _rand(1024, 512, seed=11)
    g = _rand(2048, 512, seed=12)

    def step():
        aa, bb = a.detach().requires_grad_(True), b.detach().requires_grad_(True)
        wg.gemm(aa, bb).backward(g)
        return aa.grad, bb.grad

    _, differ = _all_equal(step)
    assert differ == 0


@pytest.mark.parametrize(
    "M,plan",
    [
        (1, None),  # the default rule splits K at batch 1 on this shape
        (1, Int4Plan(block_m=1, block_n=64, split_k=16, num_warps=2, num_stages=1)),
        (8, Int4Plan(block_m=16, block_n=64, split_k=8)),
        (100, Int4Plan(block_m=64, block_n=128, split_k=4, num_warps=8)),
        # the pipelined GEMVs (kernels/int4_gemv.py): FMA and tensor-core, split over K
        (1, Int4Plan(block_m=1, block_n=32, groups_per_iter=4, split_k=4, num_warps=2, pipeline=3)),
        (
            8,
            Int4Plan(block_m=16, block_n=64, groups_per_iter=2, split_k=4, num_warps=4, pipeline=3),
        ),
        # the batch-1 FMA GEMV with the split-K reduced inside the kernel (per-block counters)
        (
            1,
            Int4Plan(
                block_m=1,
                block_n=32,
                groups_per_iter=4,
                split_k=4,
                num_warps=2,
                pipeline=3,
                fused=True,
            ),
        ),
    ],
    ids=[
        "default-b1",
        "fma-split16",
        "dot-split8",
        "tiled-split4",
        "pipe-fma-split4",
        "pipe-dot-split4",
        "pipe-fma-split4-fused",
    ],
)
def test_int4_split_k_bit_identical(M, plan):
    N, K = 8192, 8192
    qw = wg.quantize_int4(_rand(N, K, seed=13) * 0.02)
    if plan is None:
        sm = torch.cuda.get_device_properties(0).multi_processor_count
        assert Int4Plan.for_shape(M, N, K, sm).split_k > 1
    x = _rand(M, K, seed=14)
    first, differ = _all_equal(lambda: int4_linear(x, qw, plan=plan))
    assert differ == 0
    assert_close(first, int4_linear_ref(x, qw.dequantize(torch.float32)))


def test_int4_grad_input_bit_identical():
    qw = wg.quantize_int4(_rand(4096, 4096, seed=15) * 0.02)
    g = _rand(16, 4096, seed=16)
    from warpgauge.kernels.int4 import int4_linear_grad_input

    _, differ = _all_equal(lambda: int4_linear_grad_input(g, qw))
    assert differ == 0


@pytest.mark.parametrize("width", [32769, 1048576])
def test_split_row_plans_bit_identical(width):
    rows = 4
    plan = RowPlan.split_for(rows, width, torch.cuda.get_device_properties(0).multi_processor_count)
    assert plan.kind == "split" and plan.n_chunks(width) > 1
    x = _rand(rows, width, seed=17, scale=3.0)
    r = _rand(rows, width, seed=18)
    w = _rand(width, seed=19)
    dy = _rand(rows, width, seed=20)
    s, differ = _all_equal(lambda: row_sum_k.row_sum(x, plan=plan))
    assert differ == 0
    assert_close(s, row_sum_ref(x))
    y, differ = _all_equal(lambda: softmax_k.softmax(x, plan=plan))
    assert differ == 0
    assert_close(y.view(rows, width), softmax_ref(x), relative=True)
    _, differ = _all_equal(lambda: softmax_k.softmax_backward(y.view(rows, width), dy, plan=plan))
    assert differ == 0
    yh, differ = _all_equal(lambda: rms_k.add_rms_norm(x, r, w, 1e-6, plan=plan))
    assert differ == 0
    y_ref, h_ref = add_rms_norm_ref(x, r, w)
    assert_close(yh[: rows * width].view(rows, width).to(x.dtype), y_ref)
    _, differ = _all_equal(lambda: rms_k.add_rms_norm_backward(dy, None, x, w, 1e-6, plan=plan))
    assert differ == 0
