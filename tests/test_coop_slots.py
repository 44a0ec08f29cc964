"""Self-clearing statistics slots of the cooperative row kernels (``_rows.coop_slots``).

With ``SELF_RESET`` (off by default: measured no faster on the H200, ``_rows.py``) the kernels
clear the slots and row counters they used, so eager launches on a stream share one zeroed
buffer and need no fill kernel. Under the interpreter every program
but a row's last times out on its row-mates and computes their statistics itself, so these
tests run the clearing through its fallback path; the GPU tests run it with programs in flight
together (``tests/gpu/test_rows_gpu.py``). A clear that misses a slot leaves a stale statistic
that the next launch takes as its own: the buffer is checked all zero after every call and the
calls after the first are checked against FP64.
"""

import pytest
import torch

from warpgauge._device import interpreter_enabled
from warpgauge.kernels import _launch, _rows
from warpgauge.kernels import rmsnorm as rms_k
from warpgauge.kernels import row_sum as row_sum_k
from warpgauge.kernels import softmax as softmax_k
from warpgauge.kernels.plans import RowPlan
from warpgauge.reference import add_rms_norm_ref, assert_close, softmax_bwd_ref, softmax_ref


@pytest.fixture
def eager(monkeypatch):
    """Launchers as the public ops run them (wrap-triton dispatch off), a fresh buffer cache."""
    from torch._library.triton import wrap_triton_enabled

    monkeypatch.setattr(wrap_triton_enabled, "value", False, raising=False)
    monkeypatch.setattr(_rows, "_SLOTS", {})
    monkeypatch.setattr(_launch, "WORKSPACES", dict(_launch.WORKSPACES))
    monkeypatch.setattr(_rows, "SELF_RESET", True)
    assert not _rows._tracing()


def _buffer():
    (buf,) = _rows._SLOTS.values()
    return buf


PLANS = [
    RowPlan.coop(256, 2),
    RowPlan.coop(256, 2, fast_exp=True),
    RowPlan.coop(512, 2, sub=128, evict=True),
    RowPlan.coop(512, 2, sub=128, evict=True, fast_exp=True),
]


@pytest.mark.parametrize("plan", PLANS)
def test_softmax_calls_share_a_buffer_left_zeroed(eager, plan, device):
    g = torch.Generator().manual_seed(3)
    for rows, width in ((3, 1001), (5, 700), (3, 1001), (2, 2049)):
        x = (torch.randn(rows, width, generator=g) * 4).to(torch.bfloat16).to(device)
        y = softmax_k.softmax(x, plan=plan)
        assert_close(y, softmax_ref(x), msg=f"{rows}x{width} {plan}")
        assert int(_buffer().count_nonzero()) == 0, f"slots left set after {rows}x{width}"
    assert _launch.WORKSPACES.get(_buffer().data_ptr()) is not None  # a replay's constant


def test_add_rms_norm_and_backward_clear_their_slots(eager, device):
    g = torch.Generator().manual_seed(4)
    for plan in (RowPlan.coop(256, 2), RowPlan.coop(512, 2, sub=128, evict=True)):
        for rows, width in ((4, 1001), (2, 3000)):
            x, r = (torch.randn(2, rows, width, generator=g).to(torch.bfloat16)).to(device)
            w = torch.randn(width, generator=g).to(torch.bfloat16).to(device)
            y, h = rms_k.add_rms_norm(x, r, w, 1e-6, plan=plan)
            y_ref, h_ref = add_rms_norm_ref(x, r, w, 1e-6)
            assert_close(y, y_ref, msg=f"{rows}x{width} {plan}")
            assert int(_buffer().count_nonzero()) == 0
    for plan in (RowPlan.coop(256, 2), RowPlan.coop(256, 2, sub=64, evict=True)):
        y = torch.softmax(torch.randn(3, 1001, generator=g, dtype=torch.float64) * 3, -1)
        y = y.to(torch.bfloat16).to(device)
        dy = torch.randn(3, 1001, generator=g).to(torch.bfloat16).to(device)
        dx = softmax_k.softmax_backward(y, dy, plan=plan)
        assert_close(dx, softmax_bwd_ref(y, dy), msg=str(plan))
        assert int(_buffer().count_nonzero()) == 0


@pytest.mark.skipif(
    not interpreter_enabled(),
    reason="on a GPU the row-mate's own publish overwrites the stale slot before most reads",
)
def test_a_stale_slot_would_be_read(eager, device):
    """The check above can fail: a buffer holding a stale statistic gives a wrong softmax (under
    the interpreter, where the programs that read it run before its owner publishes)."""
    x = torch.randn(2, 1001).to(torch.bfloat16).to(device)
    plan = RowPlan.coop(256, 2)
    softmax_k.softmax(x, plan=plan)
    buf = _buffer()
    buf[1] = (1 << 62) | 12345  # row 0, chunk 1: a (max, sum) pair no program wrote
    y = softmax_k.softmax(x, plan=plan)
    with pytest.raises(AssertionError):
        assert_close(y, softmax_ref(x))


def test_fresh_slots_when_off_too_large_or_row_sum(eager, monkeypatch, device):
    x = torch.randn(3, 1001).to(torch.bfloat16).to(device)
    monkeypatch.setattr(_rows, "SELF_RESET", False)
    assert_close(softmax_k.softmax(x, plan=RowPlan.coop(256, 2)), softmax_ref(x))
    assert _rows._SLOTS == {}
    monkeypatch.setattr(_rows, "SELF_RESET", True)
    monkeypatch.setattr(_rows, "SLOTS_CACHED", 3 * 4)  # 3 rows x (4 chunks + 1) do not fit
    assert_close(softmax_k.softmax(x, plan=RowPlan.coop(256, 2)), softmax_ref(x))
    assert _rows._SLOTS == {}
    monkeypatch.setattr(_rows, "SLOTS_CACHED", 1 << 16)
    row_sum_k.row_sum(x, plan=RowPlan.coop(256, 2))
    assert _rows._SLOTS == {}  # row_sum's kernel does not clear: never the shared buffer


def test_traced_calls_take_fresh_slots(eager, monkeypatch):
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert _rows._tracing()
    t = _rows.coop_slots(2, 3, torch.device("cpu"))
    assert t.shape == (8,) and _rows._SLOTS == {}
