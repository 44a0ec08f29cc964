"""Softmax over the last dim: FP32 math, one cast to the input dtype; forward and backward.

Contract: y = exp(x - max) / sum(exp(x - max)) per row. A chunk or lane whose values so far are
all -inf shifts by 0 instead of -inf (so exp(-inf - -inf) = NaN never happens) and keeps a zero
sum; a row that is entirely -inf has sum 0 and is written as all zeros (documented choice). A
NaN (or +inf) in a row makes its sum NaN and the whole row NaN, as in torch.softmax: bad logits
are never hidden behind valid-looking zeros.

I/O per call: forward reads x once and writes y once (resident plan; looped and split plans read
x twice, the second read usually hitting L2 for split chunks): 2 * rows * width * esize bytes.
Backward reads y and dy and writes dx: 3 * rows * width * esize.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._checks import check_tensor, rows_view
from .._device import device_info, resident_per_sm
from ._launch import empty, empty_rows_like, launch, next_pow2
from ._rows import (
    align_for,
    body_span,
    coop_slots,
    coop_spin,
    edge_index,
    plan_for,
    stride8,
)
from .plans import RowPlan
from .softmax_coop import (
    _merge,
    _softmax_coop,
    _softmax_coop_loop,
    _softmax_coop_pf,
    exp_scaled,
    reg_cap,
    use_asm,
)
from .softmax_coop import launch_args as coop_loop_args
from .work import Work, esize


def work(rows: int, width: int, dtype: torch.dtype) -> Work:
    # read x + write y; ~5 flops/element (max, subtract, exp, sum, scale)
    return Work(bytes=2 * rows * width * esize(dtype), flops=5 * rows * width)


# ------------------------------------------------------------------------------------ forward


@triton.jit
def _online_update(m, s, x):
    """Fold a block into the running (max, sum) scalars: one exp per element plus one per
    block (a per-lane running max would need two per element). -inf-safe: while everything
    seen is -inf the shift is 0, so exp(-inf - -inf) = NaN never happens."""
    m_new = tl.maximum(m, tl.max(x, 0))
    shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), 0)
    return m_new, s


@triton.jit(do_not_specialize=["n_rows"])
def _softmax_resident(
    x_ptr,
    y_ptr,
    x_stride,
    n_rows,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
    ALIGN: tl.constexpr,
    S8: tl.constexpr,
):
    # I/O: read ROWS rows of x once, write ROWS rows of y once; the rows stay in registers.
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = (rows < n_rows)[:, None]
    if S8:
        x_stride = x_stride // 8 * 8  # == x_stride (S8); Triton infers divisibility by 8
    xb1 = rows * x_stride
    xb = xb1[:, None]
    yb = (rows * N)[:, None]
    offs = tl.arange(0, BLOCK)[None, :]
    if ALIGN:  # x_stride == N (launcher): x and y rows share their head
        head, start, blen = body_span(xb1, N)
        head, start, blen = head[:, None], start[:, None], blen[:, None]
        bm = rmask & (offs < blen)
        x = tl.load(x_ptr + start + offs, mask=bm, other=float("-inf")).to(tl.float32)
        ecol, em = edge_index(head, blen, N)
        em = em & rmask
        xe = tl.load(x_ptr + xb + ecol, mask=em, other=float("-inf")).to(tl.float32)
        m = tl.maximum(tl.max(x, 1), tl.max(xe, 1))
        shift = tl.where(m == float("-inf"), 0.0, m)[:, None]
        e = tl.exp(x - shift)
        ee = tl.exp(xe - shift)
        s = tl.sum(e, 1) + tl.sum(ee, 1)
        inv = tl.where(s == 0, 0.0, 1.0 / s)[:, None]
        tl.store(y_ptr + start + offs, (e * inv).to(y_ptr.dtype.element_ty), mask=bm)
        tl.store(y_ptr + xb + ecol, (ee * inv).to(y_ptr.dtype.element_ty), mask=em)
    else:
        mask = rmask & (offs < N)
        x = tl.load(x_ptr + xb + offs, mask=mask, other=float("-inf")).to(tl.float32)
        m = tl.max(x, 1)
        shift = tl.where(m == float("-inf"), 0.0, m)[:, None]
        e = tl.exp(x - shift)
        s = tl.sum(e, 1)
        inv = tl.where(s == 0, 0.0, 1.0 / s)[:, None]
        tl.store(y_ptr + yb + offs, (e * inv).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n_rows"])
def _softmax_resident_pf(
    x_ptr,
    y_ptr,
    x_stride,
    n_rows,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    ALIGN: tl.constexpr,
    S8: tl.constexpr,
    FAST: tl.constexpr = False,
    ASM: tl.constexpr = False,
):
    # Persistent resident plan: rows pid, pid + programs, ...; the next row is loaded before the
    # current one is computed and written, so memory stays busy while a program computes (one
    # program per SM holds a 16k-32k row: nothing else would overlap its exp and reductions).
    # I/O: read x once, write y once. (Masks use tl.where(ok, limit, 0), not "& ok": the
    # interpreter mishandles "&" with a 0-d mask.)
    if S8:
        x_stride = x_stride // 8 * 8  # == x_stride (S8); Triton infers divisibility by 8
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    offs = tl.arange(0, BLOCK)
    row = pid.to(tl.int64)
    ok = row < n_rows
    xb = row * x_stride
    if ALIGN:
        head, start, blen = body_span(xb, N)
        ecol, em = edge_index(head, blen, N)
        x_n = tl.load(x_ptr + start + offs, mask=offs < tl.where(ok, blen, 0), other=float("-inf"))
        xe_n = tl.load(
            x_ptr + xb + ecol, mask=em & (ecol < tl.where(ok, N, 0)), other=float("-inf")
        )
    else:
        x_n = tl.load(x_ptr + xb + offs, mask=offs < tl.where(ok, N, 0), other=float("-inf"))
        xe_n = x_n
    for _ in range(0, tl.cdiv(n_rows - pid, nprog)):
        x = x_n.to(tl.float32)
        xe = xe_n.to(tl.float32)
        cur = row
        row += nprog
        ok = row < n_rows
        xb = row * x_stride
        if ALIGN:
            head, start, blen = body_span(xb, N)
            ecol, em = edge_index(head, blen, N)
            x_n = tl.load(
                x_ptr + start + offs, mask=offs < tl.where(ok, blen, 0), other=float("-inf")
            )
            xe_n = tl.load(
                x_ptr + xb + ecol, mask=em & (ecol < tl.where(ok, N, 0)), other=float("-inf")
            )
            cb = cur * N
            head, start, blen = body_span(cb, N)
            ecol, em = edge_index(head, blen, N)
            m = tl.maximum(tl.max(x, 0), tl.max(xe, 0))
            shift = tl.where(m == float("-inf"), 0.0, m)
            e, unit = exp_scaled(x - shift, FAST, ASM)
            ee, unit = exp_scaled(xe - shift, FAST, ASM)
            s = (tl.sum(e, 0) + tl.sum(ee, 0)) * unit
            inv = tl.where(s == 0, 0.0, 1.0 / s) * unit
            tl.store(y_ptr + start + offs, (e * inv).to(y_ptr.dtype.element_ty), mask=offs < blen)
            tl.store(y_ptr + cb + ecol, (ee * inv).to(y_ptr.dtype.element_ty), mask=em)
        else:
            x_n = tl.load(x_ptr + xb + offs, mask=offs < tl.where(ok, N, 0), other=float("-inf"))
            m = tl.max(x, 0)
            shift = tl.where(m == float("-inf"), 0.0, m)
            e, unit = exp_scaled(x - shift, FAST, ASM)
            s = tl.sum(e, 0) * unit
            inv = tl.where(s == 0, 0.0, 1.0 / s) * unit
            y = (e * inv).to(y_ptr.dtype.element_ty)
            tl.store(y_ptr + cur * N + offs, y, mask=offs < N)


@triton.jit(do_not_specialize=["n_rows"])
def _softmax_looped(
    x_ptr,
    y_ptr,
    x_stride,
    n_rows,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    ALIGN: tl.constexpr,
    S8: tl.constexpr,
    EV_KEEP: tl.constexpr,
    EV_DROP: tl.constexpr,
    LANE: tl.constexpr,
    STAGES: tl.constexpr = None,
):
    # I/O: read x twice (the second pass hits L2 when the grid is persistent and few rows are in
    # flight), write y once. Rows pid, pid + programs, ... (a persistent grid when programs <
    # rows; one program per row otherwise).
    if S8:
        x_stride = x_stride // 8 * 8  # == x_stride (S8); Triton infers divisibility by 8
    offs = tl.arange(0, BLOCK)
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    first = pid.to(tl.int64)
    for i in range(0, tl.cdiv(n_rows - pid, nprog)):
        row = first + i * nprog
        xb = row * x_stride
        if ALIGN:
            head, start, blen = body_span(xb, N)
            ecol, em = edge_index(head, blen, N)
            xe = tl.load(x_ptr + xb + ecol, mask=em, other=float("-inf")).to(tl.float32)
            m = tl.max(xe, 0)
            shift = tl.where(m == float("-inf"), 0.0, m)
            s = tl.sum(tl.exp(xe - shift), 0)
            ystart = start
        else:
            start = xb
            blen = N
            ystart = row * N
            m = tl.full([], float("-inf"), tl.float32)
            s = tl.zeros([], tl.float32)
        if LANE:  # per-lane running (max, sum): two exps per element, no reduction per chunk
            mv = tl.full([BLOCK], float("-inf"), tl.float32)
            sv = tl.zeros([BLOCK], tl.float32)
            for c in tl.range(0, blen, BLOCK, num_stages=STAGES):
                idx = c + offs
                x = tl.load(
                    x_ptr + start + idx,
                    mask=idx < blen,
                    other=float("-inf"),
                    eviction_policy=EV_KEEP,
                ).to(tl.float32)
                mn = tl.maximum(mv, x)
                sh = tl.where(mn == float("-inf"), 0.0, mn)
                sv = sv * tl.exp(mv - sh) + tl.exp(x - sh)
                mv = mn
            mt = tl.maximum(tl.max(mv, 0), m)
            sh = tl.where(mt == float("-inf"), 0.0, mt)
            s = tl.sum(sv * tl.exp(mv - sh), 0) + s * tl.exp(m - sh)
            m = mt
        else:
            for c in tl.range(0, blen, BLOCK, num_stages=STAGES):
                idx = c + offs
                x = tl.load(
                    x_ptr + start + idx,
                    mask=idx < blen,
                    other=float("-inf"),
                    eviction_policy=EV_KEEP,
                )
                m, s = _online_update(m, s, x.to(tl.float32))
        shift = tl.where(m == float("-inf"), 0.0, m)
        inv = tl.where(s == 0, 0.0, 1.0 / s)
        for c in tl.range(0, blen, BLOCK, num_stages=STAGES):
            idx = c + offs
            x = tl.load(
                x_ptr + start + idx, mask=idx < blen, other=float("-inf"), eviction_policy=EV_DROP
            )
            y = (tl.exp(x.to(tl.float32) - shift) * inv).to(y_ptr.dtype.element_ty)
            tl.store(y_ptr + ystart + idx, y, mask=idx < blen, eviction_policy=EV_DROP)
        if ALIGN:
            tl.store(
                y_ptr + xb + ecol, (tl.exp(xe - shift) * inv).to(y_ptr.dtype.element_ty), mask=em
            )


@triton.jit(do_not_specialize=["chunk", "n_chunks"])
def _softmax_split_stats(
    x_ptr, stats_ptr, x_stride, chunk, n_chunks, N: tl.constexpr, BLOCK: tl.constexpr
):
    # I/O: read one chunk of x; write 2 floats (max, sum) per chunk.
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    xr = x_ptr + row * x_stride
    offs = tl.arange(0, BLOCK)
    m = tl.full([], float("-inf"), tl.float32)
    s = tl.zeros([], tl.float32)
    nb = chunk // BLOCK  # chunk is a multiple of BLOCK: lo keeps its divisibility (vectors)
    lo = c * nb * BLOCK
    for start in range(lo, lo + nb * BLOCK, BLOCK):
        idx = start + offs
        x = tl.load(xr + idx, mask=idx < N, other=float("-inf")).to(tl.float32)
        m, s = _online_update(m, s, x)
    out = stats_ptr + (row * n_chunks + c) * 2
    tl.store(out, m)
    tl.store(out + 1, s)


@triton.jit(do_not_specialize=["chunk", "n_chunks"])
def _softmax_split_write(
    x_ptr,
    y_ptr,
    stats_ptr,
    x_stride,
    chunk,
    n_chunks,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    SPLIT_PAD: tl.constexpr,
):
    # I/O: read the row's chunk statistics and one chunk of x; write one chunk of y.
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    k = tl.arange(0, SPLIT_PAD)
    st = stats_ptr + (row * n_chunks + k) * 2
    m_c = tl.load(st, mask=k < n_chunks, other=float("-inf"))
    s_c = tl.load(st + 1, mask=k < n_chunks, other=0.0)
    shift, inv = _merge(m_c, s_c)
    xr = x_ptr + row * x_stride
    yr = y_ptr + row * N
    offs = tl.arange(0, BLOCK)
    nb = chunk // BLOCK  # chunk is a multiple of BLOCK: lo keeps its divisibility (vectors)
    lo = c * nb * BLOCK
    for start in range(lo, lo + nb * BLOCK, BLOCK):
        idx = start + offs
        x = tl.load(xr + idx, mask=idx < N, other=float("-inf")).to(tl.float32)
        tl.store(yr + idx, (tl.exp(x - shift) * inv).to(y_ptr.dtype.element_ty), mask=idx < N)


_PF_FIT: dict = {}  # (device, specialization) -> programs of _softmax_coop_pf an SM holds


def _pf_fit(args, meta, device) -> int:
    """Programs per SM of ``_softmax_coop_pf`` (as compiled for these arguments) that are all
    resident at once, from its registers and shared memory (``_device.resident_per_sm``):
    the persistent grid never exceeds it, since a row whose programs are not all resident
    waits out the poll limit (in practice lanes past the resident ones run as later waves:
    correct, slower). Compiled here once per specialization (``warmup``); unbounded where
    nothing is compiled (the interpreter, tracing, fake or meta tensors)."""
    from torch._subclasses.fake_tensor import FakeTensor

    x = args[0]
    if device.type != "cuda" or torch.compiler.is_compiling() or x.is_meta:
        return 1 << 30
    if isinstance(x, FakeTensor):
        return 1 << 30
    key = (device.index, tuple(sorted(meta.items())), args[0].dtype, args[0].data_ptr() % 16,
           args[3] % 16)  # fmt: skip
    fit = _PF_FIT.get(key)
    if fit is None:
        k = _softmax_coop_pf.warmup(*args, grid=(1,), **meta)
        init = getattr(k, "_init_handles", None)  # loads the binary: registers known from here
        if callable(init):
            init()
        regs, shared = (
            getattr(k, "n_regs", None),
            getattr(getattr(k, "metadata", None), "shared", 0),
        )
        if not isinstance(regs, int):
            return 1 << 30
        fit = _PF_FIT[key] = resident_per_sm(device, regs, meta["num_warps"], shared or 0)
    return fit


def softmax(x: torch.Tensor, plan: RowPlan | None = None) -> torch.Tensor:
    """Softmax over the last dim of ``x`` (N-D, rows may be strided). Returns a new tensor."""
    check_tensor("x", x)
    x2, stride = rows_view("x", x)
    y = empty_rows_like(x)
    rows, n = x2.shape
    if rows == 0:
        return y
    p = plan_for(rows, n, x.device, plan, "softmax", x.element_size())
    align = p.align and align_for(n, stride, n)
    s8 = stride8(stride)
    if p.kind == "resident" and p.programs_per_sm and p.rows == 1:
        grid = (max(1, min(rows, p.programs_per_sm * device_info(x.device).sm_count)),)
        launch(_softmax_resident_pf, grid, x2, y, stride, rows,
            N=n, BLOCK=p.resident_block(n, align), ALIGN=align, S8=s8, FAST=p.fast_exp,
            ASM=p.fast_exp and use_asm(), num_warps=p.num_warps,
        )  # fmt: skip
    elif p.kind == "resident":
        grid = (p.programs(rows, 1),)
        block = p.resident_block(n, align)
        launch(_softmax_resident, grid, x2, y, stride, rows,
            N=n, BLOCK=block, ROWS=p.rows, ALIGN=align, S8=s8, num_warps=p.num_warps,
        )  # fmt: skip
    elif p.kind == "coop" and p.sub:
        g = p.coop_chunks(n, align)
        launch(_softmax_coop_loop, (rows * g,), x2, y, coop_slots(rows, g, x.device), stride,
            rows, coop_spin(), N=n, G=g, GP=next_pow2(g), ALIGN=align, S8=s8,
            num_warps=p.num_warps, **coop_loop_args(p), **reg_cap(p),
        )  # fmt: skip
    elif p.kind == "coop" and p.programs_per_sm:
        g = p.coop_chunks(n, align)
        args = (x2, y, coop_slots(rows, g, x.device), stride, rows, coop_spin())
        meta = dict(N=n, BLOCK=p.block, G=g, GP=next_pow2(g), ALIGN=align, S8=s8,
                    FAST=p.fast_exp, ASM=p.fast_exp and use_asm(),
                    DEPTH=2 if p.stages >= 2 else 1, num_warps=p.num_warps, **reg_cap(p))  # fmt: skip
        per_sm = min(p.programs_per_sm, _pf_fit(args, meta, x.device))
        lanes = min(rows, max(1, per_sm * device_info(x.device).sm_count // g))
        launch(_softmax_coop_pf, (lanes * g,), *args, **meta)
    elif p.kind == "coop":
        g = p.coop_chunks(n, align)
        launch(_softmax_coop, (rows * g,), x2, y, coop_slots(rows, g, x.device), stride, rows,
            coop_spin(), N=n, BLOCK=p.block, G=g, GP=next_pow2(g), ALIGN=align,
            S8=s8, FAST=p.fast_exp, ASM=p.fast_exp and use_asm(), HOLD=p.hold_x,
            NAP=p.nap if use_asm() else 0, num_warps=p.num_warps, **reg_cap(p),
        )  # fmt: skip
    elif p.kind == "looped":
        grid = (p.programs(rows, device_info(x.device).sm_count),)
        keep, drop = ("evict_last", "evict_first") if p.evict else ("", "")
        launch(_softmax_looped, grid, x2, y, stride, rows,
            N=n, BLOCK=p.block, ALIGN=align, S8=s8, EV_KEEP=keep, EV_DROP=drop,
            LANE=p.lane_stats, STAGES=p.stages or None, num_warps=p.num_warps,
        )  # fmt: skip
    else:
        chunk, n_chunks = p.chunk(n), p.n_chunks(n)
        stats = empty((rows, n_chunks, 2), torch.float32, x.device)
        launch(
            _softmax_split_stats,
            (rows, n_chunks),
            x2,
            stats,
            stride,
            chunk,
            n_chunks,
            N=n,
            BLOCK=p.block,
            num_warps=p.num_warps,
        )
        launch(
            _softmax_split_write,
            (rows, n_chunks),
            x2,
            y,
            stats,
            stride,
            chunk,
            n_chunks,
            N=n,
            BLOCK=p.block,
            SPLIT_PAD=p.split_pad(n),
            num_warps=p.num_warps,
        )
    return y


from .softmax_backward import softmax_backward  # noqa: E402  (re-export)

__all__ = ["work", "softmax", "softmax_backward"]
