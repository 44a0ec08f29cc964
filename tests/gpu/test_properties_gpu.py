"""Property tests at scale on the GPU: >= 500 examples per operator, forward and backward, FP64.

The same strategies and checks as the CI profile (tests/property_cases.py) with the GPU profile:
rows up to 200, widths 1, 127, 4097 and 40000 (resident, and split or looped by the automatic rule
on the GPU's SM count), all three dtypes, strided and batched views, masks and special values.
Set WARPGAUGE_PROPERTY_COUNTS=FILE to record how many examples each test ran (the counts quoted
in docs/limitations-and-claims.md come from that file). WARPGAUGE_GPU_PROPERTY_SHARD=i/n runs
shard i of n (EXAMPLES/n examples from hypothesis seed i), so n processes share the compile work.

GEMM: every new (M bucket, N, K bucket, layout) autotunes 8 tiles and every stride class compiles
each of them, which would take minutes here; the GEMM property examples therefore run with the
autotuner's list cut to its smallest tile (64x64x64). The tiles themselves are checked at full
size, through the autotuner, by tests/gpu/test_gemm_int4_gpu.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from warpgauge._device import interpreter_enabled

from .. import property_cases as pc

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        not torch.cuda.is_available() or interpreter_enabled(),
        reason="needs a CUDA GPU (and TRITON_INTERPRET unset)",
    ),
]

EXAMPLES = int(os.environ.get("WARPGAUGE_GPU_PROPERTY_EXAMPLES", "500"))
_SHARD, _SHARDS = (int(v) for v in os.environ.get("WARPGAUGE_GPU_PROPERTY_SHARD", "0/1").split("/"))
_settings = settings(
    max_examples=-(-EXAMPLES // _SHARDS),
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def GPU(test):
    return seed(20261201 + _SHARD)(_settings(test))


_COUNTS: dict[str, int] = {}


def _count(name: str) -> None:
    name = f"{name}[{_SHARD}/{_SHARDS}]" if _SHARDS > 1 else name
    _COUNTS[name] = _COUNTS.get(name, 0) + 1
    path = os.environ.get("WARPGAUGE_PROPERTY_COUNTS")
    if path and _COUNTS[name] % 25 == 0:
        _write(Path(path))


def _write(path: Path) -> None:
    old = json.loads(path.read_text()) if path.is_file() else {}
    old.update(_COUNTS)
    path.write_text(json.dumps(old, indent=1, sort_keys=True))


@pytest.fixture(scope="module", autouse=True)
def _record():
    yield
    path = os.environ.get("WARPGAUGE_PROPERTY_COUNTS")
    if path:
        _write(Path(path))


@GPU
@given(meta=pc.row_case(pc.GPU))
def test_add(meta):
    pc.check_add(meta, "cuda")
    _count("add")


@GPU
@given(meta=pc.row_case(pc.GPU))
def test_row_sum(meta):
    pc.check_row_sum(meta, "cuda")
    _count("row_sum")


@GPU
@given(meta=pc.row_case(pc.GPU), mask=st.sampled_from(("none", "prefix", "full", "both")))
def test_softmax(meta, mask):
    pc.check_softmax(meta, "cuda", mask)
    _count("softmax")


@GPU
@given(meta=pc.row_case(pc.GPU), eps=st.sampled_from((1e-6, 1e-5)), with_dh=st.booleans())
def test_add_rms_norm(meta, eps, with_dh):
    pc.check_add_rms_norm(meta, "cuda", eps, with_dh)
    _count("add_rms_norm")


@pytest.fixture(scope="module")
def one_gemm_tile():
    from warpgauge.kernels import gemm as gemm_mod

    kernels = list(gemm_mod._KERNELS.values())
    saved = [k.configs for k in kernels]
    for k in kernels:
        k.configs = [c for c in k.configs if c.kwargs["BLOCK_M"] == c.kwargs["BLOCK_N"] == 64]
        assert len(k.configs) == 1
    yield
    for k, c in zip(kernels, saved):
        k.configs = c


@GPU
@given(meta=pc.gemm_case(pc.GPU))
def test_gemm(meta, one_gemm_tile):
    pc.check_gemm(meta, "cuda")
    _count("gemm")


@GPU
@given(meta=pc.int4_case(pc.GPU))
def test_int4_linear(meta):
    pc.check_int4(meta, "cuda")
    _count("int4_linear")
