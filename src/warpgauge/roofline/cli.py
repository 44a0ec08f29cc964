"""``warpgauge roofline RUN``: the summary JSON and the PNG, written under ``RUN/roofline/`` (or
``--out``) and added to the run's manifest when they are inside the run directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from warpgauge import artifacts

from .ceilings import read_roofs
from .points import summarize


def build_summary(run_dir, lane: str = "cold") -> dict:
    if lane not in ("cold", "warm"):
        raise ValueError(f"lane must be cold or warm, got {lane!r}")
    run = artifacts.load_run(run_dir)
    roofs = read_roofs(run.run, run.ceilings)
    return summarize(run.run, run.cases, roofs, lane)


def plot_to(run_dir, target, lane: str = "cold") -> dict:
    from . import draw as P

    s = build_summary(run_dir, lane)
    if isinstance(target, (str, Path)):
        fig = P.new_figure(s)
        P.draw_grid(fig, s)
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(target, dpi=110)
    elif hasattr(target, "add_subplot"):
        P.draw_grid(target, s)
    else:
        P.draw_combined(target, s)
    return s


def _update_manifest(run_dir: Path, rels: list[str]) -> str:
    try:
        artifacts.update_manifest(run_dir, rels)
        return "manifest updated"
    except ImportError:  # no jsonschema here: recompute from disk in the same format
        from warpgauge.profile.artifact import write_manifest

        write_manifest(run_dir, artifacts.read_json(run_dir / artifacts.RUN_FILE)["run_id"])
        return "manifest recomputed from disk (jsonschema not installed)"


def roofline_cli(run_dir: Path, lane: str = "cold", out: Path | None = None) -> int:
    run_dir = Path(run_dir)
    if not (run_dir / artifacts.RUN_FILE).is_file():
        print(f"warpgauge roofline: {run_dir} has no {artifacts.RUN_FILE}; pass a run directory "
              "(results/<run-id>)", file=sys.stderr)  # fmt: skip
        return 2
    out_dir = Path(out) if out is not None else run_dir / "roofline"
    png = out_dir / f"roofline-{lane}.png"
    try:
        s = plot_to(run_dir, png, lane)
    except ValueError as e:
        print(f"warpgauge roofline: {e}", file=sys.stderr)
        return 2
    js = artifacts.atomic_write_json(out_dir / f"roofline-{lane}.json", s)
    note = ""
    try:
        rels = [p.resolve().relative_to(run_dir.resolve()).as_posix() for p in (js, png)]
        note = _update_manifest(run_dir, rels)
    except ValueError:
        pass  # written outside the run directory: not part of its manifest
    print_table(s)
    print(f"wrote {js} and {png}" + (f" ({note})" if note else ""))
    return 0


def print_table(s: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    mem = s["roofs"]["memory"]
    t = Table(title=f"roofline {s['run_id']} ({s['lane']}): memory roof "
              f"{mem['median']:.2f} TB/s" if mem else "no memory roof")  # fmt: skip
    for col in ("op", "roofs", "best warpgauge point", "intensity", "binding", "fraction",
                "tensor roof"):  # fmt: skip
        t.add_column(col)
    for op, e in s["operators"].items():
        b = e["best_warpgauge"]
        na = e["roofs_not_applicable"].get("tensor")
        t.add_row(
            op, ", ".join(e["roofs_applied"]),
            f"{b['shape_label']} {b['dtype']}" if b else "-",
            f"{b['intensity']:.3g}" if b else "-", b["binding_roof"] if b else "-",
            f"{100 * b['fraction_of_binding']:.1f}%" if b else "-",
            "n/a: " + na.split(":")[0] if na else "applies",
        )  # fmt: skip
    Console(highlight=False).print(t)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="warpgauge roofline", description=__doc__)
    ap.add_argument("run", type=Path, help="run directory (results/<run-id>)")
    ap.add_argument("--lane", default="cold", choices=("cold", "warm"))
    ap.add_argument("--out", type=Path, default=None, help="directory (default RUN/roofline)")
    a = ap.parse_args(argv)
    return roofline_cli(a.run, lane=a.lane, out=a.out)
