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

from . import _launch
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


@triton.jit
def slots_done(cnt_ptr, RESET: tl.constexpr):
    """Cooperative plans with self-clearing slots (``RESET``): count this program's read of its
    row's slots on the row's counter (``cnt_ptr``, the int64 after the launch's slots, see
    ``coop_slots``). A release atomic: the slot loads before it are done when it counts. Call it
    once the statistics are merged; the count it returns is needed only by ``slots_clear`` at the
    program's end, so its round trip overlaps the write pass."""
    if RESET:
        n = tl.atomic_add(cnt_ptr, 1, sem="release")
    else:
        n = 0
    return n


@triton.jit
def slots_clear(slots, cnt_ptr, n, G: tl.constexpr, GP: tl.constexpr, RESET: tl.constexpr):
    """The last of a row's ``G`` programs to count (``n == G - 1``, from ``slots_done``) zeroes
    the row's slots and counter again: a launch leaves its slots as it found them, so a cached
    buffer serves the next launch on the stream without a fill kernel before it. Every program
    of the row has read the slots by then (a program that timed out and computed a row-mate's
    statistics itself still counts once; the late row-mate counts after it), so nothing reads a
    cleared slot. The acquire exchange orders the clearing stores after the counts."""
    if RESET:  # noqa: SIM102 (RESET is a compile-time constant, n a runtime value)
        if n == G - 1:
            tl.atomic_xchg(cnt_ptr, 0, sem="acquire")
            k = tl.arange(0, GP)
            tl.store(slots + k, tl.zeros([GP], tl.int64), mask=k < G)


def coop_spin() -> int:
    """Polls a cooperative program makes before computing missing statistics itself: none under
    the interpreter (programs run one after another there), else about 1e6 (~1 s of polling:
    only a program whose row-mates are not scheduled at all ever reaches it)."""
    from .._device import interpreter_enabled

    return 0 if interpreter_enabled() else 1 << 20


# Cooperative launches' slots (``coop_slots``): with SELF_RESET the kernels clear what they used
# (``slots_done`` / ``slots_clear``, RESET=True) and launches of up to SLOTS_CACHED int64s (rows x
# (chunks + 1): 512 KB) share one zeroed buffer per (device, stream), so the launch needs no fill
# kernel before it. Larger launches (thousands of wide rows, hundreds of microseconds) and traced
# or capturing calls without a buffer yet take a fresh ``torch.zeros`` (they clear it too).
# Off: measured on the H200 (results/slots19-h200/slots_ab.log, experiments/slots_probe.py: one
# CUDA graph per variant, cold and warm, 41 samples rotated, outputs bit-identical) it saves
# nothing, since a fill node in a graph costs almost no device time: softmax 0.994-1.028x the
# fill's time over 9 cases (64x131072 15.07 us vs 14.66 cold), add_rms_norm 0.988-1.027x, and
# the softmax backward 1.08-1.10x slower (64x131072 20.99 vs 19.07: the release atomic before
# its write pass).
SELF_RESET = False
SLOTS_CACHED = 1 << 16
_SLOTS: dict = {}


def coop_slots(rows: int, chunks: int, device, reset: bool = True) -> torch.Tensor:
    """Zeroed statistics slots for a cooperative launch: one int64 per program, then one counter
    per row (``slots_done``). The cached buffer of the current stream when SELF_RESET allows it
    and the kernel clears its slots (``reset``: it runs with RESET=True), registered in
    ``_launch.WORKSPACES`` so a replay passes it as a constant pointer; else a fresh one from
    ``_launch.zeros`` (a replay allocates it zeroed again). (row_sum's cooperative kernel does
    not clear: only its chunk-0 program reads the slots, and a row-mate it timed out on
    publishes after it.)"""
    n = rows * (chunks + 1)
    if reset and SELF_RESET and n <= SLOTS_CACHED and not _tracing():
        stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
        key = (str(device), stream)
        buf = _SLOTS.get(key)
        if buf is None and not (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
            # (not during a CUDA-graph capture: the fill would run only when the graph replays)
            buf = _SLOTS[key] = torch.zeros(SLOTS_CACHED, dtype=torch.int64, device=device)
            _launch.WORKSPACES[buf.data_ptr()] = stream
        if buf is not None:
            return buf[:n]
    return zeros(n, torch.int64, device)


def coop_reset() -> bool:
    """The RESET argument of cooperative kernels (``SELF_RESET``, read per launch)."""
    return SELF_RESET


def _tracing() -> bool:
    """torch.compile or ``wrap_triton`` tracing, or fake tensors: no real buffer to hand out."""
    if torch.compiler.is_compiling() or (
        _launch._wrap_enabled is not None and _launch._wrap_enabled()
    ):
        return True
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None


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
    "slots_done",
    "coop_reset",
    "slots_clear",
    "EDGE",
    "body_span",
    "edge_index",
    "align_for",
    "stride8",
    "triton",
]
