"""Softmax cooperative plans with the cheaper exps (``RowPlan`` fields ``fast_exp``, ``fma_exp``).

Under the interpreter ``fast_exp`` runs ``tl.exp2`` where the GPU runs ``ex2.approx.ftz`` (inline
PTX the interpreter cannot execute); everything else (the 2^24 scaling, the division folded into
the exponent, per-lane sums, ragged chunks, the polynomial exp) is the code the GPU runs. The GPU
side is checked by ``tests/gpu/test_rows_gpu.py`` and the rows9 sweep's gate.
"""

import pytest
import torch
import triton
import triton.language as tl

from warpgauge.kernels import softmax as softmax_k
from warpgauge.kernels.plans import RowPlan
from warpgauge.kernels.softmax_coop import _exp2_fma
from warpgauge.reference import assert_close, softmax_ref

# (rows, width, plan): which path each case reaches
CASES = [
    # looped cooperative, ex2 + per-lane sums: 4 chunks of 256 in 64-wide slices, rows start
    # unaligned (aligned body + edge on chunk 0), the last chunk ragged (232 of 256: 4 slices)
    (3, 1001, RowPlan.coop(256, 2, sub=64, evict=True, fast_exp=True)),
    # aligned rows, 8 chunks of 128, last chunk 104 elements: slices skipped past its end
    (2, 1000, RowPlan.coop(128, 1, sub=32, fast_exp=True)),
    # last chunk of 32 elements: one 64-wide slice walked instead of four (tl.exp and ex2)
    (2, 800, RowPlan.coop(256, 2, sub=64)),
    (3, 803, RowPlan.coop(256, 2, sub=64, fast_exp=True)),
    # the polynomial exp on the first slice of each chunk, ex2 on the rest
    (3, 1001, RowPlan.coop(256, 2, sub=64, evict=True, fast_exp=True, fma_exp=1)),
    # polynomial on every slice, tl.exp elsewhere (fast_exp off)
    (2, 1000, RowPlan.coop(256, 2, sub=64, fma_exp=4)),
    # register cooperative with ex2 (2^24-scaled exps kept in registers)
    (3, 1001, RowPlan.coop(128, 1, fast_exp=True)),
    (4, 77, RowPlan.coop(16, 1, fast_exp=True)),  # 5 chunks of 16, heads of 0-7 elements
    # persistent resident with prefetch and ex2: unaligned rows (edge), then aligned rows
    (7, 1001, RowPlan("resident", 1024, 4, programs_per_sm=1, fast_exp=True)),
    (6, 256, RowPlan("resident", 256, 2, programs_per_sm=1, fast_exp=True)),
    # persistent cooperative (4 interpreter SMs): 8 chunks of 128, 4 lanes walk 2-3 rows each
    # (the next row's chunk loaded before the exchange, masked past the last row), unaligned
    # rows (edge on chunk 0), ragged last chunk; ex2 and tl.exp
    (7, 1001, RowPlan.coop(128, 1, fast_exp=True, programs_per_sm=8)),
    (5, 1000, RowPlan.coop(128, 1, programs_per_sm=8)),
    (6, 300, RowPlan.coop(64, 1, fast_exp=True, programs_per_sm=2)),  # 1 lane: every row
    (9, 1001, RowPlan.coop(128, 1, fast_exp=True, programs_per_sm=8, stages=2)),  # 2 rows ahead
    (5, 256, RowPlan.coop(64, 1, programs_per_sm=4, stages=2)),  # aligned, 4 lanes, ragged end
]
DTYPES = [torch.float32, torch.bfloat16]


