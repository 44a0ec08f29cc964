"""Gradients through the registered ops against FP64 autograd, across plans and dtypes.

The public functions route gradient-tracking inputs through ``torch.ops.warpgauge.*`` and its
``register_autograd`` formulas. Widths: 127 (resident), 32769 with 3 rows (split on the
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
