"""Providers on the CPU: the registry's shape, the eager contracts against the FP64 references,
and the tinygemm / gemlite weight conversions (the zero-point convention and nibble order)."""

from __future__ import annotations

import re

import pytest
import torch

from warpgauge.bench import gates, providers

SMALL = {
    "add": {"numel": 1000},
    "row_sum": {"rows": 4, "width": 300},
    "softmax": {"rows": 4, "width": 300},
    "add_rms_norm": {"rows": 4, "width": 300},
    "gemm": {"M": 16, "N": 24, "K": 40},
    "int4_linear": {"M": 2, "N": 64, "K": 256, "group_size": 128},
}


def test_registry_shape():
    reg = providers.registry()
    assert list(reg) == ["add", "row_sum", "softmax", "add_rms_norm", "gemm", "int4_linear"]
    for op, spec in reg.items():
        names = [p.name for p in spec.providers]
        assert len(names) == len(set(names)), op
        assert all(re.fullmatch(r"[a-z][a-z0-9_]*", n) for n in names)
        assert sum(p.baseline for p in spec.providers) == 1, f"{op}: exactly one baseline"
        assert {p.family for p in spec.providers} <= set(providers.FAMILIES)
        modes = [p.compile_mode for p in spec.providers if p.family == "compile"]
        assert modes == ["default", "max-autotune", "max-autotune-no-cudagraphs"]
        assert [p.graph_safe for p in spec.providers if p.family == "compile"] == [
            True,
            False,
            True,
        ]
    two = providers.registry(["default"])
    assert [p.name for p in two["softmax"].providers if p.family == "compile"] == ["compile"]


def test_describe_on_this_machine():
    rows = providers.describe("cpu")
    by = {(r["op"], r["name"]): r for r in rows}
    assert by[("softmax", "torch")]["available"]
    assert not by[("softmax", "compile")]["available"]
    assert "CUDA" in by[("softmax", "compile")]["reason"]
    assert not by[("int4_linear", "tinygemm")]["available"]
    assert by[("softmax", "quack")]["reason"]  # absent here, with a reason


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: kernels via the Triton interpreter


def _gate(op: str, name: str, dtype: str = "bfloat16"):
    spec = providers.registry()[op]
    ctx = providers.context_for(op, dtype, SMALL[op], {"eps": 1e-6}, DEVICE)
    inputs = spec.make_inputs(ctx, torch.Generator(device=DEVICE).manual_seed(1))
    p = spec.provider(name)
    reason = p.available(ctx)
    assert reason is None, reason
    refs = spec.references[p.reference](inputs, ctx)
    built = p.build(inputs, ctx)
    result, _ = gates.run_gate(built.fn, refs, device=DEVICE, out_buffers=built.out_buffers)
    return result


@pytest.mark.parametrize(
    "op, name",
    [
        ("add", "torch"),
        ("row_sum", "torch"),
        ("row_sum", "torch_native"),
        ("softmax", "torch"),
        ("softmax", "torch_native"),
        ("add_rms_norm", "torch"),
        ("add_rms_norm", "torch_rms_norm"),
        ("gemm", "cublas"),
        ("int4_linear", "dense"),
        ("int4_linear", "unfused"),
    ],
)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_eager_contracts_pass_their_gate(op, name, dtype):
    if op == "int4_linear" and dtype == "float16":
        dtype = "bfloat16"
    result = _gate(op, name, dtype)
    assert result.ok, result.detail


def test_inputs_are_seeded_random_and_nonzero():
    spec = providers.registry()["add_rms_norm"]
    ctx = providers.context_for("add_rms_norm", "bfloat16", SMALL["add_rms_norm"], {}, "cpu")
    a = spec.make_inputs(ctx, torch.Generator().manual_seed(5))
    b = spec.make_inputs(ctx, torch.Generator().manual_seed(5))
    c = spec.make_inputs(ctx, torch.Generator().manual_seed(6))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["x"], c["x"])
    assert (a["x"] != 0).float().mean() > 0.99 and a["x"].std() > 0.5


def test_int4_work_model_and_references_differ_only_by_weight_rounding():
    spec = providers.registry()["int4_linear"]
    ctx = providers.context_for("int4_linear", "bfloat16", SMALL["int4_linear"], {}, "cpu")
    nbytes, flops, model = spec.work(ctx)
    assert flops == 2 * 2 * 64 * 256 and nbytes > 64 * 256 // 2
    inputs = spec.make_inputs(ctx, torch.Generator().manual_seed(0))
    exact = spec.references["default"](inputs, ctx)[0]
    rounded = spec.references["rounded_weight"](inputs, ctx)[0]
    assert gates.compare_outputs(rounded, (exact,)).ok


def test_tinygemm_nibble_order():
    q = torch.tensor([[-8, 7, 0, -1, 3, -4, 5, 6]], dtype=torch.int8)
    u8 = providers.tinygemm_uint8(q)
    assert u8.dtype == torch.uint8 and u8.shape == (1, 4)
    assert (u8 >> 4).tolist() == [[0, 8, 11, 13]]  # even k, high nibble: q + 8
    assert (u8 & 0xF).tolist() == [[15, 7, 4, 14]]  # odd k, low nibble: q + 8


def test_tinygemm_zero_point_convention_on_cpu():
    """PyTorch's CPU int4pack kernel shares tinygemm's (u - 8) * scale + zero convention and the
    (K/group, N, 2) scales_and_zeros layout: with zero = 0 it computes warpgauge's q * scale."""
    if not hasattr(torch.ops.aten, "_weight_int4pack_mm_for_cpu"):
        pytest.skip("this torch has no CPU int4pack kernel")
    from warpgauge.quant import quantize_int4
    from warpgauge.reference import int4_linear_ref

    g = torch.Generator().manual_seed(0)
    N, K = 32, 256
    qw = quantize_int4(torch.randn(N, K, generator=g).to(torch.bfloat16), 128)
    x = torch.randn(3, K, generator=g).to(torch.bfloat16)
    u = (
        providers.int4_values(qw).to(torch.int32) + 8
    ).contiguous()  # the CPU op takes int32 (N, K)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(u, 8)
    sz = providers.tinygemm_scales_and_zeros(qw.scales)
    assert sz.shape == (K // 128, N, 2) and bool((sz[..., 1] == 0).all())
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, 128, sz)
    ref = int4_linear_ref(x, qw.dequantize(torch.bfloat16).float())
    assert gates.compare_outputs(y, (ref,)).ok


@pytest.mark.parametrize("op", list(SMALL))
def test_warpgauge_providers_through_the_interpreter(op):
    """The warpgauge closures call the public API (here under the Triton interpreter)."""
    import warpgauge

    name = "int4_linear" if op == "int4_linear" else op
    if not hasattr(warpgauge, name):
        pytest.skip(f"warpgauge.{name} is not built yet")
    result = _gate(op, "warpgauge")
    assert result.ok, result.detail
