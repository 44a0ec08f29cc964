"""The installed Nsight Compute: where it is, which metrics it offers, how it is called, and how
its raw CSV page is read.

Metric names move between ncu versions (``gpu__dram_throughput`` vs ``dram__throughput``, stall
reasons added or renamed), so every field the artifact reports lists candidate names in order of
preference (``FIELDS``); ``discover`` keeps the candidates that ``ncu --query-metrics`` lists on
this GPU, and ``pick`` takes the first candidate present in a parsed result. The sections passed
with ``--section`` make ncu collect its own version's names for the same quantities, so a field
whose preferred name is missing still finds the name the installed version uses.

Profiling policy (``command``): kernel replay, ``--cache-control all`` (caches flushed before each
replay pass, so DRAM bytes are the kernel's own), ``--clock-control none`` (ncu does not lock or
change clocks; nothing in warpgauge ever does), ``--profile-from-start off`` (only launches between
``cudaProfilerStart`` and ``cudaProfilerStop`` are profiled).
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

# field -> candidate metric names, preferred first. Units are ncu's base units (--print-units base).
FIELDS: dict[str, tuple[str, ...]] = {
    "duration_ns": ("gpu__time_duration.sum",),
    "dram_bytes_read": ("dram__bytes_read.sum",),
    "dram_bytes_write": ("dram__bytes_write.sum",),
    # Plain counters first: ncu's "Throughput" metrics (gpu__dram_throughput, lts__throughput)
    # are breakdowns over many sub-units and cost extra replay passes.
    "dram_throughput_pct": (
        "dram__bytes.sum.pct_of_peak_sustained_elapsed",
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    "l2_throughput_pct": (
        "lts__t_bytes.sum.pct_of_peak_sustained_elapsed",
        "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    ),
    "achieved_occupancy_pct": ("sm__warps_active.avg.pct_of_peak_sustained_active",),
    "theoretical_occupancy_pct": ("sm__maximum_warps_per_active_cycle_pct",),
    "sm_clock_hz": ("sm__cycles_elapsed.avg.per_second", "smsp__cycles_elapsed.avg.per_second"),
    "registers_per_thread": ("launch__registers_per_thread",),
    "shared_mem_static_bytes": ("launch__shared_mem_per_block_static",),
    "shared_mem_dynamic_bytes": ("launch__shared_mem_per_block_dynamic",),
    "block_size": ("launch__block_size",),
    "grid_size": ("launch__grid_size",),
    # Local-memory traffic: register spills (and local arrays) land here; 0 means no spill traffic.
    "local_load_bytes": ("l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",),
    "local_store_bytes": ("l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",),
}

# Warp stall reasons: "average warps stalled for <reason> per issued instruction" (the Warp State
# section's breakdown). Discovered by pattern, since the set differs between architectures.
STALL_RE = re.compile(r"^smsp__average_warps_issue_stalled_([a-z0-9_]+)_per_issue_active\.ratio$")
STALL_NOT_A_STALL = ("selected",)  # the warp issued: not a stall
STALL_BASE_RE = re.compile(r"^smsp__average_warps_issue_stalled_([a-z0-9_]+)_per_issue_active$")

# Sections cost replay passes: on the H200 (ncu 2025.3.1) these five plus the metrics took 18
# passes per kernel (~0.3 s each); the explicit --metrics list alone needs far fewer. They are
# available with --full-sections for a report to open in the Nsight Compute UI.
FULL_SECTIONS = (
    "SpeedOfLight",
    "MemoryWorkloadAnalysis",
    "Occupancy",
    "LaunchStats",
    "WarpStateStats",
)
SECTIONS: tuple[str, ...] = ()
# Metrics that are launch attributes or always available; ncu does not list all of them in
# --query-metrics, so they are requested whatever discovery says.
ALWAYS = ("gpu__time_duration.sum",)


class NcuError(RuntimeError):
    """ncu is missing, failed, or printed something this module cannot read."""


def find_ncu(explicit: str | None = None) -> str:
    """Path of ``ncu``: ``explicit``, else ``$NCU``, else ``ncu`` on PATH, else the usual CUDA
    install locations. Raises NcuError naming what was tried."""
    tried = []
    for cand in (explicit, os.environ.get("NCU")):
        if cand:
            tried.append(cand)
            if os.path.isfile(cand) and os.access(cand, os.X_OK):
                return cand
    found = shutil.which("ncu")
    if found:
        return found
    tried.append("ncu on PATH")
    for root in ("/usr/local/cuda/bin", "/opt/nvidia/nsight-compute"):
        cand = os.path.join(root, "ncu")
        tried.append(cand)
        if os.path.isfile(cand):
            return cand
    raise NcuError(
        "Nsight Compute (ncu) not found; tried " + ", ".join(tried) + ". Install Nsight Compute "
        "or pass --ncu /path/to/ncu (or set NCU)."
    )


def version(ncu: str) -> str:
    """``ncu --version``'s version string, e.g. ``2025.3.1.0 (build 36398880)``."""
    out = _run([ncu, "--version"], timeout=60)
    return parse_version(out)


