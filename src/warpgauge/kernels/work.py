"""Analytical work models: compulsory bytes (each input read once, each output written once) and
FLOPs. TB/s reported by the harness is this *requested* traffic over time, never a claim about
physical DRAM traffic. Each kernel module re-exports its own model as ``work``."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Work:
    bytes: int
    flops: int


def esize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
