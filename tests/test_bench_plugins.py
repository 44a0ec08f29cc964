"""Provider plug-ins: --provider package.module:function, the warpgauge.providers entry-point
group, the runnable example in examples/plugin, and a dishonest plug-in the gate catches."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch

from warpgauge.bench import gates, modes, plugins
from warpgauge.bench.operators import context_for
from warpgauge.bench.suite import SuiteError, parse_suite

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "plugin"


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    plugins.unload_all()


def _write(d: Path, name: str, body: str) -> None:
    (d / f"{name}.py").write_text(textwrap.dedent(body))
    sys.modules.pop(name, None)


def _suite(**kw):
    s = parse_suite('lanes = ["warm"]\ndtypes = ["float32"]\n[compile]\nmodes = []\n'
                    '[ops.softmax]\nshapes = ["3x40"]\n')  # fmt: skip
    return s.with_overrides(**kw)


GOOD = """
import torch
from warpgauge.bench.operators import Built

def register(reg):
    @reg.provider("softmax", "mine", "my softmax")
    def build(inputs, ctx):
        x = inputs["x"]
        return Built(lambda: torch.softmax(x.float(), -1).to(x.dtype))

    @reg.provider("softmax", "cheat", "returns a cached answer, skips the work")
    def cheat(inputs, ctx):
        x = inputs["x"]
        cached = torch.softmax(x.float(), -1).to(x.dtype)
        return Built(lambda: torch.zeros_like(cached))
"""


def test_provider_flag_adds_gated_providers(plugin_dir):
    _write(plugin_dir, "wg_plugin_good", GOOD)
    s = _suite(plugins=["wg_plugin_good:register"])
    spec = modes.specs_for(s)["softmax"]
    mine, cheat = spec.provider("mine"), spec.provider("cheat")
    assert mine.family == "peer" and not mine.baseline and mine.plugin == "wg_plugin_good:register"
    ctx = context_for("softmax", "float32", {"rows": 3, "width": 40}, {}, "cpu")
    inputs = spec.make_inputs(ctx, torch.Generator().manual_seed(0))
    refs = spec.references["default"](inputs, ctx)
    ok, _ = gates.run_gate(mine.build(inputs, ctx).fn, refs, device="cpu", relative=True)
    bad, _ = gates.run_gate(cheat.build(inputs, ctx).fn, refs, device="cpu", relative=True)
    assert ok.ok and not bad.ok
    # loading twice in one process registers once; the suite records the plug-in for --resume
    modes.specs_for(s)
    assert [p.name for p in modes.specs_for(s)["softmax"].providers].count("mine") == 1
    assert s.to_config()["providers"]["plugins"] == ["wg_plugin_good:register"]
    only = modes.specs_for(s.with_overrides(only=["mine", "torch"]))["softmax"]
    assert [p.name for p in only.providers] == ["torch", "mine"]


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("nocolon", "package.module:function"),
        ("wg_no_such_module:register", "cannot import"),
        ("wg_plugin_bad:missing", "has no missing"),
        ("wg_plugin_bad:baseline", "cannot be the baseline"),
        ("wg_plugin_bad:raises", "registering failed"),
    ],
)
def test_bad_plugins_say_what_is_wrong(plugin_dir, spec, fragment):
    _write(
        plugin_dir,
        "wg_plugin_bad",
        """
        def baseline(reg):
            reg.provider("softmax", "b", "b", baseline=True)

        def raises(reg):
            raise RuntimeError("boom")
    """,
    )
    with pytest.raises(SuiteError, match=fragment):
        plugins.load([spec])


def test_entry_points_are_found(monkeypatch):
    from importlib import metadata

    class EP:
        value = "their_pkg.bench : register"

    monkeypatch.setattr(metadata, "entry_points",
                        lambda group=None: [EP()] if group == plugins.GROUP else [])  # fmt: skip
    assert plugins.entry_point_specs() == ["their_pkg.bench:register"]


def test_the_example_plugin_registers_and_its_kernel_is_correct(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    sys.modules.pop("my_softmax", None)
    try:
        s = _suite(plugins=["my_softmax:register"])
        spec = modes.specs_for(s)["softmax"]
        p = spec.provider("my_softmax")
        ctx = context_for("softmax", "float32", {"rows": 3, "width": 40}, {}, "cpu")
        assert "CUDA" in p.available(ctx)  # measured on a GPU only
        import my_softmax

        inputs = spec.make_inputs(ctx, torch.Generator().manual_seed(0))
        out = my_softmax.my_softmax(inputs["x"])  # the Triton interpreter on the CPU
        assert gates.compare_outputs(out, spec.references["default"](inputs, ctx), True).ok
        assert (EXAMPLE / "suite.toml").is_file()
        from warpgauge.bench.suite import load_suite

        assert load_suite(str(EXAMPLE / "suite.toml")).ops == ["softmax"]
    finally:
        plugins.unload_all()
