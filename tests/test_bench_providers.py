"""The operator registry on the CPU: its shape, the eager contracts against the FP64 references,
the tinygemm / gemlite weight conversions (the zero-point convention and nibble order), and that
every per-operator table is derived from the registry. The test tables below are themselves
derived from it (operators, providers, test shapes)."""

from __future__ import annotations

import re

import pytest
import torch

from warpgauge.bench import gates, operators, providers
from warpgauge.bench.operators import Operator
from warpgauge.bench.operators import operators as all_ops
from warpgauge.bench.suite import parse_shape

OPS = all_ops()
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: kernels via the Triton interpreter
# Eager (non-warpgauge, non-compile, non-peer) providers of every operator: gated on the CPU.
EAGER = [(op, p.name) for op, o in OPS.items() for p in o.providers(()) if p.family == "pytorch"
         and p.name != "tinygemm"]  # fmt: skip


def _shape(op: str) -> dict:
    o = OPS[op]
    return parse_shape(op, o.test_shape, o.settings)[1]


def test_registry_shape():
    reg = providers.registry()
    assert list(reg) == ["softmax", "add_rms_norm", "row_sum", "add", "gemm", "int4_linear"]
    for op, spec in reg.items():
        names = [p.name for p in spec.providers]
        assert len(names) == len(set(names)), op
        assert all(re.fullmatch(r"[a-z][a-z0-9_]*", n) for n in names)
        assert sum(p.baseline for p in spec.providers) == 1, f"{op}: exactly one baseline"
        assert {p.family for p in spec.providers} <= set(providers.FAMILIES)
        assert names[0] == "warpgauge"
        modes = [p.compile_mode for p in spec.providers if p.family == "compile"]
        assert modes == ["default", "max-autotune", "max-autotune-no-cudagraphs"]
        assert [p.graph_safe for p in spec.providers if p.family == "compile"] == [
            True,
            False,
            True,
        ]
        assert spec.precompile_weight == OPS[op].precompile_weight
    two = providers.registry(["default"])
    assert [p.name for p in two["softmax"].providers if p.family == "compile"] == ["compile"]


def test_per_operator_tables_come_from_the_registry():
    """Suite shape kinds and settings, precompile weights and provider samples: all read from the
    operator modules (nothing lists operators by hand)."""
    from warpgauge.bench import precompile, suite

    assert tuple(OPS) == suite.OPS
    assert {k: o.shape_kind for k, o in OPS.items()} == suite.SHAPE_KINDS
    assert not hasattr(precompile, "_OP_WEIGHT")
    rows = providers.describe("cpu")
    assert {r["op"] for r in rows} == set(OPS)
    for o in OPS.values():
        assert parse_shape(o.name, o.sample, o.settings)  # every sample parses
        assert "default" in o.shapes and "quick" in o.shapes and "host" in o.shapes


def test_a_new_operator_module_is_discovered(monkeypatch):
    """Adding an operator = one module in bench/operators/ declaring OPERATOR."""
    import types

    import warpgauge.bench.operators as pkg

    mod = types.ModuleType("warpgauge.bench.operators.negate")
    op = Operator("negate", order=99, shape_kind="numel", make_inputs=lambda c, g: {},
                  references={"default": lambda i, c: ()}, work=lambda c: (0, 0, "none"),
                  out_specs=lambda c: [], sample="8", shapes={"default": ["8"]})  # fmt: skip
    op.provider("torch", "torch.neg", "pytorch", baseline=True)(lambda i, c: None)
    mod.OPERATOR = op
    real = pkg._discover.__wrapped__()
    monkeypatch.setattr(pkg, "_discover", lambda: (*real, op))
    from warpgauge.bench.suite import load_suite

    s = load_suite("default")
    assert "negate" in s.ops and [g.shape_label for g in s.groups if g.op == "negate"] == ["8"]


def test_decorator_rejects_a_second_baseline_and_duplicates():
    op = Operator("x", order=0, shape_kind="numel", make_inputs=None, references={"default": 0},
                  work=None, out_specs=None, sample="1")  # fmt: skip
    op.provider("a", "a", "pytorch", baseline=True)(lambda i, c: None)
    with pytest.raises(ValueError, match="second baseline"):
        op.provider("b", "b", "pytorch", baseline=True)(lambda i, c: None)
    with pytest.raises(ValueError, match="already has"):
        op.provider("a", "a", "pytorch")(lambda i, c: None)
    with pytest.raises(ValueError, match="family"):
        op.provider("c", "c", "mine")
    with pytest.raises(ValueError, match="reference"):
        op.provider("d", "d", "peer", reference="nope")


