"""warpgauge.nn modules against FP64 references (kernels under the interpreter on the CPU).

Each module: forward and backward against FP64 autograd of the contract, state-dict
compatibility with the torch module it replaces, and its error paths."""

import pytest
import torch

import warpgauge as wg
import warpgauge.nn as wgnn
from warpgauge.reference import add_rms_norm_ref, assert_close, int4_linear_ref, softmax_ref

from .conftest import DEVICE


def _rand(*shape, dtype=torch.float32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(DEVICE)


def _rms64(x, w, eps):
    x64 = x.double()
    return x64 * torch.rsqrt(x64.square().mean(-1, keepdim=True) + eps) * w.double()


# ------------------------------------------------------------------------------------- RMSNorm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_forward_plain_and_with_residual(dtype):
    m = wgnn.RMSNorm(127).to(DEVICE, dtype)
    with torch.no_grad():
        m.weight.copy_(_rand(127, dtype=dtype, seed=1))
    x = _rand(2, 3, 127, dtype=dtype, seed=2)
    assert_close(m(x), _rms64(x, m.weight, 1e-6).to(dtype), msg="plain")
    r = _rand(2, 3, 127, dtype=dtype, seed=3)
    y, h = m(x, r)
    y_ref, h_ref = add_rms_norm_ref(x, r, m.weight, 1e-6)
    assert_close(h, h_ref, msg="h")
    assert_close(y, y_ref, msg="y")
    # strided rows (a slice of a wider tensor) work without a copy
    wide = _rand(6, 300, dtype=dtype, seed=4)
    xs = wide[:, 5:132]
    assert_close(m(xs), _rms64(xs, m.weight, 1e-6).to(dtype), msg="strided")


def test_rms_norm_trains():
    m = wgnn.RMSNorm(64, eps=1e-5).to(DEVICE)
    with torch.no_grad():
        m.weight.copy_(_rand(64, seed=5))
    x = _rand(5, 64, seed=6).requires_grad_(True)
    r = _rand(5, 64, seed=7).requires_grad_(True)
    dy = _rand(5, 64, seed=8)
    y, h = m(x, r)
    (y * dy).sum().backward()
    x64 = (x.detach().double() + r.detach().double()).requires_grad_(True)
    w64 = m.weight.detach().double().requires_grad_(True)
    (_rms64(x64, w64, 1e-5) * dy.double()).sum().backward()
    assert_close(x.grad, x64.grad.float(), msg="dx")
    assert_close(r.grad, x64.grad.float(), msg="dresidual")
    assert_close(m.weight.grad, w64.grad.float(), msg="dweight")
    # plain form trains too (the zero residual takes no gradient)
    m.weight.grad = None
    x2 = _rand(4, 64, seed=9).requires_grad_(True)
    m(x2).sum().backward()
    assert x2.grad is not None and torch.isfinite(x2.grad).all() and m.weight.grad is not None


def test_rms_norm_state_dict_is_torch_compatible():
    t = torch.nn.RMSNorm(33, eps=1e-6)
    with torch.no_grad():
        t.weight.copy_(torch.randn(33))
    m = wgnn.RMSNorm(33)
    m.load_state_dict(t.state_dict())
    assert list(m.state_dict()) == ["weight"] and torch.equal(m.weight, t.weight)
    back = torch.nn.RMSNorm(33)
    back.load_state_dict(m.state_dict())
    assert isinstance(m, torch.nn.RMSNorm) and m.eps == 1e-6


def test_rms_norm_errors():
    with pytest.raises(ValueError, match="hidden must be a positive int"):
        wgnn.RMSNorm(0)
    m = wgnn.RMSNorm(8).to(DEVICE)
    with pytest.raises(ValueError, match="0-D"):
        m(torch.tensor(1.0).to(DEVICE))
    with pytest.raises(ValueError, match="weight must be 1-D with one entry per column"):
        m(_rand(2, 9))


# ------------------------------------------------------------------------------------- Softmax


@pytest.mark.parametrize("dim", [-1, 1, 0])
def test_softmax_any_dim_and_grad(dim):
    x = _rand(3, 5, 7, seed=10, scale=3.0).requires_grad_(True)
    y = wgnn.Softmax(dim)(x)
    ref = torch.softmax(x.detach().double(), dim)
    assert_close(y, ref.float(), relative=True)
    dy = _rand(3, 5, 7, seed=11)
    (y * dy).sum().backward()
    x64 = x.detach().double().requires_grad_(True)
    (torch.softmax(x64, dim) * dy.double()).sum().backward()
    assert_close(x.grad, x64.grad.float())


def test_softmax_masked_and_errors():
    x = _rand(4, 33, seed=12)
    x[0, :20] = float("-inf")
    x[1] = float("-inf")
    y = wgnn.Softmax()(x)
    assert_close(y, softmax_ref(x), relative=True)
    assert torch.equal(y[1].cpu(), torch.zeros(33))
    with pytest.raises(ValueError, match="out of range"):
        wgnn.Softmax(3)(x)
    with pytest.raises(TypeError, match="dim must be an int"):
        wgnn.Softmax(1.0)


# -------------------------------------------------------------------------------------- Linear


@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_fp64_and_trains(bias):
    torch.manual_seed(0)
    t = torch.nn.Linear(48, 20, bias=bias, dtype=torch.bfloat16)
    m = wgnn.Linear(48, 20, bias=bias, dtype=torch.bfloat16)
    m.load_state_dict(t.state_dict())
    m = m.to(DEVICE)
    x = _rand(2, 3, 48, dtype=torch.bfloat16, seed=13).requires_grad_(True)
    y = m(x)
    x64, w64 = x.detach().double(), m.weight.detach().double()
    ref = x64 @ w64.T + (m.bias.detach().double() if bias else 0)
    assert y.shape == (2, 3, 20)
    # the product rounds once; the bias add rounds again (two roundings: compare at the dtype)
    assert_close(y, ref.to(torch.bfloat16))
    dy = _rand(2, 3, 20, dtype=torch.bfloat16, seed=14)
    y.backward(dy)
    assert_close(x.grad, (dy.double() @ w64).to(torch.bfloat16), msg="dx")
    dw_ref = dy.double().reshape(-1, 20).T @ x64.reshape(-1, 48)
    assert_close(m.weight.grad, dw_ref.to(torch.bfloat16), msg="dweight")
    if bias:
        assert_close(m.bias.grad, dy.double().sum((0, 1)).to(torch.bfloat16), msg="dbias")
    back = torch.nn.Linear(48, 20, bias=bias, dtype=torch.bfloat16)
    back.load_state_dict(m.state_dict())


def test_linear_errors():
    with pytest.raises(TypeError, match="FP16/BF16"):
        wgnn.Linear(16, 8).to(DEVICE)(_rand(2, 16))
    m = wgnn.Linear(16, 8, dtype=torch.bfloat16).to(DEVICE)
    with pytest.raises(ValueError, match="last dimension of 16"):
        m(_rand(2, 15, dtype=torch.bfloat16))


# ---------------------------------------------------------------------------------- Int4Linear


def test_int4_linear_from_linear_matches_the_dequantized_weight_and_trains_x():
    torch.manual_seed(1)
    lin = torch.nn.Linear(256, 40, dtype=torch.bfloat16).to(DEVICE)
    q = wgnn.Int4Linear.from_linear(lin, group_size=128)
    assert sorted(q.state_dict()) == ["bias", "packed", "scales"]
    assert q.packed.dtype == torch.uint8 and q.packed.shape == (40, 128)
    qw = wg.quantize_int4(lin.weight.detach(), 128)
    assert torch.equal(q.packed, qw.packed) and torch.equal(q.scales, qw.scales)
    x = _rand(3, 256, dtype=torch.bfloat16, seed=15).requires_grad_(True)
    y = q(x)
    w32 = qw.dequantize(torch.float32)
    ref = int4_linear_ref(x, w32).double() + q.bias.detach().double()
    assert_close(y, ref.to(torch.bfloat16))
    dy = _rand(3, 40, dtype=torch.bfloat16, seed=16)
    y.backward(dy)
    assert_close(x.grad, (dy.double() @ w32.double()).to(torch.bfloat16), msg="dx")
    assert_close(q.bias.grad, dy.double().sum(0).to(torch.bfloat16), msg="dbias")
    assert not any(p.requires_grad for n, p in q.named_parameters() if n != "bias")
    # a fresh module loads the state dict (decode checkpoints)
    q2 = wgnn.Int4Linear(256, 40, group_size=128, device=DEVICE)
    q2.load_state_dict(q.state_dict())
    assert torch.equal(q2(x.detach()), q(x.detach()))


def test_int4_linear_errors():
    with pytest.raises(TypeError, match="torch.nn.Linear"):
        wgnn.Int4Linear.from_linear(torch.nn.Conv1d(2, 2, 1))
    with pytest.raises(ValueError, match="multiple of group_size"):
        wgnn.Int4Linear.from_linear(torch.nn.Linear(100, 8, dtype=torch.bfloat16))
    q = wgnn.Int4Linear.from_linear(torch.nn.Linear(128, 8, dtype=torch.bfloat16).to(DEVICE))
    with pytest.raises((TypeError, ValueError), match="dtype|float16|bfloat16"):
        q(_rand(2, 128, dtype=torch.float16))