def parse_version(text: str) -> str:
    m = re.search(r"Version\s+([0-9][^\s]*(?:\s+\(build\s+\d+\))?)", text)
    if not m:
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        if not lines:
            raise NcuError("ncu --version printed nothing")
        return lines[-1]
    return m.group(1)


def query_metrics(ncu: str, timeout: float = 120) -> str:
    """Raw ``ncu --query-metrics`` text for the first visible GPU (base names)."""
    return _run([ncu, "--query-metrics"], timeout=timeout)


def parse_metric_names(text: str) -> set[str]:
    """Base metric names from ``ncu --query-metrics`` output: the first token of each table row
    that looks like ``unit__counter`` (lines of dashes, headers and device banners skipped)."""
    names = set()
    for line in text.splitlines():
        tok = line.strip().split(" ", 1)[0] if line.strip() else ""
        if re.fullmatch(r"[a-z0-9]+__[a-z0-9_]+(\.[a-z0-9_]+)*", tok):
            names.add(tok)
    return names


def base_name(metric: str) -> str:
    return metric.split(".", 1)[0]


@dataclass(frozen=True)
class Discovery:
    """What this ncu offers: per field, the candidates it lists; the stall metrics it lists."""

    available: frozenset[str]  # base names from --query-metrics
    fields: dict[str, tuple[str, ...]]
    stall_metrics: tuple[str, ...]
    missing_fields: tuple[str, ...]

    def metrics_arg(self) -> list[str]:
        """Full metric names for ``--metrics``: every available candidate, the stall metrics
        and ``ALWAYS``."""
        out = list(ALWAYS)
        for cands in self.fields.values():
            out += [c for c in cands if c not in out]
        out += [m for m in self.stall_metrics if m not in out]
        return out


def discover(names: set[str]) -> Discovery:
    """Per field, the first candidate whose base name ncu lists (launch__ attributes are kept:
    they are launch statistics, not counters, and ncu always reports them). One name per field:
    every extra metric can cost a replay pass."""
    fields, missing = {}, []
    for field_name, cands in FIELDS.items():
        keep = tuple(c for c in cands if base_name(c) in names or c.startswith("launch__"))[:1]
        fields[field_name] = keep
        if not keep:
            missing.append(field_name)
    stalls = []
    for n in sorted(names):
        m = STALL_BASE_RE.match(n)
        if m and m.group(1) not in STALL_NOT_A_STALL and not m.group(1).endswith("_not_issued"):
            stalls.append(n + ".ratio")
    return Discovery(frozenset(names), fields, tuple(stalls), tuple(missing))


def command(
    ncu: str,
    report_path: str,
    app: list[str],
    metrics: list[str] | None = None,
    sections: tuple[str, ...] = SECTIONS,
) -> list[str]:
    """The ncu command line that profiles ``app`` into ``report_path`` (.ncu-rep)."""
    cmd = [
        ncu,
        "--replay-mode", "kernel",
        "--cache-control", "all",
        "--clock-control", "none",
        "--profile-from-start", "off",
        "--nvtx",
        "--target-processes", "all",
        "--force-overwrite",
        "--export", report_path,
    ]  # fmt: skip
    for s in sections:
        cmd += ["--section", s]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    return cmd + ["--", *app]


