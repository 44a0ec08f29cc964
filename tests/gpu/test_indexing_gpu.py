"""64-bit indexing on the GPU (skipped without CUDA): tensors past 2**31 elements and element
offsets past 2**31 reached through a large stride.

A kernel that computes ``row * stride`` or ``pid * BLOCK`` in int32 wraps around past 2**31 and
reads or writes the wrong memory; these tests put the rows that need 64-bit offsets last and
check exactly those rows (plus the first ones) against the FP64 reference. Rows are independent,
so checking a slice is exact for the row operators; for ``add`` and GEMM the slices checked are
the ones at the far end of the buffers. Each test frees its tensors before the next.
"""

from __future__ import annotations

import gc

import pytest
import torch

import warpgauge as wg
from warpgauge._device import interpreter_enabled
from warpgauge.kernels import rmsnorm as rms_k
from warpgauge.kernels import softmax as softmax_k
from warpgauge.kernels.plans import RowPlan
from warpgauge.reference import (
    add_ref,
    add_rms_norm_ref,
    assert_close,
    gemm_ref,
    row_sum_ref,
    softmax_bwd_ref,
    softmax_ref,
)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or interpreter_enabled(),
        reason="needs a CUDA GPU (and TRITON_INTERPRET unset)",
    ),
]

I32 = 2**31
DT = torch.bfloat16


@pytest.fixture(autouse=True)
def _free():
    yield
    gc.collect()
    torch.cuda.empty_cache()


def _need(gib: float):
    free, _ = torch.cuda.mem_get_info()
    if free < gib * 2**30:
        pytest.skip(f"needs {gib:.0f} GiB of free GPU memory, {free / 2**30:.0f} GiB free")


