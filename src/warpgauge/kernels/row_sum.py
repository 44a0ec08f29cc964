"""Sum over the last dim with FP32 accumulation; result in ``out_dtype`` (default: x.dtype).

I/O: read x once, write one value per row: rows * width * esize(x) + rows * esize(out) bytes.
The split plan writes one FP32 partial per chunk and a finish kernel adds a row's partials in a
fixed order (deterministic, no atomics).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._checks import check_out_dtype, check_tensor, rows_view
from .._device import device_info
from ._launch import empty, launch, next_pow2
from ._rows import (
    align_for,
    body_span,
    coop_slots,
    coop_spin,
    edge_index,
    pack2,
    plan_for,
    stride8,
    unpack2,
    wait_slots,
)
from .plans import RowPlan
from .work import Work, esize


def work(rows: int, width: int, dtype: torch.dtype, out_dtype: torch.dtype | None = None) -> Work:
    return Work(
        bytes=rows * width * esize(dtype) + rows * esize(out_dtype or dtype), flops=rows * width
    )


@triton.jit(do_not_specialize=["n_rows"])
def _row_sum_resident(
    x_ptr,
    y_ptr,
    x_stride,
    n_rows,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
    ALIGN: tl.constexpr,
    S8: tl.constexpr,
    EV: tl.constexpr = "",
):
    # I/O: read ROWS rows of x, write ROWS sums.
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rm = rows < n_rows
    rmask = rm[:, None]
    if S8:
        x_stride = x_stride // 8 * 8  # == x_stride (S8); Triton infers divisibility by 8
    xb1 = rows * x_stride
    offs = tl.arange(0, BLOCK)[None, :]
    if ALIGN:
        head, start, blen = body_span(xb1, N)
        head, start, blen = head[:, None], start[:, None], blen[:, None]
        x = tl.load(x_ptr + start + offs, mask=rmask & (offs < blen), other=0.0,
                    eviction_policy=EV).to(tl.float32)  # fmt: skip
        ecol, em = edge_index(head, blen, N)
        xe = tl.load(x_ptr + xb1[:, None] + ecol, mask=em & rmask, other=0.0,
                     eviction_policy=EV).to(tl.float32)  # fmt: skip
        total = tl.sum(x, 1) + tl.sum(xe, 1)
    else:
        x = tl.load(x_ptr + xb1[:, None] + offs, mask=rmask & (offs < N), other=0.0,
                    eviction_policy=EV)  # fmt: skip
        total = tl.sum(x.to(tl.float32), 1)
    tl.store(y_ptr + rows, total.to(y_ptr.dtype.element_ty), mask=rm)


@triton.jit
def _tile_load(x_ptr, rows, n_rows, x_stride, N: tl.constexpr, BLOCK: tl.constexpr,
               ALIGN: tl.constexpr, EV: tl.constexpr):  # fmt: skip
    """A [ROWS, BLOCK] tile of rows (body) and its [ROWS, 16] scalar edge, in x's dtype; rows at
    or past ``n_rows`` load zeros."""
    rmask = (rows < n_rows)[:, None]
    xb1 = rows * x_stride
    offs = tl.arange(0, BLOCK)[None, :]
    if ALIGN:
        head, start, blen = body_span(xb1, N)
        head, start, blen = head[:, None], start[:, None], blen[:, None]
        x = tl.load(x_ptr + start + offs, mask=rmask & (offs < blen), other=0.0,
                    eviction_policy=EV)  # fmt: skip
        ecol, em = edge_index(head, blen, N)
        xe = tl.load(x_ptr + xb1[:, None] + ecol, mask=em & rmask, other=0.0, eviction_policy=EV)
    else:
        x = tl.load(x_ptr + xb1[:, None] + offs, mask=rmask & (offs < N), other=0.0,
                    eviction_policy=EV)  # fmt: skip
        xe = tl.zeros([x.shape[0], 16], x.dtype)
    return x, xe


@triton.jit(do_not_specialize=["n_rows"])
def _row_sum_persist(
    x_ptr,
    y_ptr,
    x_stride,
    n_rows,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
    ALIGN: tl.constexpr,
    S8: tl.constexpr,
    EV: tl.constexpr = "",
):
    # Persistent resident plan: program pid takes row tiles pid, pid + programs, ... of ROWS
    # rows and loads the next tile before reducing the current one, so each SM keeps loads in
    # flight while it reduces and no program is launched per tile.
    # I/O: read x once, write one value per row.
    if S8:
        x_stride = x_stride // 8 * 8  # == x_stride (S8); Triton infers divisibility by 8
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    ar = tl.arange(0, ROWS)
    t = pid.to(tl.int64)
    x, xe = _tile_load(x_ptr, t * ROWS + ar, n_rows, x_stride, N, BLOCK, ALIGN, EV)
    for _ in range(0, tl.cdiv(tl.cdiv(n_rows, ROWS) - pid, nprog)):
        rows = t * ROWS + ar
        t += nprog
        xn, xen = _tile_load(x_ptr, t * ROWS + ar, n_rows, x_stride, N, BLOCK, ALIGN, EV)
        total = tl.sum(x.to(tl.float32), 1) + tl.sum(xe.to(tl.float32), 1)
        tl.store(y_ptr + rows, total.to(y_ptr.dtype.element_ty), mask=rows < n_rows)
        x = xn
        xe = xen


@triton.jit(do_not_specialize=["n_rows"])
def _row_sum_looped(
    x_ptr, y_ptr, x_stride, n_rows, N: tl.constexpr, BLOCK: tl.constexpr, ALIGN: tl.constexpr,
    S8: tl.constexpr, STAGES: tl.constexpr = None, EV: tl.constexpr = "",
):  # fmt: skip
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
            xe = tl.load(x_ptr + xb + ecol, mask=em, other=0.0, eviction_policy=EV)
            tail = tl.sum(xe.to(tl.float32), 0)
        else:
            start = xb
            blen = N
            tail = 0.0
        acc = tl.zeros([BLOCK], tl.float32)
        for c in tl.range(0, blen, BLOCK, num_stages=STAGES):
            idx = c + offs
            xc = tl.load(x_ptr + start + idx, mask=idx < blen, other=0.0, eviction_policy=EV)
            acc += xc.to(tl.float32)
        tl.store(y_ptr + row, (tl.sum(acc, 0) + tail).to(y_ptr.dtype.element_ty))


@triton.jit(do_not_specialize=["n_rows", "spin"])
def _row_sum_coop(
    x_ptr,
    y_ptr,
    slot_ptr,
    x_stride,
    n_rows,
    spin,
    N: tl.constexpr,
    BLOCK: tl.constexpr,
    G: tl.constexpr,
    GP: tl.constexpr,
    ALIGN: tl.constexpr,
    S8: tl.constexpr,
    EV: tl.constexpr = "",
):
    # Cooperative split in one kernel: program pid sums chunk pid % G of row pid // G and
    # publishes the partial (with a marker word, so a slot is never 0); the row's chunk-0
    # program waits for all partials and adds them in chunk order (deterministic, no atomic
    # adds). I/O: read x once, write one value per row (+ 8 bytes per program, in L2).
    if S8:
        x_stride = x_stride // 8 * 8  # == x_stride (S8); Triton infers divisibility by 8
    pid = tl.program_id(0)
    c = pid % G
    row = (pid // G).to(tl.int64)
    xb = row * x_stride
    if ALIGN:
        head, start, blen = body_span(xb, N)
        ecol, em = edge_index(head, blen, N)
    else:
        start = xb
        blen = N
        ecol = tl.arange(0, 16)
        em = ecol < 0
    idx = c * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + start + idx, mask=idx < blen, other=0.0, eviction_policy=EV)
    x = x.to(tl.float32)
    xe = tl.load(x_ptr + xb + ecol, mask=em & (ecol < tl.where(c == 0, N, 0)), other=0.0,
                 eviction_policy=EV)  # fmt: skip
    slots = slot_ptr + row * G
    one = tl.full([], 1.0, tl.float32)
    tl.atomic_xchg(slots + c, pack2(one, tl.sum(x, 0) + tl.sum(xe.to(tl.float32), 0)))
    if c == 0:
        v, missing = wait_slots(slots, spin, G, GP)
        k = tl.arange(0, GP)
        if missing > 0:  # row-mates not scheduled in time: sum their chunks here
            offs = tl.arange(0, BLOCK // 8)
            for j in range(1, G):
                if tl.sum(tl.where(k == j, v, 0), 0) == 0:  # still missing
                    acc = tl.zeros([BLOCK // 8], tl.float32)
                    for q in range(0, BLOCK, BLOCK // 8):
                        jdx = j * BLOCK + q + offs
                        xj = tl.load(x_ptr + start + jdx, mask=jdx < blen, other=0.0)
                        acc += xj.to(tl.float32)
                    v = tl.where(k == j, pack2(one, tl.sum(acc, 0)), v)
        _one, parts = unpack2(v)
        total = tl.sum(tl.where(k < G, parts, 0.0), 0)
        tl.store(y_ptr + row, total.to(y_ptr.dtype.element_ty))


@triton.jit(do_not_specialize=["chunk", "n_chunks"])
def _row_sum_split(
    x_ptr, part_ptr, x_stride, chunk, n_chunks, N: tl.constexpr, BLOCK: tl.constexpr,
    EV: tl.constexpr = "",
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    nb = chunk // BLOCK  # chunk is a multiple of BLOCK: lo keeps its divisibility (vectors)
    lo = c * nb * BLOCK
    for start in range(lo, lo + nb * BLOCK, BLOCK):
        idx = start + offs
        xc = tl.load(x_ptr + row * x_stride + idx, mask=idx < N, other=0.0, eviction_policy=EV)
        acc += xc.to(tl.float32)
    tl.store(part_ptr + row * n_chunks + c, tl.sum(acc, 0))


@triton.jit(do_not_specialize=["n_chunks"])
def _row_sum_finish(part_ptr, y_ptr, n_chunks, SPLIT_PAD: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    k = tl.arange(0, SPLIT_PAD)
    p = tl.load(part_ptr + row * n_chunks + k, mask=k < n_chunks, other=0.0)
    tl.store(y_ptr + row, tl.sum(p, 0).to(y_ptr.dtype.element_ty))


def row_sum(x: torch.Tensor, out_dtype: torch.dtype | None = None, plan: RowPlan | None = None):
    check_tensor("x", x)
    check_out_dtype(out_dtype)
    x2, stride = rows_view("x", x)
    y = empty(x.shape[:-1], out_dtype or x.dtype, x.device)
    rows, n = x2.shape
    if rows == 0:
        return y
    p = plan_for(rows, n, x.device, plan, "row_sum", x.element_size())
    align = p.align and align_for(n, stride)
    s8 = stride8(stride)
    ev = "evict_first" if p.evict else ""  # x is read once: its lines go first (Inductor's)
    if p.kind == "resident" and p.programs_per_sm:
        block = p.resident_block(n, align)
        tiles = p.programs(rows, 1)
        grid = (max(1, min(tiles, p.programs_per_sm * device_info(x.device).sm_count)),)
        launch(_row_sum_persist, grid, x2, y, stride, rows,
            N=n, BLOCK=block, ROWS=p.rows, ALIGN=align, S8=s8, EV=ev, num_warps=p.num_warps,
        )  # fmt: skip
    elif p.kind == "resident":
        block = p.resident_block(n, align)
        launch(_row_sum_resident, (p.programs(rows, 1),), x2, y, stride, rows,
            N=n, BLOCK=block, ROWS=p.rows, ALIGN=align, S8=s8, EV=ev, num_warps=p.num_warps,
        )  # fmt: skip
    elif p.kind == "coop":
        g = p.coop_chunks(n, align)
        launch(_row_sum_coop, (rows * g,), x2, y, coop_slots(rows, g, x.device), stride, rows,
            coop_spin(), N=n, BLOCK=p.block, G=g, GP=next_pow2(g), ALIGN=align,
            S8=s8, EV=ev, num_warps=p.num_warps,
        )  # fmt: skip
    elif p.kind == "looped":
        grid = (p.programs(rows, device_info(x.device).sm_count),)
        launch(_row_sum_looped, grid, x2, y, stride, rows,
            N=n, BLOCK=p.block, ALIGN=align, S8=s8, STAGES=p.stages or None, EV=ev,
            num_warps=p.num_warps,
        )  # fmt: skip
    else:
        chunk, n_chunks = p.chunk(n), p.n_chunks(n)
        part = empty((rows, n_chunks), torch.float32, x.device)
        launch(
            _row_sum_split,
            (rows, n_chunks),
            x2,
            part,
            stride,
            chunk,
            n_chunks,
            N=n,
            BLOCK=p.block,
            EV=ev,
            num_warps=p.num_warps,
        )
        launch(
            _row_sum_finish,
            (rows,),
            part,
            y,
            n_chunks,
            SPLIT_PAD=p.split_pad(n),
            num_warps=1,
        )
    return y