def import_command(ncu: str, report_path: str) -> list[str]:
    """The command that prints a report's raw page as CSV in base units."""
    return [ncu, "--import", report_path, "--csv", "--page", "raw", "--print-units", "base"]


def _run(cmd: list[str], timeout: float) -> str:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as e:
        raise NcuError(f"cannot run {cmd[0]}: {e}") from e
    except subprocess.TimeoutExpired as e:
        raise NcuError(f"{' '.join(cmd[:3])} ... took over {timeout:.0f} s") from e
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-5:]
        raise NcuError(f"{' '.join(cmd[:4])} ... exited {res.returncode}: " + " | ".join(tail))
    return res.stdout


# ------------------------------------------------------------------------------ raw CSV page


@dataclass
class KernelRow:
    """One profiled kernel launch from the raw page: identity columns and metric values."""

    id: int
    name: str
    values: dict[str, float | str]
    units: dict[str, str]

    def number(self, metric: str) -> float | None:
        v = self.values.get(metric)
        return v if isinstance(v, (int, float)) else None


_ID_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
               "Stream", "Block Size", "Grid Size", "Device", "CC")  # fmt: skip
_NUM_RE = re.compile(r"^-?[0-9][0-9,]*(\.[0-9]+)?([eE][-+]?[0-9]+)?$")


def _value(cell: str) -> float | str:
    s = cell.strip()
    if _NUM_RE.match(s):
        f = float(s.replace(",", ""))
        return int(f) if f.is_integer() and "." not in s and "e" not in s.lower() else f
    return s


def parse_raw_csv(text: str) -> list[KernelRow]:
    """Rows of ``ncu --import R --csv --page raw --print-units base``: a header row, a units row,
    then one row per profiled kernel. Lines before the header (``==PROF==`` notes) are skipped."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        if not text.strip() or "No kernels were profiled" in text:
            return []
        raise NcuError('no raw-page header (a line starting with "ID") in the ncu CSV output')
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    units_row = (
        rows[1] if len(rows) > 1 and not (rows[1] and rows[1][0].strip().isdigit()) else None
    )
    body = rows[2:] if units_row is not None else rows[1:]
    out = []
    for r in body:
        if not r or not r[0].strip().isdigit():
            continue
        cells = dict(zip(header, r, strict=False))
        units = dict(zip(header, units_row, strict=False)) if units_row else {}
        values = {k: _value(v) for k, v in cells.items() if k not in ("Kernel Name",)}
        out.append(
            KernelRow(
                id=int(cells["ID"]),
                name=cells.get("Kernel Name", ""),
                values=values,
                units={k: u for k, u in units.items() if u},
            )
        )
    return out


def pick(row: KernelRow, field_name: str, fields: dict[str, tuple[str, ...]] | None = None):
    """(metric name, value) of the first candidate of ``field_name`` present in ``row``."""
    for cand in (fields or FIELDS).get(field_name, ()) or FIELDS[field_name]:
        v = row.number(cand)
        if v is not None:
            return cand, v
    for cand in FIELDS[field_name]:  # a candidate discovery dropped but the section collected
        v = row.number(cand)
        if v is not None:
            return cand, v
    return None, None


def stalls(row: KernelRow, top: int = 3) -> list[dict]:
    """Leading warp-stall reasons of a kernel: ``ratio`` = warps stalled for that reason per issued
    instruction (ncu's Warp State breakdown), ``share_pct`` = its share of all stall reasons."""
    found = []
    for k, v in row.values.items():
        m = STALL_RE.match(k)
        if (
            m
            and isinstance(v, (int, float))
            and m.group(1) not in STALL_NOT_A_STALL
            and not m.group(1).endswith("_not_issued")
        ):
            found.append((m.group(1), float(v)))
    total = sum(v for _, v in found)
    found.sort(key=lambda t: -t[1])
    return [
        {"reason": r, "ratio": v, "share_pct": 100.0 * v / total if total > 0 else None}
        for r, v in found[:top]
    ]