def _rand(shape, dtype, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,width,plan", CASES)
def test_fast_exp_plans(rows, width, plan, dtype, device):
    """FP64 reference on random rows plus: a -inf prefix covering whole chunks, an all -inf row
    (zeros), a +1000 offset (large shifts: fp32 tolerance 2e-5 catches a folded x*log2e - c),
    one large logit (outputs near 1e-26, all normal). Outputs start NaN (conftest poisoning)."""
    x = _rand((rows + 4, width), dtype, scale=4.0, seed=60)
    x[0, : (3 * width) // 4] = float("-inf")
    x[1, :] = float("-inf")
    x[2] += 1000.0
    x[3, width // 3] = 60.0
    y = softmax_k.softmax(x.to(device), plan=plan)
    assert torch.equal(y[1].float().cpu(), torch.zeros(width))
    assert_close(y, softmax_ref(x).to(device), msg=str(plan), relative=True)


@pytest.mark.parametrize("rows,width,plan", CASES[:1] + CASES[4:5] + CASES[6:7] + CASES[10:11])
def test_fast_exp_nan_rows_and_strides(rows, width, plan, device):
    """A NaN or +inf makes the whole row NaN (also a NaN row whose other chunks are all -inf);
    strided rows (a slice of wider rows) take the scalar path."""
    x = _rand((rows + 2, width), torch.float32, scale=3.0, seed=61)
    x[0, width // 2] = float("nan")
    x[1, : width - 1] = float("-inf")
    x[1, -1] = float("nan")
    x[2, width // 5] = float("inf")
    y = softmax_k.softmax(x.to(device), plan=plan)
    assert torch.isnan(y[:3]).all()
    assert_close(y[3:], softmax_ref(x[3:]).to(device), relative=True)
    base = _rand((rows, width + 11), torch.bfloat16, scale=3.0, seed=62)
    xs = base[:, 3 : 3 + width].to(device)
    assert_close(softmax_k.softmax(xs, plan=plan), softmax_ref(xs), relative=True)


@triton.jit
def _exp2_fma_kernel(t_ptr, y_ptr, n, B: tl.constexpr):
    i = tl.program_id(0) * B + tl.arange(0, B)
    t = tl.load(t_ptr + i, mask=i < n)
    tl.store(y_ptr + i, _exp2_fma(t), mask=i < n)


def test_exp2_fma_accuracy(device):
    """The polynomial exp2 (interpreted: numpy FP32) against FP64 over its whole range."""
    t = -torch.rand(4093, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 130
    t = torch.cat([t, torch.tensor([0.0, -0.5, -0.4999, -126.0, -126.5, -200.0, -1e30])])
    t = torch.cat([t, torch.tensor([float("-inf"), float("nan")], dtype=torch.float64)])
    t32 = t.float().to(device)
    y = torch.full_like(t32, 7.0)
    _exp2_fma_kernel[(triton.cdiv(t.numel(), 1024),)](t32, y, t.numel(), B=1024)
    t32, y = t32.cpu(), y.cpu()
    ref = torch.exp2(t32.double())
    normal = t32 >= -126
    rel = ((y.double() - ref).abs() / ref)[normal]
    assert rel.max() < 3e-7, rel.max()
    assert torch.equal(y[~normal & ~t32.isnan()], torch.zeros_like(y[~normal & ~t32.isnan()]))
    assert torch.isnan(y[-1])


def test_persistent_coop_plan_fields():
    p = RowPlan.coop(4096, 4, fast_exp=True, programs_per_sm=4)
    assert p.kind == "coop" and p.programs_per_sm == 4
    for bad in (dict(sub=1024), dict(hold_x=True), dict(nap=100)):
        with pytest.raises(ValueError, match="programs_per_sm"):
            RowPlan.coop(4096, 4, programs_per_sm=4, **bad)


def test_fast_exp_plan_fields():
    assert RowPlan.coop(16384, 8, sub=4096, fast_exp=True, fma_exp=2).fma_exp == 2
    with pytest.raises(ValueError, match="fma_exp"):
        RowPlan.coop(16384, 8, fma_exp=1)  # needs sub
    with pytest.raises(ValueError, match="fma_exp"):
        RowPlan.coop(16384, 8, sub=4096, fma_exp=5)  # only 4 slices
    with pytest.raises(ValueError, match="fast_exp"):
        RowPlan("looped", 1024, 4, fast_exp=True)
    with pytest.raises(ValueError, match="fast_exp"):
        RowPlan("resident", 1024, 4, fast_exp=True)  # only the persistent resident kernel


def test_resident_per_sm_counts_the_register_file(monkeypatch):
    """``_device.resident_per_sm`` on an H200-like SM (65536 registers, 2048 threads, 32 blocks,
    228 KB of shared memory): registers allocated per warp in units of 256. The rows12 sweep's
    persistent plans at these registers: 4096/4 at 80 -> 6 per SM, 96 -> 5, 111 -> 4, 64 -> 8;
    2048/2 at 110 -> 9; 8192/8 at 100 -> 2; and threads or shared memory bound small kernels."""
    from warpgauge import _device

    monkeypatch.setattr(_device, "_sm_limits", lambda index: (65536, 2048, 32, 233472))
    dev = torch.device("cuda", 0)
    got = [_device.resident_per_sm(dev, r, w, 0) for r, w in
           ((80, 4), (96, 4), (111, 4), (64, 4), (110, 2), (100, 8))]  # fmt: skip
    assert got == [6, 5, 4, 8, 9, 2]
    assert _device.resident_per_sm(dev, 16, 1, 0) == 32  # block slots
    assert _device.resident_per_sm(dev, 16, 32, 0) == 2  # threads
    assert _device.resident_per_sm(dev, 16, 4, 100_000) == 2  # shared memory
    assert _device.resident_per_sm(dev, 255, 32, 0) == 1  # never 0
