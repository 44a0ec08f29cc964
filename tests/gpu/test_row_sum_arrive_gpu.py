"""row_sum's last-arriver cooperative kernel on the GPU (skipped without CUDA): full-size
results against FP64, bit-identical repeats, counters back at zero, CUDA-graph capture as the
harness does it (no zeroing node in the graph), two streams at once, torch.compile."""

import os

import pytest
import torch

import warpgauge as wg
from warpgauge.kernels import row_sum as row_sum_k
from warpgauge.kernels.plans import RowPlan
from warpgauge.reference import assert_close, row_sum_ref

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

SHAPES = [(64, 131072), (100, 65537), (1024, 151936), (7, 262144), (3000, 40000), (129, 32769)]


def _rand(shape, dtype=torch.bfloat16, seed=0, scale=3.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(shape, generator=g, device="cuda") * scale).to(dtype)


def _zero():
    torch.cuda.synchronize()
    return all(int(b.abs().sum()) == 0 for b in row_sum_k._COUNTERS.values())


def test_harness_capture_has_no_zeroing_node(tmp_path, monkeypatch):
    """Warm-up on a side stream, capture on torch.cuda.graph's own stream (bench/device.py):
    the graph holds the one row_sum kernel, and replays are right for new inputs. (Output
    poisoning off: its NaN fills would be graph nodes too.)"""
    from warpgauge.kernels import _launch

    monkeypatch.setattr(_launch, "POISON", False)
    x = _rand((64, 131072), seed=3)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        wg.row_sum(x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    g.enable_debug_mode()
    with torch.cuda.graph(g):
        y = wg.row_sum(x)
    path = os.path.join(tmp_path, "g.dot")
    g.debug_dump(path)
    dot = open(path).read()
    assert "_row_sum_arrive" in dot, dot[:2000]
    assert "fill" not in dot.lower() and "memset" not in dot.lower(), dot[:4000]  # no zeroing
    for seed in (4, 5, 6):
        x.copy_(_rand(x.shape, seed=seed))
        g.replay()
        torch.cuda.synchronize()
        assert_close(y, row_sum_ref(x))
    assert _zero()


def test_two_streams_at_once():
    xs = [_rand((64, 131072), seed=7), _rand((64, 131072), seed=8)]
    want = [row_sum_ref(x) for x in xs]
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = [[], []]
    for i, s in enumerate(streams):
        s.wait_stream(torch.cuda.current_stream())
    for _ in range(20):
        for i, s in enumerate(streams):
            with torch.cuda.stream(s):
                outs[i].append(wg.row_sum(xs[i]))
    torch.cuda.synchronize()
    for i in range(2):
        for o in outs[i]:
            assert_close(o, want[i])
    assert _zero()


def test_compiled():
    x = _rand((64, 131072), seed=9)

    def f(t):
        return wg.row_sum(t * 2, torch.float32)

    got = torch.compile(f, fullgraph=True)(x)
    assert_close(got, row_sum_ref(x * 2, torch.float32))
    assert _zero()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("plan", [None, RowPlan.coop(16384, 8), RowPlan.coop(4096, 4, evict=True)],
                         ids=["rule", "coop16384", "coop4096ev"])  # fmt: skip
def test_full_size_repeats(shape, plan):
    x = _rand(shape, seed=1)
    base = _rand((shape[0], shape[1] + 5), seed=2)[:, 3 : 3 + shape[1]]  # strided rows
    call = wg.row_sum if plan is None else (lambda t, *a: row_sum_k.row_sum(t, *a, plan=plan))
    y = call(x)
    assert_close(y, row_sum_ref(x))
    assert_close(call(x, torch.float32), row_sum_ref(x, torch.float32))
    assert_close(call(base), row_sum_ref(base))
    for _ in range(10):
        assert torch.equal(call(-x), -y)
        assert torch.equal(call(x), y)
    assert _zero()
