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


# ------------------------------------------------------------- meta and fake tensors, eagerly


def _meta(*shape, dtype=torch.bfloat16):
    return torch.empty(shape, dtype=dtype, device="meta")


def _described(out):
    outs = out if isinstance(out, tuple) else (out,)
    return [(tuple(t.shape), t.dtype, t.device.type) for t in outs]


def test_meta_inputs_give_meta_outputs():
    x, w = _meta(3, 4, 40), _meta(40)
    bf = torch.bfloat16
    q = wg.quantize_int4(_meta(32, 256))
    assert (q.packed.shape, q.packed.dtype, q.packed.device.type) == (
        (32, 128),
        torch.uint8,
        "meta",
    )
    assert (q.scales.shape, q.scales.dtype) == ((32, 2), bf)
    cases = {
        "softmax": (wg.softmax(x), [((3, 4, 40), bf, "meta")]),
        "row_sum": (wg.row_sum(x, torch.float32), [((3, 4), torch.float32, "meta")]),
        "add": (wg.add(x, x), [((3, 4, 40), bf, "meta")]),
        "add_rms_norm": (wg.add_rms_norm(x, x, w), [((3, 4, 40), bf, "meta")] * 2),
        "gemm": (wg.gemm(_meta(5, 40), _meta(40, 7)), [((5, 7), bf, "meta")]),
        "int4_linear": (wg.int4_linear(_meta(2, 256), q), [((2, 32), bf, "meta")]),
    }
    for name, (out, expected) in cases.items():
        assert _described(out) == expected, name


def test_meta_inputs_keep_the_argument_errors():
    with pytest.raises(ValueError, match=r"inner dimensions differ"):
        wg.gemm(_meta(5, 40), _meta(41, 7))
    with pytest.raises(TypeError, match="x has dtype int32"):
        wg.softmax(_meta(2, 3, dtype=torch.int32))


def test_meta_autograd_gives_meta_gradients():
    x = _meta(4, 40).requires_grad_()
    wg.softmax(x).sum().backward()
    assert _described(x.grad) == [((4, 40), torch.bfloat16, "meta")]


def test_fake_tensor_mode_eager_calls():
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(4, 40, dtype=torch.bfloat16, device=DEVICE)
        y, h = wg.add_rms_norm(x, x, x[0])
        s = wg.softmax(x)
        q = wg.quantize_int4(torch.randn(32, 256, device=DEVICE))
        o = wg.int4_linear(torch.randn(2, 256, dtype=torch.bfloat16, device=DEVICE), q)
    for t in (y, h, s, q.packed, o):
        assert isinstance(t, FakeTensor)
    assert tuple(o.shape) == (2, 32) and tuple(q.packed.shape) == (32, 128)


def _fresh_python(code):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    src = os.path.join(os.path.dirname(os.path.dirname(__file__)), "src")
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    env["CUDA_VISIBLE_DEVICES"] = ""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    return out.stdout + out.stderr


def test_interpreter_switched_on_after_import_is_honoured():
    """The kernels are built at the first call, so TRITON_INTERPRET=1 set between
    ``import warpgauge`` and that call still takes effect."""
    out = _fresh_python(
        "import os, torch, warpgauge as wg\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "x = torch.randn(2, 8)\n"
        "print('OK', torch.allclose(wg.softmax(x), torch.softmax(x, -1)))\n"
    )
    assert "OK True" in out, out


def test_interpreter_switched_on_after_the_kernels_were_built_is_explained():
    """Set after the first call: the kernels were built for a GPU. The error says what happened
    and what to do instead of Triton's '0 active drivers'."""
    out = _fresh_python(
        "import os, torch, warpgauge as wg\n"
        "try:\n"
        "    wg.softmax(torch.randn(2, 8))\n"
        "except ValueError as e:\n"
        "    print('FIRST', e)\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "try:\n"
        "    wg.softmax(torch.randn(2, 8))\n"
        "except RuntimeError as e:\n"
        "    print('RAISED', e)\n"
    )
    assert "FIRST x is a CPU tensor" in out, out
    assert "RAISED TRITON_INTERPRET=1 was set after warpgauge's kernels were built" in out, out
    assert "before importing triton" in out
