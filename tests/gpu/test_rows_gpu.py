"""Row operators on the GPU at full size (skipped without CUDA): the DRAM-bound and LLM shapes
of anchors-h200.md, widths up to 1,048,576, compile-cache reuse, opcheck, torch.compile."""

import pytest
import torch

import warpgauge as wg
from warpgauge.kernels import rmsnorm as rms_k
from warpgauge.kernels import softmax as softmax_k
from warpgauge.kernels._launch import compiled_variants
from warpgauge.kernels.plans import RowPlan
from warpgauge.reference import add_ref, add_rms_norm_ref, assert_close, row_sum_ref, softmax_ref

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
SHAPES = [
    (32, 127),
    (1024, 1024),
    (512, 4097),
    (300, 2880),  # hidden sizes that are not powers of two
    (333, 50257),  # aligned-body path, looped (GPT-2 vocabulary)
    (140, 65537),  # looped just past a power of two, persistent grid
    (150, 128256),  # Llama-3 vocabulary
    (7, 151936),  # Qwen vocabulary, split
    (3000, 1000),  # several rows per program
    (4, 32769),
    (64, 131072),
    (8, 16384),
    (16384, 4096),
    (32768, 8192),
    (8192, 32000),
    (4096, 131072),
    (2, 1048576),
    (200, 1048576),
]


