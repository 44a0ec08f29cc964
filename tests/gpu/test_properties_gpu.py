"""Property tests at scale on the GPU: >= 500 examples per operator, forward and backward, FP64.

The same strategies and checks as the CI profile (tests/property_cases.py) with the GPU profile:
rows up to 200, widths 1, 127, 4097 and 40000 (resident, and split or looped by the automatic rule
on the GPU's SM count), all three dtypes, strided and batched views, masks and special values.
Set WARPGAUGE_PROPERTY_COUNTS=FILE to record how many examples each test ran (the counts quoted
in docs/limitations-and-claims.md come from that file).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
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
GPU = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
_COUNTS: dict[str, int] = {}


def _count(name: str) -> None:
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


@GPU
@given(meta=pc.gemm_case(pc.GPU))
def test_gemm(meta):
    pc.check_gemm(meta, "cuda")
    _count("gemm")


@GPU
@given(meta=pc.int4_case(pc.GPU))
def test_int4_linear(meta):
    pc.check_int4(meta, "cuda")
    _count("int4_linear")