def test_describe_on_this_machine():
    rows = providers.describe("cpu")
    by = {(r["op"], r["name"]): r for r in rows}
    assert by[("softmax", "torch")]["available"]
    assert not by[("softmax", "compile")]["available"]
    assert "CUDA" in by[("softmax", "compile")]["reason"]
    assert not by[("int4_linear", "tinygemm")]["available"]
    assert by[("softmax", "quack")]["reason"]  # absent here, with a reason


def _gate(op: str, name: str, dtype: str = "bfloat16"):
    spec = providers.registry()[op]
    ctx = providers.context_for(op, dtype, _shape(op), OPS[op].settings, DEVICE)
    inputs = spec.make_inputs(ctx, torch.Generator(device=DEVICE).manual_seed(1))
    p = spec.provider(name)
    reason = p.available(ctx)
    assert reason is None, reason
    refs = spec.references[p.reference](inputs, ctx)
    built = p.build(inputs, ctx)
    result, _ = gates.run_gate(
        built.fn, refs, device=DEVICE, out_buffers=built.out_buffers,
        relative=spec.relative_check,
    )  # fmt: skip
    return result


@pytest.mark.parametrize("op, name", EAGER)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_eager_contracts_pass_their_gate(op, name, dtype):
    if OPS[op].dtypes and dtype not in OPS[op].dtypes:
        dtype = OPS[op].dtypes[0]
    result = _gate(op, name, dtype)
    assert result.ok, result.detail


def test_a_wrong_provider_fails_its_gate():
    """The gate the table above relies on can fail: a softmax off by one ulp-scale shift."""
    spec = providers.registry()["softmax"]
    ctx = providers.context_for("softmax", "bfloat16", _shape("softmax"), {}, DEVICE)
    inputs = spec.make_inputs(ctx, torch.Generator(device=DEVICE).manual_seed(1))
    refs = spec.references["default"](inputs, ctx)
    x = inputs["x"]
    bad = gates.compare_outputs(torch.softmax(x.float() * 1.05, -1).to(x.dtype), refs, True)
    assert not bad.ok


def test_inputs_are_seeded_random_and_nonzero():
    spec = providers.registry()["add_rms_norm"]
    ctx = providers.context_for("add_rms_norm", "bfloat16", _shape("add_rms_norm"), {}, "cpu")
    a = spec.make_inputs(ctx, torch.Generator().manual_seed(5))
    b = spec.make_inputs(ctx, torch.Generator().manual_seed(5))
    c = spec.make_inputs(ctx, torch.Generator().manual_seed(6))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["x"], c["x"])
    assert (a["x"] != 0).float().mean() > 0.99 and a["x"].std() > 0.5


@pytest.mark.parametrize("flags", ["at", "bt", "sliced", "at,bt,sliced"])
def test_gemm_layouts_are_strides_not_copies(flags):
    spec = providers.registry()["gemm"]
    label, shape = parse_shape("gemm", f"24x40x56,{flags}")
    assert label == f"24x40x56,{flags}"
    ctx = providers.context_for("gemm", "bfloat16", shape, {}, "cpu")
    inp = spec.make_inputs(ctx, torch.Generator().manual_seed(0))
    a, b = inp["a"], inp["b"]
    assert a.shape == (24, 56) and b.shape == (56, 40)
    if "at" in flags:
        assert a.stride(0) == 1
    if "bt" in flags:
        assert b.stride(0) == 1
    if "sliced" in flags:
        assert max(a.stride()) > (24 if "at" in flags else 56)
    result = gates.compare_outputs(torch.mm(a, b), spec.references["default"](inp, ctx))
    assert result.ok, result.detail


def test_int4_work_model_and_references_differ_only_by_weight_rounding():
    spec = providers.registry()["int4_linear"]
    ctx = providers.context_for("int4_linear", "bfloat16", _shape("int4_linear"), {}, "cpu")
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
    u = (providers.int4_values(qw).to(torch.int32) + 8).contiguous()  # CPU op: int32 (N, K)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(u, 8)
    sz = providers.tinygemm_scales_and_zeros(qw.scales)
    assert sz.shape == (K // 128, N, 2) and bool((sz[..., 1] == 0).all())
    y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, 128, sz)
    ref = int4_linear_ref(x, qw.dequantize(torch.bfloat16).float())
    assert gates.compare_outputs(y, (ref,)).ok


@pytest.mark.parametrize("op", list(OPS))
def test_warpgauge_providers_through_the_interpreter(op):
    """The warpgauge closures call the public API (here under the Triton interpreter)."""
    result = _gate(op, "warpgauge", (OPS[op].dtypes or ("bfloat16",))[0])
    assert result.ok, result.detail


def test_compat_shim_keeps_the_runner_interface():
    for name in ("OpSpec", "Provider", "Built", "BuildContext", "registry", "context_for"):
        assert getattr(providers, name) is getattr(operators, name)
    assert providers.DTYPE_BY_NAME["bfloat16"] is torch.bfloat16
