"""Suite parsing: the packaged suites (real model shapes), their quick subsets, registry shape
sets, grids, filters, a user file, and clear errors."""

from __future__ import annotations

import pytest

from warpgauge.bench.suite import (
    MODE_SUITES,
    MODES,
    Suite,
    SuiteError,
    load_suite,
    packaged_suites,
    parse_shape,
    parse_suite,
)

ROW_OPS = ("softmax", "add_rms_norm")


def _labels(s, op):
    return {g.shape_label for g in s.groups if g.op == op}


def _widths(s, op):
    return {g.shape["width"] for g in s.groups if g.op == op}


def test_default_suite_holds_real_model_shapes():
    s = load_suite("default")
    assert s.mode == "fwd" and s.shape_set == "default"
    assert s.ops == ["softmax", "add_rms_norm", "row_sum", "add", "gemm", "int4_linear"]
    assert s.lanes == ("cold", "warm") and s.max_minutes == 9.0
    for op in ROW_OPS:
        w = _widths(s, op)
        assert {2048, 2880, 3584, 4096, 5120, 7168, 8192, 14336, 16384} <= w, op  # hidden sizes
        assert {32000, 4097, 32769, 65537} <= w, op  # a vocabulary, just past powers of two
        odd = {x for x in w if x & (x - 1)}
        assert len(odd) >= 8 and sum(x > 30000 for x in odd) >= 3 and max(odd) > 65536, op
        rows = {g.shape["rows"] for g in s.groups if g.op == op}
        assert min(rows) == 1 and max(rows) == 32768, op
    assert {128256, 151936, 262144} <= _widths(s, "softmax")  # tokenizer vocabularies
    gemm = [g.shape for g in s.groups if g.op == "gemm"]
    squares = {g["M"] for g in gemm if g["M"] == g["N"] == g["K"]}
    assert {256, 8192} <= squares
    ms = {g["M"] for g in gemm}
    assert 1 in ms and 64 in ms and 16384 in ms
    odd16 = [g for g in gemm if any(g[k] % 16 for k in "MNK")]
    assert any(g["M"] % 16 and not g["N"] % 16 and not g["K"] % 16 for g in odd16)  # M alone
    assert any(g["N"] % 16 and not g["M"] % 16 and not g["K"] % 16 for g in odd16)  # N alone
    assert any(g["K"] % 16 and not g["M"] % 16 and not g["N"] % 16 for g in odd16)  # K alone
    assert any(all(g[k] % 16 for k in "MNK") for g in odd16)  # all together
    assert any(g.get("at") for g in gemm) and any(g.get("bt") for g in gemm)
    assert any(g.get("sliced") for g in gemm)
    int4 = [g.shape for g in s.groups if g.op == "int4_linear"]
    assert {1, 4, 16} <= {g["M"] for g in int4} and any(17 <= g["M"] <= 256 for g in int4)
    assert {"M": 1, "N": 128256, "K": 4096, "group_size": 128} in int4
    assert {g.dtype for g in s.groups if g.op == "int4_linear"} == {"bfloat16"}
    ids = s.case_ids()
    assert len(ids) == len(set(ids)) == 2 * len(s.groups)
    # lean enough for one ~9-minute H200 run (the last full run: 164 cases in 6.3 minutes)
    assert len(ids) <= 190


def test_quick_subset_and_filters():
    full, quick = load_suite("default"), load_suite("default", quick=True)
    assert quick.quick and 0 < len(quick.groups) < len(full.groups) / 2
    assert set(quick.ops) == set(full.ops)
    assert quick.sampling.target_ms < full.sampling.target_ms
    only = load_suite("default", quick=True, ops=["gemm"], lanes=["cold"])
    assert only.ops == ["gemm"] and only.lanes == ("cold",)
    assert all(c.endswith("/cold") for c in only.case_ids())


def test_shape_filter_globs():
    s = load_suite("default", shapes=["*x4096"])
    assert s.groups and all(g.shape_label.endswith("x4096") for g in s.groups)
    assert "gemm" in s.ops  # 1x4096x4096, ... match too
    t = load_suite("default", shapes=["softmax/1024x*"])
    assert {g.op for g in t.groups} == {"softmax"}
    assert {g.shape_label for g in t.groups} == {"1024x1024", "1024x14336", "1024x151936"}
    assert t.to_config()["selection"]["shapes"] == ["softmax/1024x*"]
    with pytest.raises(SuiteError, match="selection is empty"):
        load_suite("default", shapes=["no-such-shape"])


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_has_a_packaged_suite(mode):
    name = MODE_SUITES[mode]
    assert name in packaged_suites()
    s = load_suite(name)
    assert s.mode == mode and s.groups
    q = load_suite(name, quick=True)
    assert 0 < len(q.groups) <= len(s.groups)
    assert Suite.from_config(s.to_config()) == s


