"""row_sum's cooperative kernel (the row's last program to arrive adds the partials) and its
evict-first reads (rowsum10), against FP64 references.

The interpreter runs programs one after another, so a row's last chunk is always the one that
adds; the counters must be back at zero after every call (the next call relies on it). Outputs
and the partials buffer start as NaN (conftest), so an unwritten partial or output fails.
"""

from dataclasses import replace

import pytest
import torch

import warpgauge as wg
from warpgauge._eager import _unwrapped
from warpgauge.kernels import row_sum as row_sum_k
from warpgauge.kernels.plans import RESIDENT_MAX, RowPlan
from warpgauge.reference import assert_close, row_sum_ref


def row_sum(x, out_dtype=None, plan=None):
    """The launcher as an eager public call runs it (wrap-triton dispatch off): the cooperative
    kernel takes the cached counters (while tracing it takes a fresh zeroed tensor instead)."""
    return _unwrapped(row_sum_k.row_sum, x, out_dtype, plan)

# (rows, width, plan): cooperative chunks; comments say which path each takes.
CASES = [
    (3, 1001, RowPlan.coop(128, 1)),  # unaligned rows: aligned body in 8 chunks, edge on chunk 0
    (2, 1000, RowPlan.coop(256, 2)),  # aligned rows (no edge), 4 chunks, the last one ragged
    (4, 77, RowPlan.coop(16, 1)),  # 5 chunks of 16, heads of 0-7 elements
    (2, 64, RowPlan.coop(64, 1)),  # one chunk per row: its only program adds
    (5, 4100, RowPlan.coop(512, 2, evict=True)),  # evict-first reads, 9 chunks (GP 16)
]


def _rand(shape, dtype, device, scale=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(dtype).to(device)


def _counters_zero():
    assert row_sum_k._COUNTERS, "the cached counters were not used"
    return all(int(b.abs().sum()) == 0 for b in row_sum_k._COUNTERS.values())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows,width,plan", CASES)
def test_arrive(rows, width, plan, dtype, device):
    x = _rand((rows, width), dtype, device, seed=60)
    y = row_sum(x, plan=plan)
    assert_close(y, row_sum_ref(x))
    assert _counters_zero()
    assert_close(row_sum(x, torch.float32, plan=plan), row_sum_ref(x, torch.float32))
    for seed in (61, 62):  # further calls on other inputs: the counters were reset
        z = _rand((rows, width), dtype, device, seed=seed)
        assert_close(row_sum(z, plan=plan), row_sum_ref(z))
    assert torch.equal(row_sum(x, plan=plan), y)  # fixed order: bit-identical
    assert _counters_zero()


@pytest.mark.parametrize("rows,width,plan", CASES[:3])
def test_arrive_strided_rows(rows, width, plan, device):
    """Rows that are a slice of wider rows: the scalar path (no aligned body)."""
    base = _rand((rows, width + 11), torch.float16, device, seed=63)
    x = base[:, 3 : 3 + width]
    assert_close(row_sum(x, plan=plan), row_sum_ref(x))
    assert _counters_zero()


def test_arrive_more_rows_than_cached_counters(device, monkeypatch):
    """Past ARRIVE_MAX_ROWS rows a launch takes fresh zeroed counters (the cache is untouched)."""
    monkeypatch.setattr(row_sum_k, "ARRIVE_MAX_ROWS", 2)
    x = _rand((5, 1001), torch.float32, device, seed=64)
    assert_close(row_sum(x, plan=RowPlan.coop(128, 1)), row_sum_ref(x))
    assert_close(row_sum(x[:2], plan=RowPlan.coop(128, 1)), row_sum_ref(x[:2]))
    assert _counters_zero()


def test_public_call_takes_the_cached_counters(device):
    x = _rand((2, 2 * RESIDENT_MAX + 5), torch.bfloat16, device, seed=66)  # rule: coop (4 SMs)
    assert_close(wg.row_sum(x), row_sum_ref(x))
    assert_close(wg.row_sum(-x), -row_sum_ref(x))
    assert _counters_zero()


def test_traced_call_takes_fresh_counters(device, monkeypatch):
    """With wrap-triton dispatch on (tracing) the launch gets a zeroed tensor of its own. (The
    cache is swapped, never cleared: a recorded replay may hold a cached buffer's pointer.)"""
    monkeypatch.setattr(row_sum_k, "_COUNTERS", {})
    x = _rand((3, 1001), torch.float32, device, seed=67)
    assert_close(row_sum_k.row_sum(x, plan=RowPlan.coop(128, 1)), row_sum_ref(x))
    assert not row_sum_k._COUNTERS


# Every plan kind with and without evict-first reads: the same arithmetic, bit-identical sums.
EVICT_CASES = [
    (7, 1001, RowPlan.resident(1001)),  # aligned body + scalar edges
    (5, 1003, RowPlan.resident(1003, rows=2)),  # two rows per program
    (3, 1001, RowPlan("resident", 1024, 4, align=False)),  # scalar path
    (7, 1001, RowPlan("resident", 1024, 4, programs_per_sm=1)),  # persistent tiles
    (4, 1000, RowPlan.looped(128)),  # looped, 8 chunks
    (7, 1001, RowPlan.looped(128, programs_per_sm=1)),  # looped, persistent grid
    (2, 1000, RowPlan.split_for(2, 1000, 4, block=64)),  # split + finish
    (3, 1001, RowPlan.coop(128, 1)),  # cooperative
]


@pytest.mark.parametrize("rows,width,plan", EVICT_CASES)
def test_evict_first_reads(rows, width, plan, device):
    x = _rand((rows, width), torch.bfloat16, device, seed=65)
    y = row_sum(x, plan=replace(plan, evict=True))
    assert_close(y, row_sum_ref(x))
    assert torch.equal(y, row_sum(x, plan=replace(plan, evict=False)))
