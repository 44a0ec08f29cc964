"""``warpgauge roofline RUN``: achieved throughput against arithmetic intensity under the run's
measured roofs, per operator; which roof binds each point and its fraction of that roof.

- ``ceilings``: the roofs from ``run.json`` and ``ceilings.json`` (calibration-only runs and runs
  with confirmation runs alike).
- ``points``: the points, the applicability of each roof per operator, the JSON summary.
- ``draw``: matplotlib panels.

``plot(run_dir, target)`` is the one call a report needs; nothing heavy is imported here.
"""

from __future__ import annotations


def summary(run_dir, lane: str = "cold") -> dict:
    """The roofline summary of ``run_dir`` (a dict; see docs/roofline.md)."""
    from .cli import build_summary

    return build_summary(run_dir, lane)


def plot(run_dir, target, lane: str = "cold") -> dict:
    """Draw the roofline of ``run_dir`` onto ``target`` and return the summary it drew.

    ``target``: a path (a PNG with one panel per operator is written there), a matplotlib
    ``Figure`` (panels are added to it) or a single ``Axes`` (every operator on it, one colour
    per operator, warpgauge as stars)."""
    from .cli import plot_to

    return plot_to(run_dir, target, lane)


def markdown(run_dir, lane: str = "cold") -> str:
    """The roofs and each operator's best warpgauge point as Markdown (for a report)."""
    from .points import markdown as md

    return md(summary(run_dir, lane))
