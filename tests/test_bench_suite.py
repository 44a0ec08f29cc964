"""Suite parsing: the packaged default, its quick subset, a user file, and clear errors."""

from __future__ import annotations

import pytest

from warpgauge.bench.suite import (
    Suite,
    SuiteError,
    load_suite,
    packaged_suites,
    parse_shape,
    parse_suite,
)


def test_default_suite():
    s = load_suite("default")
    assert "default" in packaged_suites()
    assert s.ops == ["softmax", "add_rms_norm", "row_sum", "add", "gemm", "int4_linear"]
    assert s.lanes == ("cold", "warm") and s.max_minutes == 9.0
    labels = {op: sorted({g.shape_label for g in s.groups if g.op == op}) for op in s.ops}
    for shape in ("32x127", "1024x1024", "512x4097", "4x32769", "64x131072", "8x16384",
                  "16384x4096", "32768x8192", "8192x32000", "4096x131072"):  # fmt: skip
        assert shape in labels["softmax"] and shape in labels["add_rms_norm"]
    assert labels["add"] == ["16M", "1M", "256M", "257"]
    assert "4096x14336x4096" in labels["gemm"] and "127x255x65" in labels["gemm"]
    assert {g.dtype for g in s.groups if g.op == "int4_linear"} == {"bfloat16"}
    assert {g.shape["M"] for g in s.groups if g.op == "int4_linear"} == {1, 16}
    assert {g.dtype for g in s.groups if g.op == "softmax"} == {"float16", "bfloat16"}
    ids = s.case_ids()
    assert len(ids) == len(set(ids)) == 2 * len(s.groups)
    assert "softmax/bfloat16/32768x8192/cold" in ids
    assert s.compile.modes == ("default", "max-autotune", "max-autotune-no-cudagraphs")


def test_quick_subset_and_filters():
    full, quick = load_suite("default"), load_suite("default", quick=True)
    assert quick.quick and 0 < len(quick.groups) < len(full.groups) / 2
    assert set(quick.ops) == set(full.ops)
    assert quick.sampling.target_ms < full.sampling.target_ms
    only = load_suite("default", quick=True, ops=["gemm"], lanes=["cold"])
    assert only.ops == ["gemm"] and only.lanes == ("cold",)
    assert all(c.endswith("/cold") for c in only.case_ids())


def test_config_round_trip():
    s = load_suite("default", quick=True)
    assert Suite.from_config(s.to_config()) == s
    cfg = s.to_config()
    assert {"name", "lanes", "ops", "quick", "seed", "sampling"} <= set(cfg)


def test_user_file(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(
        'name = "mine"\nlanes = ["warm"]\n[ops.add]\nshapes = ["4K", 100]\ndtypes = ["float32"]\n'
        '[ops.gemm]\nshapes = ["64^3"]\n'
    )
    s = load_suite(str(f))
    assert s.name == "mine" and s.lanes == ("warm",)
    assert [g.key for g in s.groups] == [
        "add/float32/4K", "add/float32/100", "gemm/float16/64x64x64", "gemm/bfloat16/64x64x64",
    ]  # fmt: skip
    assert s.groups[0].shape == {"numel": 4096}
    assert s.groups[0].seed(1) == s.groups[0].seed(1) != s.groups[1].seed(1)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("name = [", "not valid TOML"),
        ('[ops.matmul]\nshapes = ["1x1x1"]', "unknown operator"),
        ('[ops.add]\nshapes = ["12x"]', "is not an element count"),
        ('[ops.softmax]\nshapes = ["128"]', "is not ROWSxWIDTH"),
        ('[ops.add]\nshapes = ["8"]\nwidth = 3', "unknown key"),
        ('colour = 1\n[ops.add]\nshapes = ["8"]', "unknown top-level key"),
        ('lanes = ["hot"]\n[ops.add]\nshapes = ["8"]', "lanes must be"),
        ('[ops.add]\nshapes = ["8"]\ndtypes = ["int8"]', "dtypes must be"),
        ('[ops.int4_linear]\nshapes = ["1x64x100"]', "multiple of group_size"),
        ('[sampling]\nrounds = 0\n[ops.add]\nshapes = ["8"]', "sampling"),
        ('[compile]\nmodes = ["fast"]\n[ops.add]\nshapes = ["8"]', "unknown mode"),
        ('[ops.add]\nshapes = ["8", "8"]', "listed twice"),
        ("seed = 1", "no [ops."),
    ],
)
def test_bad_suites_say_what_is_wrong(text, fragment):
    with pytest.raises(SuiteError, match="bad.toml") as e:
        parse_suite(text, source="bad.toml")
    assert fragment in str(e.value)


def test_bad_selection():
    with pytest.raises(SuiteError, match="unknown operator"):
        load_suite("default", ops=["matmul"])
    with pytest.raises(SuiteError, match="unknown lane"):
        load_suite("default", lanes=["hot"])
    with pytest.raises(SuiteError, match="no suite named"):
        load_suite("nonexistent")
    with pytest.raises(SuiteError, match="does not exist"):
        load_suite("/no/such/suite.toml")
    with pytest.raises(SuiteError, match="selection is empty"):
        parse_suite('[ops.add]\nshapes = ["8"]', quick=True)


def test_parse_shape_labels():
    assert parse_shape("add", "256M") == ("256M", {"numel": 256 << 20})
    assert parse_shape("add", "1048576") == ("1M", {"numel": 1 << 20})
    assert parse_shape("add", "257") == ("257", {"numel": 257})
    assert parse_shape("gemm", "512^3") == ("512x512x512", {"M": 512, "N": 512, "K": 512})
    label, shape = parse_shape("int4_linear", "16x4096x4096", {"group_size": 64})
    assert label == "16x4096x4096,g=64" and shape["group_size"] == 64
