"""Row addressing shared by the row kernels: aligned bodies, scalar edges, row blocks.

A row of ``N`` elements starting at element offset ``base`` is covered as

- a *body* of ``blen`` elements (a multiple of 8) starting at the first 16-byte boundary, read with
  vector loads (``tl.multiple_of`` tells Triton the body start and length are multiples of 8
  elements, which for 2-byte dtypes is 16 bytes), and
- up to 7 *head* elements before the body and up to 7 *tail* elements after it, read as one
  16-lane scalar *edge* tensor.

This is the ``ALIGN`` path, for rows whose starts are not 16-byte aligned (contiguous rows of a
width that is not a multiple of 8, such as 4097 or 50257). Without it Triton must use 2-byte loads
for every element of such a row. It also avoids padding the block to the next power of two for
widths just past one: the body of a 4097-wide row is at most 4096 elements.

Offsets assume the base pointers are 16-byte aligned (torch allocations are; Triton specializes
pointer arguments on 16-byte alignment and would use scalar loads otherwise, which is still correct).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._launch import row_plan, zeros
from .plans import RowPlan

EDGE = 16  # lanes of the edge tensor: 8 head slots and 8 tail slots


@triton.jit
def body_span(base, N: tl.constexpr):
    """(head, body start, body length) of a row starting at element offset ``base``; works on
    scalars and on [ROWS] tensors of bases. ``head`` elements precede the 8-aligned body."""
    head = (8 - base % 8) % 8
    start = tl.multiple_of(base + head, 8)
    blen = tl.multiple_of((N - head) // 8 * 8, 8)
    return head, start, blen


@triton.jit
def edge_index(head, blen, N: tl.constexpr):
    """Column indices and mask of a row's edge elements: lanes 0-7 are the head (columns below
    ``head``), lanes 8-15 the tail (columns from ``head + blen`` up to ``N``). ``head`` and
    ``blen`` are [ROWS, 1] (or scalars); the result is [ROWS, 16] (or [16])."""
    e = tl.arange(0, 16)
    is_head = e < 8
    col = tl.where(is_head, e, head + blen + e - 8)
    mask = tl.where(is_head, e < head, col < N)
    return col, mask


@triton.jit
def pack2(a, b):
    """Two fp32 scalars as one int64 (``a`` in the high word): published with one atomic, so a
    reader sees both or neither. Callers make sure a valid pair never packs to 0."""
    hi = a.to(tl.int32, bitcast=True).to(tl.int64)
    lo = b.to(tl.uint32, bitcast=True).to(tl.int64)
    return (hi << 32) | lo


@triton.jit
def unpack2(v):
    """Inverse of ``pack2`` (elementwise): (high fp32, low fp32)."""
    a = (v >> 32).to(tl.int32).to(tl.float32, bitcast=True)
    b = v.to(tl.int32).to(tl.float32, bitcast=True)
    return a, b


@triton.jit
def nap_ns(it, NAP: tl.constexpr):
    """``nanosleep`` for about NAP ns (a poll backoff; the interpreter cannot run PTX, and its
    programs never poll). Returns ``it`` so the call stays ordered in the loop."""
    ns = tl.full([], NAP, tl.int32)
    return tl.inline_asm_elementwise("nanosleep.u32 $2; mov.u32 $0, $1;", "=r,r,r", [it, ns],
                                     dtype=tl.int32, is_pure=False, pack=1)  # fmt: skip


@triton.jit
def wait_slots(slot_ptr, spin, G: tl.constexpr, GP: tl.constexpr, NAP: tl.constexpr = 0):
    """Cooperative plans: poll a row's ``G`` statistics slots (int64, zeroed before the launch,
    each written once by its program with an atomic) until all are non-zero or ``spin`` polls
    have passed. Returns the slots ([GP], padding lanes 1) and how many are still missing
    (non-zero only after a timeout: the caller then computes the missing statistics itself, so
    a program never waits forever for one that is not scheduled)."""
    k = tl.arange(0, GP)
    v = tl.load(slot_ptr + k, mask=k < G, other=1, volatile=True)
    missing = tl.sum((v == 0).to(tl.int32), 0)
    it = 0
    while (missing > 0) & (it < spin):
        if NAP > 0:
            it = nap_ns(it, NAP)
        v = tl.load(slot_ptr + k, mask=k < G, other=1, volatile=True)
        missing = tl.sum((v == 0).to(tl.int32), 0)
        it += 1
    return v, missing


def coop_spin() -> int:
    """Polls a cooperative program makes before computing missing statistics itself: none under
    the interpreter (programs run one after another there), else about 1e6 (~1 s of polling:
    only a program whose row-mates are not scheduled at all ever reaches it)."""
    from .._device import interpreter_enabled

    return 0 if interpreter_enabled() else 1 << 20


def coop_slots(rows: int, chunks: int, device) -> torch.Tensor:
    """Zeroed statistics slots for a cooperative launch (one int64 per program), allocated with
    ``_launch.zeros`` so a repeated call replays (a zeroed allocation, then the launch)."""
    return zeros(rows * chunks, torch.int64, device)


def align_for(n: int, x_stride: int, *strides: int) -> bool:
    """True when the ALIGN path pays: rows of at least 64 elements whose starts are not 8-element
    multiples, and every tensor read or written with that row shares the same row stride (so one
    head works for all of them)."""
    return n >= 64 and x_stride % 8 != 0 and all(s == x_stride for s in strides)


def stride8(*strides: int) -> bool:
    """True when every row stride is a multiple of 8 elements (hint for vector loads; Triton only
    infers divisibility by 16 from an integer argument)."""
    return all(s % 8 == 0 for s in strides)


def plan_for(
    rows: int, width: int, device: torch.device, plan: RowPlan | None, op: str, elem_bytes: int = 2
):
    """``plan`` if given, else the rule's plan for ``op`` on ``device`` (its SM count and L2
    size) for inputs of ``elem_bytes``-byte elements, cached per shape by ``_launch.row_plan``
    so a repeated call builds no plan."""
    return row_plan(rows, width, device, plan, op, elem_bytes)


__all__ = [
    "plan_for",
    "pack2",
    "unpack2",
    "wait_slots",
    "coop_spin",
    "coop_slots",
    "EDGE",
    "body_span",
    "edge_index",
    "align_for",
    "stride8",
    "triton",
]
