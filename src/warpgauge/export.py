"""Data out: a run in long form, one row per (case, provider), as CSV, Parquet, JSON or pandas.

``records(run)`` is the one definition of the rows (plain Python, no pandas): the case (run id,
case id, op, dtype, shape label and its dimensions, lane, work), the provider (name, label,
family, baseline, status, the first line of its error), the gate (ok, max errors), device-time
statistics (median, p10, p90, MAD, min, max, mean, n), host-time statistics, and the derived
rates exactly as the artifact records them (TB/s, TFLOP/s, % of the copy ceiling, speedup over
the best PyTorch provider). Raw samples stay in the case files.

``load_frame(path)`` (exported as ``warpgauge.load_run``) returns those rows as a pandas
DataFrame; pandas is optional and only that function and ``--format parquet`` need it.
``export_cli`` is ``warpgauge export RUN --format csv|parquet|json --out FILE``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from pathlib import Path

from .artifacts import DERIVED_KEYS, Run, atomic_write_bytes, load_run, validate_run

FORMATS = ("csv", "parquet", "json")
SHAPE_DIMS = ("rows", "width", "numel", "M", "N", "K", "group_size")
STAT_KEYS = ("median_us", "p10_us", "p90_us", "mad_us", "min_us", "max_us", "mean_us", "n")
COLUMNS = (
    "run_id", "case_id", "op", "dtype", "shape_label", *(f"shape_{d}" for d in SHAPE_DIMS),
    "lane", "bytes", "flops", "provider", "label", "family", "baseline", "status", "error",
    "gate_ok", "gate_max_abs_err", "gate_max_rel_err", "gate_worst_ratio",
    *(f"device_{k}" for k in STAT_KEYS), *(f"host_{k}" for k in STAT_KEYS),
    *DERIVED_KEYS, "setup_s",
)  # fmt: skip
PANDAS_HINT = "warpgauge.load_run needs pandas: pip install pandas (and pyarrow for Parquet)"


def _first_line(text: str | None) -> str | None:
    if not text:
        return None
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines[0].startswith("Traceback") else lines[0]) if lines else None


def records(run: Run | str | os.PathLike) -> list[dict]:
    """One dict per (case, provider) with exactly the keys of ``COLUMNS``, in case order."""
    run = run if isinstance(run, Run) else load_run(run)
    rows = []
    for c in run.cases:
        base = {
            "run_id": c["run_id"],
            "case_id": c["case_id"],
            "op": c["op"],
            "dtype": c["dtype"],
            "shape_label": c["shape_label"],
            **{f"shape_{d}": c["shape"].get(d) for d in SHAPE_DIMS},
            "lane": c["lane"],
            "bytes": c["work"]["bytes"],
            "flops": c["work"]["flops"],
        }
        for pr in c["providers"]:
            gate = pr.get("gate") or {}
            dev, host = pr.get("device_time") or {}, pr.get("host_time") or {}
            derived = pr.get("derived") or {}
            row = {
                **base,
                "provider": pr["name"],
                "label": pr["label"],
                "family": pr["family"],
                "baseline": pr["baseline"],
                "status": pr["status"],
                "error": _first_line(pr.get("error")),
                "gate_ok": gate.get("ok"),
                "gate_max_abs_err": gate.get("max_abs_err"),
                "gate_max_rel_err": gate.get("max_rel_err"),
                "gate_worst_ratio": gate.get("worst_ratio"),
                **{f"device_{k}": dev.get(k) for k in STAT_KEYS},
                **{f"host_{k}": host.get(k) for k in STAT_KEYS},
                **{k: derived.get(k) for k in DERIVED_KEYS},
                "setup_s": pr.get("setup_s"),
            }
            rows.append(row)
    return rows


def _pandas():
    try:
        import pandas as pd
    except ImportError as e:
        raise ImportError(PANDAS_HINT) from e
    return pd


def load_frame(path: str | os.PathLike):
    """The run at ``path`` as a pandas DataFrame, one row per (case, provider) (``COLUMNS``).
    Raises ImportError with the install hint when pandas is missing."""
    pd = _pandas()
    frame = pd.DataFrame.from_records(records(path), columns=list(COLUMNS))
    for col in ("op", "dtype", "lane", "family", "status", "provider"):
        frame[col] = frame[col].astype("category")
    return frame


def to_bytes(rows: list[dict], fmt: str) -> bytes:
    """``rows`` (from ``records``) encoded as ``fmt`` ("csv", "json" or "parquet")."""
    if fmt == "json":
        return (json.dumps(rows, indent=1, allow_nan=False) + "\n").encode("utf-8")
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(COLUMNS), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        return buf.getvalue().encode("utf-8")
    if fmt == "parquet":
        pd = _pandas()
        buf = io.BytesIO()
        try:
            pd.DataFrame.from_records(rows, columns=list(COLUMNS)).to_parquet(buf, index=False)
        except ImportError as e:
            raise ImportError(f"--format parquet needs pyarrow: pip install pyarrow ({e})") from e
        return buf.getvalue()
    raise ValueError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")


def export_cli(run_dir: str | os.PathLike, fmt: str | None, out: str | os.PathLike | None) -> int:
    """``warpgauge export``: write the rows; the format defaults to the suffix of ``out``
    (csv without one). Without ``out``, csv and json go to stdout. Exit 0; 1 when the run
    fails validation (the file is still written and stderr says so); 2 on a usage error or an
    unreadable run."""
    out_path = Path(out) if out is not None else None
    if fmt is None:
        suffix = out_path.suffix.lstrip(".").lower() if out_path else ""
        fmt = suffix if suffix in FORMATS else "csv"
    if fmt not in FORMATS:
        print(
            f"warpgauge export: --format {fmt!r}: choose one of {', '.join(FORMATS)}",
            file=sys.stderr,
        )
        return 2
    if fmt == "parquet" and out_path is None:
        print("warpgauge export: --format parquet needs --out FILE", file=sys.stderr)
        return 2
    try:
        data = to_bytes(records(run_dir), fmt)
    except ImportError as e:
        print(f"warpgauge export: {e}", file=sys.stderr)
        return 2
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"warpgauge export: cannot read {run_dir}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if out_path is None:
        sys.stdout.write(data.decode("utf-8"))
    else:
        atomic_write_bytes(out_path, data)
        print(out_path)
    problems = validate_run(run_dir)
    if problems:
        print(
            f"warpgauge export: {run_dir} fails validation ({len(problems)} problem(s)); "
            f"run `warpgauge validate {run_dir}`",
            file=sys.stderr,
        )
        return 1
    return 0
