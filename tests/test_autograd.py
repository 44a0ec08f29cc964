"""Gradients through the registered ops against FP64 autograd, across plans and dtypes.

The public functions route gradient-tracking plain tensors through the ``torch.autograd.Function``s
of ``_eager.py`` (direct launches, no dispatcher) and everything else that needs autograd through
``torch.ops.warpgauge.*`` and its ``register_autograd`` formulas; the two must agree bit for bit. Widths: 127 (resident), 32769 with 3 rows (split on the
interpreter's 4 SMs), 32771 with 5 rows (looped).
"""

import pytest
import torch

import warpgauge as wg
from warpgauge.reference import assert_close

from .conftest import DEVICE

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SHAPES = [(5, 127), (3, 32769), (5, 32771), (2, 3, 40)]


def _leaf(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(shape, generator=g).to(dtype).to(DEVICE)
    return t.requires_grad_(), t.detach().double().requires_grad_()


def _grad_out(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype).to(DEVICE)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_softmax_grad(shape, dtype):
    x, x64 = _leaf(shape, dtype, 0)
    dy = _grad_out(shape, dtype, 1)
    wg.softmax(x).backward(dy)
    torch.softmax(x64, -1).backward(dy.double())
    assert_close(x.grad, x64.grad.to(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_add_rms_norm_grad(shape, dtype):
    x, x64 = _leaf(shape, dtype, 2)
    r, r64 = _leaf(shape, dtype, 3)
    w, w64 = _leaf(shape[-1:], dtype, 4)
    dy, dh = _grad_out(shape, dtype, 5), _grad_out(shape, dtype, 6)
    y, h = wg.add_rms_norm(x, r, w)
    torch.autograd.backward((y, h), (dy, dh))
    # FP64 reference through the rounded h the kernel returned (checked against the FP64
    # forward reference elsewhere; on the interpreter BF16 rounding truncates, and a one-ulp h
    # difference would be amplified by cancellation in dw)
    s64 = x64 + r64
    h64 = h.detach().double() + (s64 - s64.detach())
    y64 = h64 * torch.rsqrt(h64.square().mean(-1, keepdim=True) + 1e-6) * w64
    torch.autograd.backward((y64, h64), (dy.double(), dh.double()))
    assert_close(x.grad, x64.grad.to(dtype), msg="dx")
    assert_close(r.grad, r64.grad.to(dtype), msg="dr")
    assert_close(w.grad, w64.grad.to(dtype), msg="dw")


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_and_row_sum_grad(dtype):
    x, x64 = _leaf((4, 33), dtype, 7)
    y, y64 = _leaf((4, 33), dtype, 8)
    g = _grad_out((4,), dtype, 9)
    wg.row_sum(wg.add(x, y)).backward(g)
    (x64 + y64).sum(-1).backward(g.double())
    assert_close(x.grad, x64.grad.to(dtype))
    assert_close(y.grad, y64.grad.to(dtype))


def test_only_h_used():
    """Gradient flowing only into the returned h (y unused) still reaches x, residual."""
    x, x64 = _leaf((3, 64), torch.float32, 10)
    r, _ = _leaf((3, 64), torch.float32, 11)
    w, _ = _leaf((64,), torch.float32, 12)
    _, h = wg.add_rms_norm(x, r, w)
    h.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x)) and torch.equal(r.grad, torch.ones_like(r))


def test_weight_grad_bit_identical():
    x, _ = _leaf((37, 300), torch.float32, 13)
    r, _ = _leaf((37, 300), torch.float32, 14)
    w, _ = _leaf((300,), torch.float32, 15)
    dy = _grad_out((37, 300), torch.float32, 16)
    grads = []
    for _ in range(3):
        w.grad = None
        y, _h = wg.add_rms_norm(x, r, w)
        y.backward(dy)
        grads.append(w.grad.clone())
    assert torch.equal(grads[0], grads[1]) and torch.equal(grads[1], grads[2])


# ------------------------------------------ the eager autograd path against the registered op


def _pair(shape, dtype, seed):
    a, _ = _leaf(shape, dtype, seed)
    return a, a.detach().clone().requires_grad_()


def test_eager_path_skips_the_dispatcher():
    x, _ = _leaf((3, 40), torch.float32, 0)
    assert type(wg.softmax(x).grad_fn).__name__ == "SoftmaxBackward"  # _eager.Softmax
    assert "warpgauge_softmax" in type(torch.ops.warpgauge.softmax(x).grad_fn).__name__


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_eager_autograd_matches_registered_op_bitwise(dtype):
    ops = torch.ops.warpgauge
    shape = (5, 127)
    g = _grad_out(shape, dtype, 9)
    gr = _grad_out(shape[:-1], dtype, 10)
    cases = {
        "softmax": (lambda x, w: wg.softmax(x), lambda x, w: ops.softmax(x), g),
        "add": (lambda x, w: wg.add(x, w), lambda x, w: ops.add(x, w), g),
        "row_sum": (lambda x, w: wg.row_sum(x), lambda x, w: ops.row_sum(x, None), gr),
        "add_rms_norm y": (
            lambda x, w: wg.add_rms_norm(x, x * 2, w[0])[0],
            lambda x, w: ops.add_rms_norm(x, x * 2, w[0], 1e-6)[0],
            g,
        ),
        "add_rms_norm frozen weight": (  # no dw wanted: the eager path skips its kernels
            lambda x, w: wg.add_rms_norm(x, x * 2, w[0].detach())[0],
            lambda x, w: ops.add_rms_norm(x, x * 2, w[0].detach(), 1e-6)[0],
            g,
        ),
        "add_rms_norm h": (  # only h used: dy arrives as None
            lambda x, w: wg.add_rms_norm(x, x * 2, w[0])[1],
            lambda x, w: ops.add_rms_norm(x, x * 2, w[0], 1e-6)[1],
            g,
        ),
    }
    for name, (ours, op, grad) in cases.items():
        (x1, x2), (w1, w2) = _pair(shape, dtype, 1), _pair(shape, dtype, 2)
        ours(x1, w1).backward(grad)
        op(x2, w2).backward(grad)
        assert torch.equal(x1.grad, x2.grad), name
        if w2.grad is not None:
            assert torch.equal(w1.grad, w2.grad), name


@pytest.mark.parametrize("needs", [(True, True), (True, False), (False, True)])
def test_eager_gemm_autograd_matches_registered_op(needs):
    a1, a2 = _pair((9, 24), torch.float16, 3)
    b1, b2 = _pair((24, 17), torch.float16, 4)
    for t, n in ((a1, needs[0]), (a2, needs[0]), (b1, needs[1]), (b2, needs[1])):
        t.requires_grad_(n)
    g = _grad_out((9, 17), torch.float16, 5)
    wg.gemm(a1, b1).backward(g)
    torch.ops.warpgauge.gemm(a2, b2).backward(g)
    for p, q in ((a1, a2), (b1, b2)):
        assert (p.grad is None) == (q.grad is None)
        if p.grad is not None:
            assert torch.equal(p.grad, q.grad)


def test_eager_int4_autograd_matches_registered_op():
    q = wg.quantize_int4(torch.randn(32, 256).to(DEVICE))
    x1, x2 = _pair((3, 256), torch.bfloat16, 6)
    g = _grad_out((3, 32), torch.bfloat16, 7)
    wg.int4_linear(x1, q).backward(g)
    torch.ops.warpgauge.int4_linear(x2, q.packed, q.scales, q.group_size).backward(g)
    assert torch.equal(x1.grad, x2.grad)


def test_eager_int4_saves_the_weight_as_the_registered_op_does():
    """The eager Function takes the weight as one argument but saves ``packed`` and ``scales``
    for backward as the registered op does: an in-place change before backward is caught on
    both paths, and the forward records an edge to ``x`` only."""
    q = wg.quantize_int4(torch.randn(32, 256).to(DEVICE))
    for f in (
        lambda x: wg.int4_linear(x, q),
        lambda x: torch.ops.warpgauge.int4_linear(x, q.packed, q.scales, q.group_size),
    ):
        x, _ = _pair((3, 256), torch.bfloat16, 6)
        y = f(x)
        assert y.grad_fn.next_functions[0][0] is not None  # x's AccumulateGrad
        q.scales.mul_(1)  # bumps the version counter, values unchanged
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_double_backward_behaves_as_the_registered_op():
    """create_graph=True: both paths call the registered backward op, which has no derivative."""
    outcomes = []
    for f in (wg.softmax, torch.ops.warpgauge.softmax):
        x, _ = _leaf((3, 40), torch.float32, 8)
        (gx,) = torch.autograd.grad(
            f(x), x, _grad_out((3, 40), torch.float32, 9), create_graph=True
        )
        try:
            gx.sum().backward()
            outcomes.append(("ok", x.grad))
        except RuntimeError as e:
            outcomes.append(("raised", type(e)))
    assert outcomes[0][0] == outcomes[1][0]