def _rand(shape, dtype, seed=0, scale=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, generator=g, device="cuda") * scale).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_full_size(shape, dtype):
    if dtype == torch.float32 and shape[0] * shape[1] > 2**28:
        pytest.skip("FP32 copy of the largest shapes exceeds what this check needs")
    x = _rand(shape, dtype, 0, 4.0)
    x[0, : shape[1] // 2] = float("-inf")  # masked prefix on every plan
    assert_close(wg.softmax(x), softmax_ref(x), msg="softmax", relative=True)
    x[0] = _rand((shape[1],), dtype, 9)
    r = _rand(shape, dtype, 1)
    w = _rand((shape[1],), dtype, 2)
    y, h = wg.add_rms_norm(x, r, w)
    y_ref, h_ref = add_rms_norm_ref(x, r, w)
    assert_close(h, h_ref, msg="h")
    assert_close(y, y_ref, msg="y")
    assert_close(wg.row_sum(x), row_sum_ref(x), msg="row_sum")


PLANS = {
    "resident": RowPlan.resident(6001),
    "resident-scalar": RowPlan("resident", 8192, 8, align=False),
    "resident-rows": RowPlan.resident(6001, rows=2),
    "looped": RowPlan.looped(1024),
    "looped-persistent": RowPlan.looped(1024, programs_per_sm=1, evict=True),
    "split": RowPlan.split_for(40, 6001, 132, block=512),
    "coop": RowPlan.coop(1024, 4),
}


@pytest.mark.parametrize("plan", list(PLANS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_forced_plans_masked(plan, dtype):
    rows, width = 40, 6001
    p = PLANS[plan]
    x = _rand((rows, width), dtype, 3, 3.0)
    x[0, :5000] = float("-inf")
    x[1] = float("-inf")
    y = softmax_k.softmax(x, plan=p)
    assert torch.equal(y[1], torch.zeros_like(y[1]))
    assert_close(y, softmax_ref(x), relative=True)
    r, w = _rand((rows, width), dtype, 4), _rand((width,), dtype, 5)
    x[:2] = _rand((2, width), dtype, 6)
    y, h = rms_k.add_rms_norm(x, r, w, 1e-6, plan=p)
    y_ref, h_ref = add_rms_norm_ref(x, r, w)
    assert_close(y, y_ref)
    assert_close(h, h_ref)


def test_bf16_rounding_exact():
    """One rounding to nearest even: on the GPU, BF16 add and h match the FP64 reference exactly
    (FP32 sums of two BF16 values are exact unless exponents differ by more than 16)."""
    x = _rand((4096, 1000), torch.bfloat16, 7)
    y = _rand((4096, 1000), torch.bfloat16, 8)
    assert torch.equal(wg.add(x, y), add_ref(x, y))
    w = _rand((1000,), torch.bfloat16, 9)
    _, h = wg.add_rms_norm(x, y, w)
    assert torch.equal(h, add_ref(x, y))


def test_new_row_counts_reuse_compiled_kernels():
    width = 4096
    w = _rand((width,), torch.bfloat16, 1)
    for rows in (300, 301):  # warm both plans' kernels once
        x = _rand((rows, width), torch.bfloat16)
        wg.softmax(x), wg.add_rms_norm(x, x, w), wg.row_sum(x)
    kernels = [softmax_k._softmax_resident, rms_k._rms_resident]
    before = [compiled_variants(k) for k in kernels]
    for rows in (1000, 1024, 2999, 4096, 5000, 12345):  # row counts never specialize (x16 or not)
        x = _rand((rows, width), torch.bfloat16)
        wg.softmax(x), wg.add_rms_norm(x, x, w)
    assert [compiled_variants(k) for k in kernels] == before


def test_new_row_counts_reuse_compiled_kernels_wide():
    """Looped (persistent) and split plans and the backward kernels: one compile per width."""
    width = 50257
    w = _rand((width,), torch.bfloat16, 1)
    # warm every plan the rule takes at this width: cooperative (softmax at every row count
    # since rows9; add_rms_norm), add_rms_norm looped (0.6-1 rows per SM), split (row_sum)
    for rows in (3, 5, 100, 300, 301, 4096):
        x = _rand((rows, width), torch.bfloat16)
        wg.softmax(x), wg.add_rms_norm(x, x, w), wg.row_sum(x)
    kernels = [softmax_k._softmax_coop, rms_k._rms_coop]
    before = [compiled_variants(k) for k in kernels]
    assert all(before), before  # every plan kind above ran
    for rows in (7, 16, 120, 512, 1000, 2048):
        x = _rand((rows, width), torch.bfloat16)
        wg.softmax(x), wg.add_rms_norm(x, x, w), wg.row_sum(x)
    assert [compiled_variants(k) for k in kernels] == before
    from warpgauge.kernels import rmsnorm_backward as bwd_k

    h, dy, w2 = (
        _rand((300, 4096), torch.bfloat16, 3),
        _rand((300, 4096), torch.bfloat16, 4),
        w[:4096],
    )
    rms_k.add_rms_norm_backward(dy, None, h, w2.contiguous(), 1e-6)
    n = compiled_variants(bwd_k._rms_bwd_resident)
    for rows in (1, 2, 17, 1024, 4097):  # 1-2 rows: one row group, dw written directly
        h, dy = _rand((rows, 4096), torch.bfloat16, 5), _rand((rows, 4096), torch.bfloat16, 6)
        rms_k.add_rms_norm_backward(dy, None, h, w2.contiguous(), 1e-6)
    assert compiled_variants(bwd_k._rms_bwd_resident) == n


def test_new_row_counts_reuse_compiled_kernels_wider():
    """Width 131072: split (few rows, 32 chunks each), cooperative 2048 (inputs below half of
    L2) and 4096, and looped cooperative (inputs past 8x L2) softmax plans each compile once for
    the width."""
    from warpgauge.kernels import softmax_coop

    width = 131072
    # split, coop 2048 (16 x 64 chunks, 4 MB), coop 4096 (512 rows), looped coop (1 GiB)
    for rows in (3, 16, 512, 4096):
        wg.softmax(_rand((rows, width), torch.bfloat16))
    kernels = [softmax_k._softmax_coop, softmax_coop._softmax_coop_loop,
               softmax_k._softmax_split_stats]  # fmt: skip
    before = [compiled_variants(k) for k in kernels]
    assert all(before), before
    for rows in (1, 7, 64, 100, 120, 200, 1000):
        x = _rand((rows, width), torch.bfloat16)
        assert_close(wg.softmax(x), softmax_ref(x), relative=True)
    assert [compiled_variants(k) for k in kernels] == before


def test_rms_backward_split_new_row_counts_reuse_compiled_kernels():
    """The split backward with dw folded into its write pass (few wide rows): one compile per
    width over row counts 1-128 (the row groups and chunk counts are runtime arguments), dx and
    dw against FP64 at each."""
    from warpgauge.kernels import rmsnorm_backward as bwd

    width = 65544  # aligned (the fold's widths), not a power of two
    w = _rand((width,), torch.bfloat16, 3)
    ks = [bwd._rms_bwd_split_stats, bwd._rms_bwd_split_write_dw, bwd._rms_dw_finish]
    before = None
    for rows in (3, 5, 1, 16, 64, 100, 128):
        h, dy = _rand((rows, width), torch.bfloat16, rows), _rand((rows, width), torch.bfloat16, 2)
        assert bwd.bwd_plan(rows, width, h.device).kind == "split"
        dx, dw = bwd.add_rms_norm_backward(dy, None, h, w, 1e-6)
        h64, w64 = h.double().requires_grad_(), w.double().requires_grad_()
        (h64 * torch.rsqrt(h64.square().mean(-1, keepdim=True) + 1e-6) * w64).backward(dy.double())
        assert_close(dx, h64.grad.to(dx.dtype), msg=f"dx {rows}")
        assert_close(dw, w64.grad.to(dw.dtype), msg=f"dw {rows}")
        if rows == 5:  # 3 and 5: one group and several (the finish kernel) compiled
            before = [compiled_variants(k) for k in ks]
    assert all(before) and [compiled_variants(k) for k in ks] == before


@pytest.mark.parametrize("shape", [(4096, 4096), (1000, 2880), (300, 50257)])
def test_rms_weight_grad_bit_identical_100_runs(shape):
    """dw from fixed-order FP32 partials: bit-identical over 100 runs, no atomics."""
    rows, width = shape
    h, dy = _rand(shape, torch.bfloat16, 7), _rand(shape, torch.bfloat16, 8)
    w = _rand((width,), torch.bfloat16, 9)
    dx0, dw0 = rms_k.add_rms_norm_backward(dy, None, h, w, 1e-6)
    for _ in range(100):
        dx, dw = rms_k.add_rms_norm_backward(dy, None, h, w, 1e-6)
        assert torch.equal(dw, dw0) and torch.equal(dx, dx0)


def test_frozen_weight_gpu():
    x = _rand((512, 4096), torch.bfloat16, 10).requires_grad_()
    r = _rand((512, 4096), torch.bfloat16, 11).requires_grad_()
    w = _rand((4096,), torch.bfloat16, 12)
    y, h = wg.add_rms_norm(x, r, w)
    (y.float().sum() + h.float().sum()).backward()
    assert w.grad is None and x.grad is not None and torch.equal(x.grad, r.grad)


def test_opcheck_row_ops():
    x = _rand((8, 300), torch.bfloat16).requires_grad_()
    r = _rand((8, 300), torch.bfloat16).requires_grad_()
    w = _rand((300,), torch.bfloat16).requires_grad_()
    y = _rand((8, 300), torch.bfloat16)
    ops = torch.ops.warpgauge
    torch.library.opcheck(ops.softmax, (x,))
    torch.library.opcheck(ops.softmax_backward, (y.softmax(-1), y))
    torch.library.opcheck(ops.add, (x, r))
    torch.library.opcheck(ops.row_sum, (x, None))
    torch.library.opcheck(ops.row_sum, (x, torch.float32))
    torch.library.opcheck(ops.add_rms_norm, (x, r, w, 1e-6))
    torch.library.opcheck(ops.add_rms_norm_backward, (y, y, x.detach(), w.detach(), 1e-6))
    torch.library.opcheck(ops.add_rms_norm_backward, (y, None, x.detach(), w.detach(), 1e-6))


def test_compile_fullgraph_dynamic_rows():
    """The compiled graph traces the registered ops and matches eager for several row counts.
    Inductor compiles the user kernels itself and may contract multiplies into FMAs differently,
    which can flip a BF16 rounding by one ulp (seen on the H200, results/h200-session2): each
    intermediate is compared with the tolerance of its dtype, not bit for bit."""
    w = _rand((1024,), torch.bfloat16, 1)

    def block(x, r):
        y, h = wg.add_rms_norm(x, r, w)
        p = wg.softmax(y)
        z = wg.add(h, y)
        return y, h, p, z, wg.row_sum(z, torch.float32)

    compiled = torch.compile(block, fullgraph=True, dynamic=True)
    for rows in (17, 64, 333):
        x, r = _rand((rows, 1024), torch.bfloat16, rows), _rand((rows, 1024), torch.bfloat16, 2)
        got, want = compiled(x, r), block(x, r)
        for name, g, e in zip(("y", "h", "p", "z"), got, want):
            assert g.shape == e.shape
            assert_close(g, e, msg=f"rows={rows} {name}")
        # the FP32 sum of z against the FP64 sum of the compiled z itself (its own input)
        assert_close(got[4], row_sum_ref(got[3], torch.float32), msg=f"rows={rows} sum")


@pytest.mark.parametrize("shape", [(100, 50257), (3, 65537), (512, 262144)])
def test_coop_plans_deterministic_and_compiled(shape):
    """Cooperative plans on the GPU: rows' programs really run together (results are bit-identical
    over 20 calls: the chunk statistics are merged in a fixed order), opcheck passes, and
    torch.compile(fullgraph) traces the launchers' zeroed statistics slots."""
    rows, width = shape
    x, r = _rand(shape, torch.bfloat16, 11, 3.0), _rand(shape, torch.bfloat16, 12)
    w = _rand((width,), torch.bfloat16, 13)
    p = RowPlan.coop(4096, 4)
    first = softmax_k.softmax(x, plan=p), rms_k.add_rms_norm(x, r, w, 1e-6, plan=p)
    assert_close(first[0], softmax_ref(x), relative=True)
    assert_close(first[1][0], add_rms_norm_ref(x, r, w, 1e-6)[0])
    from warpgauge.kernels import row_sum as row_sum_k

    s0 = row_sum_k.row_sum(x, plan=RowPlan.coop(16384, 8))
    assert_close(s0, row_sum_ref(x))
    for _ in range(20):
        assert torch.equal(softmax_k.softmax(x, plan=p), first[0])
        assert torch.equal(rms_k.add_rms_norm(x, r, w, 1e-6, plan=p)[0], first[1][0])
        assert torch.equal(row_sum_k.row_sum(x, plan=RowPlan.coop(16384, 8)), s0)
    if rows <= 100:
        ops = torch.ops.warpgauge
        torch.library.opcheck(ops.softmax, (x,))
        torch.library.opcheck(ops.add_rms_norm, (x, r, w, 1e-6))
        torch.library.opcheck(ops.row_sum, (x, None))

    def block(x, r):
        y, h = wg.add_rms_norm(x, r, w)
        return wg.softmax(y), wg.row_sum(h, torch.float32)

    got, want = torch.compile(block, fullgraph=True, dynamic=True)(x, r), block(x, r)
    assert_close(got[0], want[0], relative=True)
    assert_close(got[1], want[1])


# row_sum's persistent tile plans and add_rms_norm's early weight load at full size (rowsum9).
ROW_SUM_PERSIST = [
    (16384, 4096, RowPlan("resident", 4096, 4, programs_per_sm=8)),
    (16380, 4097, RowPlan("resident", 4096, 8, rows=2, programs_per_sm=4)),  # aligned body
    (74898, 896, RowPlan("resident", 1024, 8, rows=4, programs_per_sm=8)),
    (5, 16384, RowPlan("resident", 16384, 8, programs_per_sm=4)),  # fewer rows than programs
]


@pytest.mark.parametrize("rows,width,plan", ROW_SUM_PERSIST, ids=lambda v: str(v)[:24])
def test_row_sum_persistent_full_size(rows, width, plan):
    from warpgauge.kernels import row_sum as row_sum_k

    x = _rand((rows, width), torch.bfloat16, 11, 3.0)
    assert_close(row_sum_k.row_sum(x, plan=plan), row_sum_ref(x))
    xs = _rand((rows, width + 3), torch.bfloat16, 12)[:, 1 : 1 + width]  # strided rows
    assert_close(row_sum_k.row_sum(xs, torch.float32, plan=plan), row_sum_ref(xs, torch.float32))


@pytest.mark.parametrize(
    "rows,width,plan",
    [
        (1, 4096, RowPlan.resident(4096)),
        (1024, 1024, RowPlan.resident(1024, rows=2)),
        (300, 4097, RowPlan.resident(4097)),
        (64, 131072, RowPlan.coop(4096, 4)),
        (16, 151936, RowPlan.coop(8192, 8)),
    ],  # fmt: skip
    ids=lambda v: str(v)[:24],
)
def test_add_rms_norm_w_early_full_size(rows, width, plan):
    import dataclasses

    p = dataclasses.replace(plan, w_early=True)
    x, r, w = _rand((rows, width), torch.bfloat16, 13), _rand((rows, width), torch.bfloat16, 14), \
        _rand((width,), torch.bfloat16, 15)  # fmt: skip
    y, h = rms_k.add_rms_norm(x, r, w, 1e-6, plan=p)
    y_ref, h_ref = add_rms_norm_ref(x, r, w)
    assert_close(y, y_ref)
    assert_close(h, h_ref)
    y0, h0 = rms_k.add_rms_norm(x, r, w, 1e-6, plan=dataclasses.replace(p, w_early=False))
    assert torch.equal(y, y0) and torch.equal(h, h0)


FAST_PLANS = [
    RowPlan.coop(16384, 8, sub=4096, evict=True, fast_exp=True),
    RowPlan.coop(16384, 8, sub=4096, evict=True, fast_exp=True, fma_exp=1),
    RowPlan.coop(4096, 4, fast_exp=True),
    # the persistent cooperative plan (rows12): 6 per SM (fewer where the registers do not let
    # an SM hold 6: the launcher's bound), two rows ahead, tl.exp
    RowPlan.coop(4096, 4, fast_exp=True, programs_per_sm=6),
    RowPlan.coop(2048, 2, fast_exp=True, programs_per_sm=8, stages=2),
    RowPlan.coop(4096, 4, programs_per_sm=4),
]


@pytest.mark.parametrize("plan", FAST_PLANS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(300, 50257), (64, 131072), (17, 151936), (5, 262147)])
def test_softmax_fast_exp_plans(plan, dtype, shape):
    """ex2.approx.ftz (inline PTX, not run by the CPU tests) and the polynomial exp against the
    FP64 reference, with an all -inf row (zeros), a -inf prefix, a +1000 offset, a NaN row."""
    x = _rand(shape, dtype, 11) * 3
    x[0] = float("-inf")
    x[1, : shape[1] // 2 + 3] = float("-inf")
    x[2] += 1000.0
    x[3, shape[1] // 3] = float("nan")
    y = softmax_k.softmax(x, plan=plan)
    assert torch.equal(y[0].float(), torch.zeros_like(y[0].float()))
    assert torch.isnan(y[3]).all()
    assert_close(y, softmax_ref(x), relative=True)


def test_persistent_coop_grid_stays_resident():
    """A persistent cooperative plan asking for more programs per SM than its kernel's registers
    allow (32 of 4096/4) is bounded by the launcher to what fits (``softmax._pf_fit``, from the
    compiled kernel's registers): correct, and as fast as the plan that fits."""
    import time

    x = _rand((1335, 50257), torch.bfloat16, 21, 3.0)
    ok = RowPlan.coop(4096, 4, fast_exp=True, programs_per_sm=4)
    big = RowPlan.coop(4096, 4, fast_exp=True, programs_per_sm=32)
    ref = softmax_ref(x)
    for p in (ok, big):
        assert_close(softmax_k.softmax(x, plan=p), ref, relative=True)
    torch.cuda.synchronize()
    t = {}
    for p in (ok, big):
        t0 = time.perf_counter()
        for _ in range(5):
            softmax_k.softmax(x, plan=p)
        torch.cuda.synchronize()
        t[p.programs_per_sm] = (time.perf_counter() - t0) / 5
    assert t[32] < 3 * t[4] + 1e-3, t
    fits = list(softmax_k._PF_FIT.values())
    assert fits and all(1 <= f < 32 for f in fits), fits
    grids = []
    real = softmax_k.launch

    def spy(kernel, grid, *a, **kw):
        if kernel is softmax_k._softmax_coop_pf:
            grids.append(grid[0])
        return real(kernel, grid, *a, **kw)

    softmax_k.launch = spy
    try:
        softmax_k.softmax(x, plan=big)
    finally:
        softmax_k.launch = real
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    assert grids and grids[0] <= max(fits) * sm, (grids, fits)


BWD_COOP_PLANS = [
    None,  # the rule
    RowPlan.coop(2048, 4),
    RowPlan.coop(4096, 4),
    RowPlan.coop(8192, 8),
    RowPlan.coop(16384, 8, sub=4096, evict=True),
]


@pytest.mark.parametrize("plan", BWD_COOP_PLANS, ids=lambda p: "rule" if p is None else
                         f"{p.block}-{p.num_warps}-{p.sub}")  # fmt: skip
@pytest.mark.parametrize("shape", [(3, 50257), (64, 131072), (1024, 128256), (200, 262144)],
                         ids=lambda s: f"{s[0]}x{s[1]}")  # fmt: skip
def test_softmax_backward_coop_full_size(shape, plan):
    """The cooperative softmax backward with its row-mates running together (the CPU tests
    exercise its fallback), every chunk size, against FP64; a masked prefix, an all-zero y row
    and a strided dy; two calls give the same bits (partials added in chunk order)."""
    from warpgauge.reference import softmax_bwd_ref

    rows, width = shape
    x = _rand(shape, torch.float32, 3, 3.0)
    x[0, : width // 2] = float("-inf")
    y = torch.softmax(x, -1).to(torch.bfloat16)
    y[-1] = 0.0
    dy = _rand((rows, 2 * width), torch.bfloat16, 4)[:, ::2]
    dx = softmax_k.softmax_backward(y, dy, plan=plan)
    assert_close(dx, softmax_bwd_ref(y, dy), msg=f"{shape} {plan}")
    assert torch.equal(dx[-1], torch.zeros_like(dx[-1]))
    assert torch.equal(softmax_k.softmax_backward(y, dy, plan=plan), dx)


def test_softmax_backward_new_row_counts_reuse_compiled_kernels():
    """The backward's rule over row counts 1-4096 at two wide widths: each kernel it takes
    compiles once per width (rows are runtime arguments), every result against FP64."""
    from warpgauge.kernels import softmax_backward as bwd
    from warpgauge.reference import softmax_bwd_ref

    ks = [bwd._softmax_bwd_coop, bwd._softmax_bwd_split_stats, bwd._softmax_bwd_looped,
          bwd._softmax_bwd_resident]  # fmt: skip
    for width in (65537, 131072):
        before = None
        for i, rows in enumerate((1, 64, 2048, 3, 100, 4096, 7, 1000)):
            y = torch.softmax(_rand((rows, width), torch.float32, rows, 3.0), -1).to(torch.bfloat16)
            dy = _rand((rows, width), torch.bfloat16, rows + 1)
            assert_close(softmax_k.softmax_backward(y, dy), softmax_bwd_ref(y, dy),
                         msg=f"{rows}x{width}")  # fmt: skip
            if i == 2:  # 1, 64, 2048 rows: every plan kind the rule takes at wide widths
                before = [compiled_variants(k) for k in ks]
        assert [compiled_variants(k) for k in ks] == before, width
