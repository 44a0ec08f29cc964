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


Z95 = 1.959963984540054  # two-sided 95 % normal quantile


def median_ci(samples: Sequence[float], z: float = Z95) -> tuple[float, float] | None:
    """Distribution-free ~95 % confidence interval of the median from order statistics: with
    ``n`` sorted samples, the ``j``-th and ``k``-th smallest (1-based) for
    ``j = floor((n - z sqrt(n)) / 2)`` and ``k = ceil((n + z sqrt(n)) / 2)``, clamped to
    ``[1, n]`` (for small ``n`` the interval is the whole range). None for fewer than 2 samples."""
    n = len(samples)
    if n < 2:
        return None
    srt = sorted(float(x) for x in samples)
    half = z * math.sqrt(n)
    j = max(1, math.floor((n - half) / 2))
    k = min(n, math.ceil((n + half) / 2))
    return srt[j - 1], srt[k - 1]


def median_rse(samples: Sequence[float]) -> float | None:
    """Relative standard error of the median: half the width of :func:`median_ci` divided by
    ``z`` and by the median. None for fewer than 2 samples or a zero median."""
    ci = median_ci(samples)
    if ci is None:
        return None
    med = median(samples)
    if med <= 0:
        return None
    return (ci[1] - ci[0]) / (2 * Z95) / med
