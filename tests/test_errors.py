"""Every public error path: the message names the argument and what would work."""

import pytest
import torch

import warpgauge as wg

from .conftest import DEVICE


def _t(*shape, dtype=torch.float16):
    return torch.randn(shape).to(dtype).to(DEVICE)


def test_cpu_tensor_without_interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match=r"x is a CPU tensor.*\.cuda\(\).*TRITON_INTERPRET=1"):
        wg.softmax(x)
    with pytest.raises(ValueError, match="residual is a CPU tensor|x is a CPU tensor"):
        wg.add_rms_norm(x, x, torch.ones(8))


def test_not_a_tensor():
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        wg.softmax([1.0, 2.0])
    with pytest.raises(TypeError, match="y must be a torch.Tensor"):
        wg.add(_t(3), 3.0)


def test_unsupported_dtype():
    with pytest.raises(
        TypeError, match=r"x has dtype int32; supported: float16, bfloat16, float32"
    ):
        wg.softmax(torch.ones(2, 3, dtype=torch.int32, device=DEVICE))
    with pytest.raises(TypeError, match="out_dtype must be one of"):
        wg.row_sum(_t(2, 3), out_dtype=torch.int64)


def test_mixed_dtypes_and_devices():
    with pytest.raises(TypeError, match="residual has dtype bfloat16 but x has float16"):
        wg.add_rms_norm(_t(2, 8), _t(2, 8, dtype=torch.bfloat16), _t(8))
    with pytest.raises(TypeError, match="y has dtype float32 but x has float16"):
        wg.add(_t(4), _t(4, dtype=torch.float32))
    meta = torch.empty(2, 8, dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match="residual is on meta but x is on"):
        wg.add_rms_norm(_t(2, 8), meta, _t(8))


def test_shape_errors():
    with pytest.raises(ValueError, match=r"residual has shape \(2, 9\) but x has \(2, 8\)"):
        wg.add_rms_norm(_t(2, 8), _t(2, 9), _t(8))
    with pytest.raises(ValueError, match=r"weight must be 1-D.*expected shape \(8,\), got \(9,\)"):
        wg.add_rms_norm(_t(2, 8), _t(2, 8), _t(9))
    with pytest.raises(ValueError, match=r"y has shape \(5,\) but x has \(4,\).*broadcast"):
        wg.add(_t(4), _t(5))
    with pytest.raises(ValueError, match="at least one dimension"):
        wg.softmax(torch.tensor(1.0, dtype=torch.float16, device=DEVICE))
    with pytest.raises(ValueError, match="empty last dimension"):
        wg.softmax(torch.empty(3, 0, dtype=torch.float16, device=DEVICE))


def test_non_contiguous_last_dim():
    x = _t(8, 4).t()  # last-dim stride 4
    with pytest.raises(ValueError, match=r"stride 4 in its last dimension.*\.contiguous\(\)"):
        wg.softmax(x)


@pytest.mark.parametrize("eps", [0.0, -1e-6, float("nan"), float("inf")])
def test_bad_eps(eps):
    with pytest.raises(ValueError, match="eps must be finite and > 0"):
        wg.add_rms_norm(_t(2, 8), _t(2, 8), _t(8), eps=eps)


def test_eps_type():
    with pytest.raises(TypeError, match="eps must be a float"):
        wg.add_rms_norm(_t(2, 8), _t(2, 8), _t(8), eps="small")


def test_errors_are_the_same_when_autograd_records():
    """With gradient-tracking inputs the call goes through the registered op; bad arguments must
    still get the clear TypeError/ValueError, not a dispatcher schema error."""
    x = _t(2, 8, dtype=torch.float32).requires_grad_()
    with pytest.raises(TypeError, match="y must be a torch.Tensor"):
        wg.add(x, 3.0)
    with pytest.raises(TypeError, match="out_dtype must be one of"):
        wg.row_sum(x, out_dtype="float32")
    with pytest.raises(TypeError, match="eps must be a float"):
        wg.add_rms_norm(x, x, _t(8, dtype=torch.float32), eps="x")
    with pytest.raises(ValueError, match="eps must be finite and > 0"):
        wg.add_rms_norm(x, x, _t(8, dtype=torch.float32), eps=0.0)


def test_numpy_eps_and_parameter_weight():
    import numpy as np

    x = _t(2, 8, dtype=torch.float32)
    w = torch.nn.Parameter(_t(8, dtype=torch.float32))
    with torch.no_grad():
        y1, _ = wg.add_rms_norm(x, x, w, eps=np.float32(1e-6))
    y2, _ = wg.add_rms_norm(x, x, w.detach(), eps=1e-6)
    assert torch.equal(y1, y2)
