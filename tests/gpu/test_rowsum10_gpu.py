"""row_sum's rowsum10 rule on the GPU (skipped without CUDA): full-size results of the rule's
plans with and without evict-first reads (bit-identical), strided rows, and one compile per
plan kind across the row counts where the rule switches between looped and cooperative."""

from dataclasses import replace

import pytest
import torch

import warpgauge as wg
from warpgauge.kernels import row_sum as row_sum_k
from warpgauge.kernels._launch import compiled_variants
from warpgauge.kernels.plans import RowPlan
from warpgauge.reference import assert_close, row_sum_ref

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

SHAPES = [(16384, 4096), (16384, 4097), (64, 131072), (128, 122880), (256, 131072),
          (32, 106496), (128, 128256), (100, 65537), (1024, 151936), (32768, 8192)]  # fmt: skip


def _rand(shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, generator=g, device="cuda") * 3.0).to(dtype)


def _plan(x):
    props = torch.cuda.get_device_properties(0)
    return RowPlan.for_shape(*x.shape, props.multi_processor_count, "row_sum",
                             props.L2_cache_size, x.element_size())  # fmt: skip


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_rule_plans_full_size(shape):
    x = _rand(shape, seed=1)
    y = wg.row_sum(x)
    assert_close(y, row_sum_ref(x))
    p = _plan(x)
    for ev in (True, False):
        assert torch.equal(row_sum_k.row_sum(x, plan=replace(p, evict=ev)), y)
    assert_close(wg.row_sum(x, torch.float32), row_sum_ref(x, torch.float32))
    base = _rand((min(shape[0], 512), shape[1] + 5), seed=2)[:, 3 : 3 + shape[1]]
    assert_close(wg.row_sum(base), row_sum_ref(base))


def test_new_row_counts_reuse_compiled_kernels():
    """Width 131072: the looped (0.2-2 rows per SM) and cooperative plans each compile once."""
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    for rows in (sm // 2, 4 * sm):  # looped, coop
        wg.row_sum(_rand((rows, 131072)))
    kernels = [row_sum_k._row_sum_looped, row_sum_k._row_sum_coop]
    before = [compiled_variants(k) for k in kernels]
    assert all(before), before
    for rows in (sm // 4, sm, 2 * sm - 1, 2 * sm, 1000):
        x = _rand((rows, 131072))
        assert_close(wg.row_sum(x), row_sum_ref(x))
    assert [compiled_variants(k) for k in kernels] == before
