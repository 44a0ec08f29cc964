"""warpgauge.nn modules on the GPU: eager against FP64 and torch.compile(fullgraph=True) against
eager, forward and backward. (Inductor may autotune the GEMM to another tile, which changes the
FP32 summation order inside a dot, so compiled and eager agree to the tolerance table, not bits.)"""

from __future__ import annotations

import pytest
import torch

import warpgauge.nn as wgnn
from warpgauge._device import interpreter_enabled
from warpgauge.reference import add_rms_norm_ref, assert_close

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or interpreter_enabled(),
        reason="needs a CUDA GPU (and TRITON_INTERPRET unset)",
    ),
]


def _rand(*shape, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(torch.bfloat16)


class Block(torch.nn.Module):
    def __init__(self, d=1024):
        super().__init__()
        self.norm = wgnn.RMSNorm(d)
        self.up = wgnn.Linear(d, 4 * d, dtype=torch.bfloat16)
        self.down = wgnn.Linear(4 * d, d, bias=False, dtype=torch.bfloat16)
        self.soft = wgnn.Softmax()

    def forward(self, x, r):
        y, h = self.norm(x, r)
        return self.soft(self.down(self.up(y))) + h


def test_block_compiles_fullgraph_and_matches_eager():
    torch.manual_seed(0)
    m = Block().cuda().to(torch.bfloat16)
    x, r = _rand(3, 77, 1024, seed=1), _rand(3, 77, 1024, seed=2)
    eager = m(x, r)
    compiled = torch.compile(m, fullgraph=True)
    assert_close(compiled(x, r), eager, msg="compiled forward")
    xs = x.detach().requires_grad_(True)
    compiled(xs, r).float().sum().backward()
    g_compiled = xs.grad.clone()
    xs.grad = None
    m(xs, r).float().sum().backward()
    assert_close(g_compiled, xs.grad, msg="compiled backward")
    y, h = m.norm(x, r)
    y_ref, h_ref = add_rms_norm_ref(x, r, m.norm.weight)
    assert_close(y, y_ref)


def test_int4_linear_decode_compiles_fullgraph():
    lin = torch.nn.Linear(4096, 4096, dtype=torch.bfloat16, device="cuda")
    q = wgnn.Int4Linear.from_linear(lin)
    x = _rand(1, 4096, seed=3)
    eager = q(x)
    compiled = torch.compile(q, fullgraph=True, mode="reduce-overhead")
    for _ in range(3):  # warm-up and CUDA-graph capture, then replay
        out = compiled(x)
    assert torch.equal(out, eager)  # no autotuning on the INT4 path: the same kernel and plan
