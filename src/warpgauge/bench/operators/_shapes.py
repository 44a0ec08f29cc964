"""Shape sets shared by several operator modules, and the tolerance probe's random shapes."""

from __future__ import annotations

import math
import random

# Shapes that reach every row plan (resident, looped, split) at odd and friendly widths: the
# accuracy mode's fixed part (the same list scripts/grad_accuracy.py used).
ROW_ACCURACY = ["32x127", "1024x1024", "512x4097", "16384x4096", "1024x16384", "8x16384",
                "4x32769", "64x131072"]  # fmt: skip

# Probe widths: each compiles kernels once; row counts are runtime, so they vary freely.
PROBE_WIDTHS = (61, 1000, 4096, 8193, 32769)


def probe_rows(seed: int, n: int = 48, max_numel: int = 1 << 22) -> list[str]:
    """``n`` random ROWSxWIDTH shapes (log-uniform rows 1..4096, widths from PROBE_WIDTHS)."""
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        w = rng.choice(PROBE_WIDTHS)
        r = max(1, min(int(math.exp(rng.uniform(0.0, math.log(4096)))), max_numel // w))
        s = f"{r}x{w}"
        if s not in out:
            out.append(s)
    return out


def probe_mnk(seed: int, nk: list[tuple[int, int]], m_ranges: list[tuple[int, int]],
              n: int = 24) -> list[str]:  # fmt: skip
    rng = random.Random(seed)
    out: list[str] = []
    while len(out) < n:
        N, K = rng.choice(nk)
        M = rng.randint(*rng.choice(m_ranges))
        s = f"{M}x{N}x{K}"
        if s not in out:
            out.append(s)
    return out