def test_mode_suites_fit_their_budgets():
    host = load_suite("host")
    assert sorted(host.ops) == sorted(load_suite("default").ops)
    assert all(sum(g.op == op for g in host.groups) == 1 for op in host.ops)  # one case per op
    assert host.sampling.host_share == 0.0 and host.lanes == ("warm",)
    plans = load_suite("plans")
    assert len(plans.groups) >= 300
    for op in ("softmax", "add_rms_norm", "row_sum"):
        assert op in plans.ops
    w = {g.shape["width"] for g in plans.groups}
    assert {32000, 50257, 128256, 151936} <= w and {x for x in w if x & (x - 1)}
    assert all(g.shape["rows"] * g.shape["width"] <= 1 << 27 for g in plans.groups)
    training = load_suite("training")
    assert {"softmax", "add_rms_norm", "gemm"} <= set(training.ops)


def test_config_round_trip():
    s = load_suite("default", quick=True).with_overrides(
        mode="host", only=["warpgauge"], skip=["torch"], plugins=["a.b:c"]
    )
    assert Suite.from_config(s.to_config()) == s
    cfg = s.to_config()
    assert {"name", "lanes", "ops", "quick", "seed", "sampling", "mode"} <= set(cfg)
    assert cfg["mode"] == "host" and cfg["providers"]["plugins"] == ["a.b:c"]
    assert cfg["selection"] == {"ops": None, "lanes": None, "quick": True}
    old = dict(cfg)
    for k in ("mode", "selection", "shape_set", "providers", "source_sha256"):
        old.pop(k)
    assert Suite.from_config(old).mode == "fwd"  # runs recorded before modes existed
    with pytest.raises(SuiteError, match="unknown mode"):
        s.with_overrides(mode="training")


def test_user_file(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(
        'name = "mine"\nlanes = ["warm"]\n[ops.add]\nshapes = ["4K", 100]\ndtypes = ["float32"]\n'
        '[ops.gemm]\nshapes = ["64^3"]\n'
    )
    s = load_suite(str(f))
    assert s.name == "mine" and s.lanes == ("warm",) and s.mode == "fwd"
    assert [g.key for g in s.groups] == [
        "add/float32/4K", "add/float32/100", "gemm/float16/64x64x64", "gemm/bfloat16/64x64x64",
    ]  # fmt: skip
    assert s.groups[0].shape == {"numel": 4096}
    assert s.groups[0].seed(1) == s.groups[0].seed(1) != s.groups[1].seed(1)


def test_registry_sets_and_grids():
    s = parse_suite('shape_set = "host"\ndtypes = ["bfloat16"]\n[ops.gemm]\nshapes = ["8^3"]\n')
    assert _labels(s, "gemm") == {"8x8x8"} and _labels(s, "softmax") == {"32x127"}
    t = parse_suite('[ops.softmax]\nshapes = "@quick"\n')
    assert _labels(t, "softmax") == {"1024x1024", "4x32769", "16384x4096", "1024x151936"}
    g = parse_suite('[ops.row_sum]\ngrid = { rows = [1, 8, 64], widths = [100, 1000] , '
                    'max_elements = 8000 }\n')  # fmt: skip
    assert _labels(g, "row_sum") == {"1x100", "8x100", "64x100", "1x1000", "8x1000"}
    with pytest.raises(SuiteError, match="declares no shape set"):
        parse_suite('[ops.softmax]\nshapes = "@nope"\n')
    with pytest.raises(SuiteError, match="grid is for ROWSxWIDTH"):
        parse_suite("[ops.gemm]\ngrid = { rows = [1], widths = [2] }\n")


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
        ('mode = "train"\n[ops.add]\nshapes = ["8"]', "mode must be one of"),
        ('[ops.gemm]\nshapes = ["8^3,tt"]', "unknown layout flag"),
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
    assert parse_shape("gemm", "8x9x10,sliced,at") == (
        "8x9x10,at,sliced", {"M": 8, "N": 9, "K": 10, "at": 1, "sliced": 1},
    )  # fmt: skip
    label, shape = parse_shape("int4_linear", "16x4096x4096", {"group_size": 64})
    assert label == "16x4096x4096,g=64" and shape["group_size"] == 64


def test_every_tuning_grid_loads_with_its_quick_cells_inside_it():
    from pathlib import Path

    files = sorted((Path(__file__).resolve().parents[1] / "tuning").glob("*.toml"))
    assert files, "tuning/*.toml: the prepared plan grids are missing"
    for f in files:
        suite = load_suite(str(f))
        assert suite.mode == "plans", f.name
        cells = {(g.op, g.shape_label) for g, _lane in suite.cases()}
        assert cells, f.name
        quick = {(g.op, g.shape_label) for g in load_suite(str(f), quick=True).groups}
        assert quick and quick <= cells, (f.name, quick - cells)
    dram = load_suite(str(files[0].parent / "plans_dram22.toml"))
    labels = {g.shape_label for g, _ in dram.cases() if g.op == "softmax"}
    assert {"1024x151936", "4096x131072", "8192x32000"} <= labels  # the copy-ceiling misses
    assert "8192x151936" not in labels  # 1.24 G elements: past max_elements