def _fill(t: torch.Tensor, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(seed)
    flat = t.view(-1)
    step = 1 << 28  # fill in pieces: an FP32 temporary of 2**31 elements would need 8 GiB
    for i in range(0, flat.numel(), step):
        n = min(step, flat.numel() - i)
        flat[i : i + n] = (torch.randn(n, generator=g, device="cuda") * scale).to(t.dtype)
    return t


def _big(shape, seed, scale=1.0):
    return _fill(torch.empty(shape, dtype=DT, device="cuda"), seed, scale)


def _ends(t: torch.Tensor, k: int = 3) -> list[slice]:
    """The first and last k rows: the last ones sit past 2**31 elements."""
    return [slice(0, k), slice(t.shape[0] - k, t.shape[0])]


# (rows, width, plan kind the automatic rule picks on the H200's 132 SMs)
BIG_ROWS = [
    (I32 // 4096 + 64, 4096, "resident"),
    (I32 // 65536 + 2, 65536, "looped"),
    (65, 2**25, "split"),  # 65 rows < 132 SMs, width > RESIDENT_MAX
]


@pytest.mark.parametrize("rows,width,kind", BIG_ROWS, ids=lambda v: str(v))
def test_row_ops_past_2_31_elements(rows, width, kind):
    assert rows * width > I32
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    assert RowPlan.for_shape(rows, width, sm).kind == kind
    _need(6 * rows * width * 2 / 2**30 + 4)
    x = _big((rows, width), 1, 3.0)
    y = wg.softmax(x)
    dy = _big((rows, width), 2)
    dx = softmax_k.softmax_backward(y, dy)
    for s in _ends(x):
        assert_close(y[s], softmax_ref(x[s]), relative=True, msg=f"softmax rows {s}")
        assert_close(dx[s], softmax_bwd_ref(y[s], dy[s]), msg=f"softmax bwd rows {s}")
    del y, dx
    s_out = wg.row_sum(x)
    for s in _ends(x):
        assert_close(s_out[s], row_sum_ref(x[s]), msg=f"row_sum rows {s}")
    r = _big((rows, width), 3)
    w = _big((width,), 4)
    y, h = wg.add_rms_norm(x, r, w)
    for s in _ends(x):
        y_ref, h_ref = add_rms_norm_ref(x[s], r[s], w)
        assert_close(h[s], h_ref, msg=f"h rows {s}")
        assert_close(y[s], y_ref, msg=f"y rows {s}")
    del x, r, y
    dxr, dw = rms_k.add_rms_norm_backward(dy, None, h, w, 1e-6)
    for s in _ends(h):
        h64 = h[s].double().requires_grad_(True)
        rstd = torch.rsqrt(h64.square().mean(-1, keepdim=True) + 1e-6)
        (h64 * rstd * w.double()).backward(dy[s].double())
        assert_close(dxr[s], h64.grad.to(DT), msg=f"rms dx rows {s}")
    # dW sums over all rows, i.e. over the whole 2**31-element h: FP64 reference in row chunks
    dw_ref = torch.zeros(width, dtype=torch.float64, device="cuda")
    step = max(1, 2**26 // width)
    for i in range(0, rows, step):
        h64 = h[i : i + step].double()
        rstd = torch.rsqrt(h64.square().mean(-1, keepdim=True) + 1e-6)
        dw_ref += (dy[i : i + step].double() * h64 * rstd).sum(0)
        del h64
    assert_close(dw, dw_ref.to(DT), msg="rms dw over 2**31 elements")


def test_add_past_2_31_elements():
    n = I32 + 4097
    _need(3 * n * 2 / 2**30 + 2)
    x = _big((n,), 5)
    y = _big((n,), 6)
    out = wg.add(x, y)
    for s in (slice(0, 4096), slice(n - 70000, n)):
        assert_close(out[s], add_ref(x[s], y[s]), msg=f"add {s}")
    # 2-D rows whose flat offsets pass 2**31 as well
    x2, y2 = x[: n - 4097].view(-1, 65536), y[: n - 4097].view(-1, 65536)
    out2 = wg.add(x2, y2)
    assert_close(out2[-2:], add_ref(x2[-2:], y2[-2:]), msg="add rows")


def _strided(rows: int, width: int, stride: int, seed: int) -> torch.Tensor:
    """rows x width whose row r starts at element r * stride of one buffer (last row > 2**31)."""
    buf = torch.empty((rows - 1) * stride + width, dtype=DT, device="cuda")
    view = buf.as_strided((rows, width), (stride, 1))
    g = torch.Generator(device="cuda").manual_seed(seed)
    view.copy_(torch.randn(rows, width, generator=g, device="cuda").to(DT))
    return view


@pytest.mark.parametrize("width", [1000, 40000])  # resident and wide (split/looped) rows
def test_softmax_row_offsets_past_2_31(width):
    stride = I32 // 2 + 64  # row 2 starts at element 2**31 + 128
    _need(3 * stride * 2 / 2**30 + 2)
    x = _strided(3, width, stride, 7)
    assert x.stride(0) * 2 > I32
    y = wg.softmax(x)
    assert_close(y, softmax_ref(x), relative=True, msg="softmax strided rows")
    xr = _strided(3, width, stride, 8)
    w = _big((width,), 9)
    yy, hh = wg.add_rms_norm(x, xr, w)
    y_ref, h_ref = add_rms_norm_ref(x, xr, w)
    assert_close(hh, h_ref, msg="h strided")
    assert_close(yy, y_ref, msg="y strided")
    assert_close(wg.row_sum(x), row_sum_ref(x), msg="row_sum strided")


def test_gemm_operand_offsets_past_2_31():
    M, K, N = 3, 256, 192
    stride = I32 // 2 + 256  # A's row 2 starts past 2**31
    _need(2 * 2 * stride * 2 / 2**30 + 2)
    a = _strided(M, K, stride, 10)
    b_t = _strided(N, K, I32 // (N - 1) + 512, 11)  # B = b_t.T: column n starts at n * stride
    b = b_t.t()
    assert b.stride(1) * (N - 1) > I32
    c = wg.gemm(a, b)
    assert_close(c, gemm_ref(a, b), msg="gemm strided operands")


def test_gemm_past_2_31_elements():
    K, N = 4096, 64
    M = I32 // K + 200
    _need(M * K * 2 / 2**30 + 2)
    a = _big((M, K), 12, 0.5)
    b = _big((K, N), 13, 0.5)
    c = wg.gemm(a, b)
    for s in (slice(0, 64), slice(M - 300, M)):
        assert_close(c[s], gemm_ref(a[s], b), msg=f"gemm rows {s}")
    # dB = A^T @ dC reduces over the 2**31-element operand (the K-unspecialized entry point)
    g = _big((M, N), 14, 0.1)
    aa, bb = a.detach().requires_grad_(True), b.detach().requires_grad_(True)
    wg.gemm(aa, bb).backward(g)
    assert_close(aa.grad[-100:], gemm_ref(g[-100:], b.t()), msg="dA tail rows")
    # dB's FP64 reference would need the whole A in FP64 (34 GB): check it against an FP32 sum
    # of two halves instead, each reduced by cuBLAS (relative to dB's own peak).
    half = M // 2
    db32 = a[:half].t().float() @ g[:half].float() + a[half:].t().float() @ g[half:].float()
    assert_close(bb.grad, db32.to(DT), msg="dB over 2**31-element A")
