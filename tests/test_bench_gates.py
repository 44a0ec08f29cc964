"""Gates: the device-side compare equals reference.compare; poison catches unwritten output."""

from __future__ import annotations

import pytest
import torch

from warpgauge import reference
from warpgauge.bench import gates


def _pair(dtype, n=3000, seed=0):
    g = torch.Generator().manual_seed(seed)
    ref = (torch.randn(n, generator=g) * 3).to(dtype)
    out = (ref.double() * (1 + 1e-3 * torch.randn(n, generator=g, dtype=torch.float64))).to(dtype)
    return out, ref


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("chunk", [7, 1000, 1 << 20])
def test_chunked_compare_matches_one_pass(dtype, chunk):
    out, ref = _pair(dtype)
    out[5], ref[9] = float("nan"), float("nan")  # NaN where the reference is finite, and back
    out[11], ref[11] = float("inf"), float("inf")  # matching infinities pass
    out[13], ref[13] = float("-inf"), float("inf")
    out[100] = ref[100] + 50  # a plainly wrong element
    want = reference.compare(out, ref, chunk=out.numel())
    got = reference.compare(out, ref, chunk=chunk)
    assert got.ok == want.ok is False
    assert (got.n_bad, got.n_nan) == (want.n_bad, want.n_nan)
    for f in ("max_abs_err", "max_rel_err", "worst_ratio"):
        assert getattr(got, f) == pytest.approx(getattr(want, f), rel=1e-12)


def test_chunked_compare_passing_and_empty():
    out, ref = _pair(torch.bfloat16)
    assert reference.compare(ref.clone(), ref, chunk=64).ok
    e = torch.empty(0)
    assert reference.compare(e, e).ok
    with pytest.raises(ValueError):
        reference.compare(torch.zeros(3), torch.zeros(4))


def test_compare_outputs_tuple_and_mismatches():
    out, ref = _pair(torch.float16, seed=3)
    ok = gates.compare_outputs((ref.clone(), ref.clone()), (ref, ref))
    assert ok.ok and ok.n_bad == 0
    bad = gates.compare_outputs((ref.clone(), out + 1), (ref, ref))
    assert not bad.ok and bad.n_bad > 0 and "output 1" in bad.detail
    arity = gates.compare_outputs(ref, (ref, ref))
    assert not arity.ok and "returned 1 output" in arity.detail
    shape = gates.compare_outputs(ref[:10], (ref,))
    assert not shape.ok and "shape" in shape.detail
    dtype = gates.compare_outputs(ref.float(), (ref,))
    assert not dtype.ok and "dtype" in dtype.detail
    rec = bad.record()
    assert set(rec) == {"ok", "max_abs_err", "max_rel_err", "worst_ratio", "n_bad", "n_nan"}


def test_poison_and_partial_writer_fails():
    x = torch.randn(64)
    buf = torch.zeros(64)
    ints = torch.zeros(4, dtype=torch.int32)
    gates.poison([buf, ints])
    assert torch.isnan(buf).all() and (ints == -1).all()

    def partial():
        buf[:32] = x[:32] * 2  # never writes the rest
        return buf

    result, _ = gates.run_gate(partial, (x * 2,), device="cpu", out_buffers=(buf,))
    assert not result.ok and result.n_nan == 32

    def full():
        torch.mul(x, 2, out=buf)
        return buf

    result, _ = gates.run_gate(full, (x * 2,), device="cpu", out_buffers=(buf,))
    assert result.ok


def test_stale_correct_data_does_not_pass_a_lazy_writer():
    """Without poisoning, a buffer left over from a correct run would hide an unwritten region."""
    x = torch.randn(16)
    buf = x * 2  # a previous provider's correct answer sits in the buffer

    def lazy():
        buf[:8] = x[:8] * 2
        return buf

    result, _ = gates.run_gate(lazy, (x * 2,), device="cpu", out_buffers=(buf,))
    assert not result.ok and result.n_nan == 8


def test_softmax_gate_is_relative_and_catches_zeroed_probabilities():
    """Probabilities span orders of magnitude: the softmax gate drops the peak-scaled atol, so a
    provider that zeroes small entries fails it (the peak-scaled check would let it through)."""
    from warpgauge.bench import providers

    assert providers._softmax_spec(()).relative_check
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 4096, generator=g) * 3
    ref = reference.softmax_ref(x.to(torch.bfloat16))
    bad = torch.where(ref.float() < 1e-4, torch.zeros_like(ref), ref)
    assert gates.compare_outputs(bad, (ref,)).ok  # what the peak-scaled check misses
    assert not gates.compare_outputs(bad, (ref,), relative=True).ok
    assert gates.compare_outputs(ref.clone(), (ref,), relative=True).ok
