"""The flat add kernel's two bodies: full blocks (unmasked, vector loads) and the partial last
block (masked), at sizes that give only full blocks, only a partial one, and both."""

from __future__ import annotations

import pytest
import torch

import warpgauge as wg
from warpgauge.kernels import add as add_kernel

B = add_kernel.BLOCK


S = add_kernel.SMALL_BLOCK
N = add_kernel.SMALL_N


# sizes past SMALL_N take BLOCK-wide programs; up to it, SMALL_BLOCK-wide ones
@pytest.mark.parametrize(
    "n", [B, 2 * B, 2 * B + 1, 3 * B - 7, B - 1, N + 1, 1, S - 1, S, S + 1, 257, N - 3, N]
)
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_flat_add_full_and_partial_blocks(n, dtype):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(n, generator=g).to(dtype)
    y = torch.randn(n, generator=g).to(dtype)
    out = wg.add(x, y)
    ref = (x.double() + y.double()).to(dtype)  # one rounding of the exact sum
    assert out.shape == x.shape and not out.isnan().any()
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
