"""Summary statistics of timing samples: pure Python, so every number can be checked by hand.

All values are microseconds. Percentiles interpolate linearly between order statistics (the
"type 7" rule, numpy's default): the p-th percentile of sorted samples ``x[0..n-1]`` is
``x[lo] + (h - lo) * (x[lo + 1] - x[lo])`` with ``h = (n - 1) * p`` and ``lo = floor(h)``. The median
is the 50th percentile (the mean of the two middle samples when ``n`` is even). MAD is the median
of the absolute deviations from the median (unscaled). ``samples_us`` keeps the raw samples in the
order they were taken.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(sorted_samples: Sequence[float], p: float) -> float:
    """The ``p``-quantile (0 <= p <= 1) of already sorted samples, linear interpolation."""
    n = len(sorted_samples)
    if n == 0:
        raise ValueError("percentile of no samples")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be in [0, 1], got {p}")
    h = (n - 1) * p
    lo = math.floor(h)
    if lo >= n - 1:
        return float(sorted_samples[-1])
    frac = h - lo
    a, b = sorted_samples[lo], sorted_samples[lo + 1]
    return float(a + frac * (b - a))


def median(samples: Sequence[float]) -> float:
    return percentile(sorted(samples), 0.5)


def summarize(samples_us: Sequence[float]) -> dict | None:
    """``{median_us, p10_us, p90_us, mad_us, min_us, max_us, mean_us, n, samples_us}``, or None
    for no samples. Raises ValueError for a negative or non-finite sample."""
    xs = [float(x) for x in samples_us]
    if not xs:
        return None
    for x in xs:
        if not math.isfinite(x) or x < 0:
            raise ValueError(f"timing sample {x!r} is not a finite, non-negative number of us")
    srt = sorted(xs)
    med = percentile(srt, 0.5)
    mad = percentile(sorted(abs(x - med) for x in xs), 0.5)
    return {
        "median_us": med,
        "p10_us": percentile(srt, 0.1),
        "p90_us": percentile(srt, 0.9),
        "mad_us": mad,
        "min_us": srt[0],
        "max_us": srt[-1],
        "mean_us": math.fsum(xs) / len(xs),
        "n": len(xs),
        "samples_us": xs,
    }
