"""Hypothesis strategies and FP64 checks shared by the property tests at two scales.

``tests/test_properties_scale.py`` runs them under the interpreter with the ``ci`` profile (small
rows, forced small-block plans so every plan is reached, few examples); ``tests/gpu/
test_properties_gpu.py`` runs them on the GPU with the ``gpu`` profile (rows up to 200, widths up
to 40000 picked by the automatic plan rule, >= 500 examples per operator).

Each example draws: a shape (rows x width from the profile's widths: 1 to wide), a layout
(contiguous, a row slice of a wider tensor, a batched 3-D view), a dtype, a value class (normal,
huge, tiny, all-equal rows, small integers) and special values (NaN, +inf, -inf at random
places; -inf masks for softmax, including fully masked rows), then checks the forward and the
backward against FP64 with the one tolerance table. Widths are drawn from a fixed list (each width
compiles kernels on the GPU); rows, values and strides vary freely.

Magnitudes: "huge" and "tiny" are chosen per dtype so that the FP32 intermediate each contract
names stays in range (1e15 for FP32/BF16: squares and products stay below FP32's 3.4e38; 2e4 for
FP16, near its 65504 limit, so sums overflow to inf exactly as the reference does). Inputs beyond
that (|h| > ~1e19 in RMSNorm, whose FP32 sum of squares overflows) are documented limitations.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

import warpgauge as wg
from warpgauge.kernels import rmsnorm as rms_k
from warpgauge.kernels import row_sum as row_sum_k
from warpgauge.kernels import softmax as softmax_k
from warpgauge.kernels.plans import RowPlan
from warpgauge.reference import (
    add_ref,
    add_rms_norm_ref,
    assert_close,
    gemm_ref,
    int4_linear_ref,
    row_sum_ref,
    softmax_bwd_ref,
    softmax_ref,
)

ALL = (torch.float32, torch.float16, torch.bfloat16)
HALF = (torch.float16, torch.bfloat16)
HUGE = {torch.float32: 1e15, torch.bfloat16: 1e15, torch.float16: 2e4}
TINY = {torch.float32: 1e-15, torch.bfloat16: 1e-15, torch.float16: 1e-3}


@dataclass(frozen=True)
class Profile:
    name: str
    rows: int  # at most this many rows
    widths: tuple[int, ...]
    force_plans: bool  # also force looped/split plans with small blocks (interpreter)
    gemm_dims: tuple[int, ...]
    int4_nk: tuple[tuple[int, int], ...]
    int4_m: tuple[int, ...]


CI = Profile("ci", 5, (1, 2, 7, 64, 127, 300), True, (1, 3, 17, 40), ((48, 256),), (1, 3, 20))
# On the GPU every new width, dtype, stride class or GEMM shape bucket compiles (and for the GEMM
# autotunes) kernels, so the GPU profile draws from few of them and varies everything else.
GPU = Profile("gpu", 200, (1, 127, 4097, 40000), False, (1, 300), ((3001, 1024),), (1, 7, 64))


@st.composite
def row_case(draw, p: Profile, dtypes=ALL):
    """(x, meta): a rows x width tensor (maybe strided, maybe 3-D) with drawn values."""
    rows = draw(st.integers(1, p.rows))
    width = draw(st.sampled_from(p.widths))
    dtype = draw(st.sampled_from(dtypes))
    layout = draw(st.sampled_from(("contiguous", "row-slice", "batched")))
    kind = draw(st.sampled_from(("normal", "normal", "huge", "tiny", "equal", "ints")))
    special = draw(st.sampled_from(("none", "none", "nan", "inf", "-inf", "mixed")))
    seed = draw(st.integers(0, 2**31 - 1))
    plan = None
    if p.force_plans and width >= 64:
        plan = draw(st.sampled_from(("auto", "looped", "split")))
        plan = {
            "auto": None,
            "looped": RowPlan.looped(32),
            "split": RowPlan("split", 16, 1, split=draw(st.integers(2, 5))),
        }[plan]
    return {
        "rows": rows,
        "width": width,
        "dtype": dtype,
        "layout": layout,
        "kind": kind,
        "special": special,
        "seed": seed,
        "plan": plan,
    }


def make(meta, device, seed_offset=0, special=None, kind=None):
    """Build the tensor a row_case describes (a fresh draw of values for each seed_offset)."""
    rows, width, dtype = meta["rows"], meta["width"], meta["dtype"]
    g = torch.Generator(device=device).manual_seed(meta["seed"] + seed_offset)
    f64 = dict(dtype=torch.float64, device=device)
    kind = kind or meta["kind"]
    if kind == "equal":
        x = torch.randn(rows, 1, generator=g, **f64).expand(rows, width).clone()
    elif kind == "ints":
        x = torch.randint(-4, 5, (rows, width), generator=g, device=device).double()
    else:
        x = torch.randn(rows, width, generator=g, **f64)
        x = x * {"normal": 1.0, "huge": HUGE[dtype], "tiny": TINY[dtype]}[kind]
    special = meta["special"] if special is None else special
    if special != "none":
        n = max(1, (rows * width) // 50)
        idx = torch.randint(0, rows * width, (n,), generator=g, device=device)
        vals = {"nan": [float("nan")], "inf": [float("inf")], "-inf": [float("-inf")]}.get(
            special, [float("nan"), float("inf"), float("-inf")]
        )
        choice = torch.randint(0, len(vals), (n,), generator=g, device=device)
        x.view(-1)[idx] = torch.tensor(vals, **f64)[choice]
    x = x.to(dtype)
    layout = meta["layout"]
    if layout == "row-slice":
        base = torch.full((rows, width + 5), float("nan"), dtype=dtype, device=device)
        base[:, 3 : 3 + width] = x
        return base[:, 3 : 3 + width]
    if layout == "batched" and rows >= 2 and rows % 2 == 0:
        base = torch.full((2, rows // 2, width + 3), float("nan"), dtype=dtype, device=device)
        base[..., 1 : 1 + width] = x.view(2, rows // 2, width)
        return base[..., 1 : 1 + width]
    return x


def _rows(t):
    return t.reshape(-1, t.shape[-1])


# ------------------------------------------------------------------------------------ checks


def check_add(meta, device):
    x = make(meta, device)
    y = make(meta, device, 1, special="none")
    xs = x.detach().requires_grad_(True)
    ys = y.detach().requires_grad_(True)
    out = wg.add(xs, ys)
    assert_close(out, add_ref(x, y), msg=f"add {meta}")
    g = make(meta, device, 2, special=meta["special"], kind="normal")
    out.backward(g)
    # the gradient passes through unchanged (NaN and inf included): bit-exact
    assert torch.equal(torch.nan_to_num(xs.grad, 7.0), torch.nan_to_num(g.contiguous(), 7.0))
    assert torch.equal(torch.nan_to_num(ys.grad, 7.0), torch.nan_to_num(g.contiguous(), 7.0))


def check_row_sum(meta, device):
    x = make(meta, device)
    plan = meta["plan"]
    if plan is None:
        xs = x.detach().requires_grad_(True)
        s = wg.row_sum(xs)
        g = make({**meta, "width": 1}, device, 3, kind="normal", special="none").reshape(s.shape)
        s.backward(g)
        assert torch.equal(xs.grad, g.unsqueeze(-1).expand(x.shape).to(xs.grad.dtype))
    else:
        s = row_sum_k.row_sum(x, plan=plan)
    assert_close(s, row_sum_ref(x), msg=f"row_sum {meta}")
    s32 = (
        wg.row_sum(x, torch.float32) if plan is None else row_sum_k.row_sum(x, torch.float32, plan)
    )
    assert_close(s32, row_sum_ref(x, torch.float32), msg=f"row_sum fp32 out {meta}")


def check_softmax(meta, device, mask: str):
    x = make(meta, device)
    if mask != "none":
        x = x.clone()
        r2 = _rows(x)
        if mask in ("prefix", "both"):
            r2[0, : max(1, (3 * meta["width"]) // 4)] = float("-inf")
        if mask in ("full", "both") and r2.shape[0] > 1:
            r2[-1] = float("-inf")
    plan = meta["plan"]
    y = wg.softmax(x) if plan is None else softmax_k.softmax(x, plan=plan)
    assert_close(y, softmax_ref(x), relative=True, msg=f"softmax mask={mask} {meta}")
    # backward from the kernel's own (rounded) output, as the op's autograd does
    dy = make(
        meta, device, 4, kind="normal", special="none" if meta["special"] == "none" else "nan"
    )
    yc = y.reshape(-1, meta["width"])
    dyc = _rows(dy).contiguous()
    dx = softmax_k.softmax_backward(yc, dyc, plan=plan)
    assert_close(dx, softmax_bwd_ref(yc, dyc), msg=f"softmax backward {meta}")
    if plan is None and meta["special"] == "none" and mask == "none":
        xs = x.detach().requires_grad_(True)
        wg.softmax(xs).backward(dy)
        # bitwise, NaN matching NaN ("huge" FP16 inputs overflow to inf, giving NaN rows)
        g = _rows(xs.grad)
        same = (g == dx) | (torch.isnan(g) & torch.isnan(dx))
        assert bool(same.all()), "autograd and the backward launcher differ"


def _rms_bwd_ref(h, w, dy, dh, eps):
    h64 = _rows(h).double().requires_grad_(True)
    w64 = w.double().requires_grad_(True)
    rstd = torch.rsqrt(h64.square().mean(-1, keepdim=True) + eps)
    (h64 * rstd * w64).backward(_rows(dy).double())
    dx = h64.grad + (_rows(dh).double() if dh is not None else 0.0)
    return dx.to(h.dtype), w64.grad.to(w.dtype)


def check_add_rms_norm(meta, device, eps: float, with_dh: bool):
    x = make(meta, device)
    r = make(meta, device, 5, special="none")
    w = make({**meta, "rows": 1, "layout": "contiguous", "special": "none"}, device, 6).view(-1)
    plan = meta["plan"]
    y, h = (
        wg.add_rms_norm(x, r, w, eps)
        if plan is None
        else rms_k.add_rms_norm(x, r, w, eps, plan=plan)
    )
    y_ref, h_ref = add_rms_norm_ref(x, r, w, eps)
    assert_close(h, h_ref, msg=f"h {meta}")
    assert_close(y, y_ref, msg=f"y {meta}")
    # backward: finite upstream gradients through finite h; specials go into dy when drawn
    hf = h if meta["special"] == "none" else make(meta, device, 7, special="none", kind="normal")
    dy = make(meta, device, 8, special="none", kind="normal")
    dh = make(meta, device, 9, special="none", kind="normal") if with_dh else None
    h2, dy2 = _rows(hf).contiguous(), _rows(dy).contiguous()
    dh2 = _rows(dh).contiguous() if dh is not None else None
    dx, dw = rms_k.add_rms_norm_backward(dy2, dh2, h2, w, eps, plan=plan)
    dx_ref, dw_ref = _rms_bwd_ref(h2, w, dy2, dh2, eps)
    if meta["width"] >= 8:
        assert_close(dx, dx_ref, msg=f"rms dx {meta}")
    else:
        # Narrow rows: dx = rstd*w*dy - rstd^3*h*sum(h*w*dy)/N cancels almost exactly (at N = 1 the
        # result is ~eps/h^2 of either term), so the error is bounded by FP32 rounding of the
        # terms, not of the result. On the GPU tl.sqrt and "/" are the approximate PTX forms
        # (<= 2 ulp each): rstd carries <= 3 ulp, rstd^2 * c * h <= 9, the final * rstd <= 12; 16
        # ulp of the terms, plus one ulp of the output dtype at the result (subnormals included).
        h64, w64, dy64 = h2.double(), w.double(), dy2.double()
        rstd = torch.rsqrt(h64.square().mean(-1, keepdim=True) + eps)
        t1 = (rstd * w64 * dy64).abs()
        t2 = (rstd**3 * h64 * (h64 * w64 * dy64).sum(-1, keepdim=True) / h64.shape[-1]).abs()
        fi = torch.finfo(meta["dtype"])
        ref64 = dx_ref.double()
        bound = 16 * 2.0**-23 * (t1 + t2) + fi.eps * ref64.abs() + fi.smallest_normal * fi.eps
        err = (dx.double() - ref64).abs()
        # NaN matches NaN and equal infinities match (h overflows to inf for "huge" FP16 rows)
        same = (dx.double() == ref64) | (torch.isnan(dx.double()) & torch.isnan(ref64))
        err = torch.where(same, torch.zeros_like(err), err)
        bound = torch.where(same, torch.ones_like(bound), bound)
        i = int((err / bound).argmax())
        assert bool((err <= bound).all()), (
            f"rms dx (narrow) {meta}: worst element err {err.view(-1)[i]:.3g} > bound "
            f"{bound.view(-1)[i]:.3g} (ref {ref64.view(-1)[i]:.3g}, got {dx.view(-1)[i]:.3g})"
        )
    assert_close(dw, dw_ref, msg=f"rms dw {meta}")


@st.composite
def gemm_case(draw, p: Profile):
    M, N, K = (draw(st.sampled_from(p.gemm_dims)) for _ in range(3))
    return {
        "M": M,
        "N": N,
        "K": K,
        "dtype": draw(st.sampled_from(HALF)),
        "a_layout": draw(st.sampled_from(("n", "t", "slice"))),
        "b_layout": draw(st.sampled_from(("n", "t"))),
        "kind": draw(st.sampled_from(("normal", "normal", "huge", "tiny", "ints"))),
        "special": draw(st.sampled_from(("none", "none", "none", "nan", "inf", "mixed"))),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


def _operand(rows, cols, layout, meta, device, off, special):
    m = {**meta, "rows": rows, "width": cols, "layout": "contiguous"}
    if meta["kind"] == "huge":  # products of two huge operands: keep them inside FP32
        m["kind"] = "normal"
    if layout == "t":
        return make({**m, "rows": cols, "width": rows}, device, off, special=special).t()
    t = make(m, device, off, special=special)
    if layout == "slice":
        base = torch.full((rows, cols + 9), float("nan"), dtype=t.dtype, device=device)
        base[:, 4 : 4 + cols] = t
        return base[:, 4 : 4 + cols]
    return t


def check_gemm(meta, device):
    M, N, K = meta["M"], meta["N"], meta["K"]
    a = _operand(M, K, meta["a_layout"], meta, device, 0, meta["special"])
    b = _operand(K, N, meta["b_layout"], meta, device, 1, "none")
    if meta["kind"] == "huge":  # one huge operand: products and sums stay inside FP32
        a = a * HUGE[meta["dtype"]]
    aa, bb = a.detach().requires_grad_(True), b.detach().requires_grad_(True)
    c = wg.gemm(aa, bb)
    assert_close(c, gemm_ref(a, b), msg=f"gemm {meta}")
    g = _operand(M, N, "n", {**meta, "kind": "normal"}, device, 2, "none")
    c.backward(g)
    assert_close(aa.grad, gemm_ref(g, b.t()), msg=f"gemm dA {meta}")
    assert_close(bb.grad, gemm_ref(a.t(), g), msg=f"gemm dB {meta}")


@st.composite
def int4_case(draw, p: Profile):
    N, K = draw(st.sampled_from(p.int4_nk))
    return {
        "M": draw(st.sampled_from(p.int4_m)),
        "N": N,
        "K": K,
        "dtype": draw(st.sampled_from(HALF)),
        "x_layout": draw(st.sampled_from(("n", "slice"))),
        "kind": draw(st.sampled_from(("normal", "normal", "huge", "tiny", "ints"))),
        "w_kind": draw(st.sampled_from(("normal", "zero-groups", "equal"))),
        "special": draw(st.sampled_from(("none", "none", "nan", "inf", "mixed"))),
        "seed": draw(st.integers(0, 2**31 - 1)),
    }


_INT4_CACHE: dict = {}


def check_int4(meta, device):
    M, N, K, dtype = meta["M"], meta["N"], meta["K"], meta["dtype"]
    key = (N, K, dtype, meta["w_kind"], device)
    if key not in _INT4_CACHE:
        g = torch.Generator().manual_seed(N + K)
        w = torch.randn(N, K, generator=g) * 0.05
        if meta["w_kind"] == "zero-groups":
            w[:, :128] = 0.0  # a zero group: scale 0, must dequantize to exact zeros
        elif meta["w_kind"] == "equal":
            w[:] = 0.01
        qw = wg.quantize_int4(w.to(dtype).to(device))
        _INT4_CACHE[key] = (qw, qw.dequantize(torch.float32))
    qw, w32 = _INT4_CACHE[key]
    x = _operand(M, K, meta["x_layout"], meta, device, 0, meta["special"])
    if meta["kind"] == "huge":
        x = x * HUGE[dtype]
    xs = x.detach().requires_grad_(True)
    y = wg.int4_linear(xs, qw)
    assert_close(y, int4_linear_ref(x, w32), msg=f"int4 {meta}")
    g = _operand(M, N, "n", {**meta, "kind": "normal"}, device, 3, "none")
    y.backward(g)
    assert_close(xs.grad, (g.double() @ w32.double()).to(dtype), msg=f"int4 dx {meta}")
