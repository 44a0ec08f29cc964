"""Provenance (what ran, where) and telemetry (what state the GPU was in) for run artifacts.

Nothing here runs at import time and nothing here raises: a field that cannot be read is recorded
as null, so a run on a machine without git, CUDA or NVML still produces a complete record. Clocks
are only ever *read*; warpgauge never sets or locks them (see docs/limitations-and-claims.md).

- ``provenance(repo_root=None)``: git commit and dirty flag, Python and package versions, GPU
  properties, driver and CUDA versions, host name and platform. Call once per run.
- ``telemetry_snapshot(device_index=0)``: SM/memory clocks, temperature, power, utilization, the
  clock event ("throttle") reasons decoded to names, and the performance state, read through NVML.
  Cheap; the runner takes one before and one after every case.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# Distribution names whose versions a run records, keyed by the name used in the artifact.
PACKAGES = {
    "torch": "torch",
    "triton": "triton",
    "numpy": "numpy",
    "warpgauge": "warpgauge",
    "liger_kernel": "liger-kernel",
    "gemlite": "gemlite",
    "quack_kernels": "quack-kernels",
    "nvidia_ml_py": "nvidia-ml-py",
    "matplotlib": "matplotlib",
    "jsonschema": "jsonschema",
}

# Environment variables that change what a benchmark measures (never secrets).
ENV_VARS = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_LAUNCH_BLOCKING",
    "TRITON_INTERPRET",
    "PYTORCH_CUDA_ALLOC_CONF",
    "TORCHINDUCTOR_MAX_AUTOTUNE",
)

TELEMETRY_FIELDS = (
    "sm_clock_mhz",
    "mem_clock_mhz",
    "temp_c",
    "power_w",
    "util_gpu_pct",
    "util_mem_pct",
    "throttle_reasons",
    "pstate",
)

# NVML clock event reason bits (nvml.h, nvmlClocksEventReason*); names as NVML spells them.
# Used when the installed pynvml lacks a constant; values are part of NVML's stable ABI.
_REASON_BITS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)

_GIT_TIMEOUT_S = 10


# ------------------------------------------------------------------------------------ provenance


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _git_root(cwd: Path, own: Path | None = None) -> Path | None:
    """The top of the git checkout that holds ``cwd`` *and tracks this package's code*, or None.

    A copy of the tree placed inside some other repository (a lent machine's scratch folder
    under another checkout) must not report that repository's commit: the repository counts only
    if it tracks this very ``warpgauge/__init__.py``."""
    out = _git(["rev-parse", "--show-toplevel"], cwd)
    if not out:
        return None
    root = Path(out.strip())
    own = own or Path(__file__).resolve().parent / "__init__.py"
    tracked = _git(["ls-files", "--error-unmatch", "--", str(own)], root)
    return root if tracked is not None and tracked.strip() else None


def git_info(repo_root: str | os.PathLike | None = None) -> dict:
    """{commit, dirty, source, dirty_files} of the checkout that holds this package.

    Without ``repo_root`` the checkout holding this package is tried first, then the working
    directory; such a checkout counts only if it tracks this package's own source
    (``_git_root``).
    Where such a ``.git`` is found, git itself is asked and ``WARPGAUGE_GIT_COMMIT`` /
    ``WARPGAUGE_GIT_DIRTY`` are ignored (``source`` "git"); only a copy of the tree without
    ``.git`` (a lent GPU machine, a ``git archive``) takes them from those variables (``source``
    "env"). ``dirty`` means a tracked file differs from the commit *or an untracked file exists*
    (``git status --porcelain --untracked-files=all``), except under ``results/``, where runs
    are written; ``dirty_files`` lists up to 20 of the paths that made it dirty.
    """
    candidates = [Path(repo_root)] if repo_root is not None else [Path(__file__).parent, Path.cwd()]
    for cwd in candidates:
        if not cwd.is_dir():
            continue
        if repo_root is not None:  # the caller names the checkout: take it as it is
            out = _git(["rev-parse", "--show-toplevel"], cwd)
            root = Path(out.strip()) if out else None
        else:
            root = _git_root(cwd)
        commit = _git(["rev-parse", "--verify", "HEAD"], cwd) if root else None
        if commit is None:
            continue
        status = _git(
            ["status", "--porcelain", "--untracked-files=all", "--", ".", ":(exclude)results"],
            root,
        )
        files = [] if status is None else [ln[3:] for ln in status.splitlines() if ln.strip()]
        info = {
            "commit": commit.strip(),
            "dirty": None if status is None else bool(files),
            "source": "git",
            "dirty_files": files[:20],
        }
        claimed = os.environ.get("WARPGAUGE_GIT_COMMIT", "").strip()
        if claimed and not info["commit"].startswith(claimed) and files:
            # A copy whose .git is older than its files (a lent GPU machine keeps the .git of an
            # earlier sync): git's answer is "HEAD plus changes"; the caller's claim is kept
            # beside it, unverified, so the run can still be tied to the commit it ran.
            info["claimed_commit"] = claimed
        return info
    env_commit = os.environ.get("WARPGAUGE_GIT_COMMIT")
    if env_commit:
        dirty = os.environ.get("WARPGAUGE_GIT_DIRTY")
        return {
            "commit": env_commit.strip(),
            "dirty": None if dirty is None else dirty.strip() not in ("", "0"),
            "source": "env",
            "dirty_files": [],
        }
    return {"commit": None, "dirty": None, "source": None, "dirty_files": []}


def git_state(repo_root: str | os.PathLike | None = None) -> tuple[str | None, bool | None]:
    """(commit, dirty) from ``git_info``; (None, None) without git, a repository or the
    WARPGAUGE_GIT_* variables."""
    info = git_info(repo_root)
    return info["commit"], info["dirty"]


def warpgauge_version() -> str | None:
    """This package's version from its one source, pyproject.toml's ``[project].version``: read
    from the source tree when the package runs from a checkout (``PYTHONPATH=src``, editable
    installs), else from the installed distribution's metadata (which pip made from it)."""
    from warpgauge._version import version

    return version()


def package_versions() -> dict[str, str | None]:
    """Installed version of each package in ``PACKAGES``; None where it is not installed.
    warpgauge's own comes from ``warpgauge_version`` (never null while it runs)."""
    versions: dict[str, str | None] = {}
    for key, dist in PACKAGES.items():
        try:
            versions[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[key] = None
    versions["warpgauge"] = warpgauge_version()
    return versions


def _torch_gpu(device_index: int) -> tuple[dict[str, Any] | None, str | None]:
    """GPU properties from torch.cuda, and torch's CUDA version; (None, None) without them."""
    try:
        import torch
    except ImportError:
        return None, None
    cuda = getattr(torch.version, "cuda", None)
    try:
        if not torch.cuda.is_available():
            return None, cuda
        p = torch.cuda.get_device_properties(device_index)
    except Exception:  # a broken driver must not stop a run from recording what it can
        return None, cuda
    gpu = {
        "index": device_index,
        "name": p.name,
        "sm_count": int(p.multi_processor_count),
        "l2_bytes": int(getattr(p, "L2_cache_size", 0)) or None,
        "memory_bytes": int(p.total_memory),
        "capability": f"{p.major}.{p.minor}",
    }
    return gpu, cuda


def provenance(repo_root: str | os.PathLike | None = None, device_index: int = 0) -> dict:
    """Where and with what a run was made; see docs/artifacts.md ("Provenance").

    Returns {git_commit, git_dirty, git_source, git_dirty_files, python, packages, gpu, driver,
    cuda, hostname, platform, env, host_gpus}. ``gpu`` is null without a CUDA device; NVML adds
    the device's UUID, maximum clocks and power limit when available. ``host_gpus.before`` is a
    ``host_gpus()`` reading of every GPU of the host; the runner adds ``after`` when the run
    ends (``artifacts.finish_run(..., host_gpus_after=host_gpus())``). Never raises.
    """
    git = git_info(repo_root)
    gpu, cuda = _torch_gpu(device_index)
    driver = None
    nv = _nvml()
    if nv is not None:
        driver = _try(lambda: _text(nv.nvmlSystemGetDriverVersion()))
        handle = _handle(nv, device_index) if gpu is not None else None
        if handle is not None:
            gpu["uuid"] = _try(lambda: _text(nv.nvmlDeviceGetUUID(handle)))
            gpu["sm_clock_max_mhz"] = _try(
                lambda: nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM)
            )
            gpu["mem_clock_max_mhz"] = _try(
                lambda: nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_MEM)
            )
            limit_mw = _try(lambda: nv.nvmlDeviceGetPowerManagementLimit(handle))
            gpu["power_limit_w"] = None if limit_mw is None else limit_mw / 1000.0
    return {
        "git_commit": git["commit"],
        "git_dirty": git["dirty"],
        "git_source": git["source"],
        "git_dirty_files": git["dirty_files"],
        **({"git_claimed_commit": git["claimed_commit"]} if "claimed_commit" in git else {}),
        "python": platform.python_version(),
        "packages": package_versions(),
        "gpu": gpu,
        "driver": driver,
        "cuda": cuda,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "env": {name: os.environ.get(name) for name in ENV_VARS},
        "host_gpus": {"before": host_gpus(), "after": None},
    }


# ------------------------------------------------------------------------------------ telemetry

_nvml_state: dict[str, Any] = {}  # filled on first use: {"module": pynvml | None, "error": str}


def _nvml():
    """The initialised pynvml module, or None (reason kept in ``_nvml_state["error"]``)."""
    if "module" not in _nvml_state:
        try:
            import pynvml

            pynvml.nvmlInit()
            _nvml_state["module"] = pynvml
        except Exception as e:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded
            _nvml_state["module"] = None
            _nvml_state["error"] = f"NVML unavailable: {type(e).__name__}: {e}"
    return _nvml_state["module"]


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _try(read):
    try:
        return read()
    except Exception:
        return None


def _handle(nv, device_index: int):
    """NVML handle of CUDA device ``device_index``.

    CUDA and NVML number devices differently when CUDA_VISIBLE_DEVICES is set, so the device's
    UUID (from torch, when torch already has CUDA up) is matched first; then a plain integer
    CUDA_VISIBLE_DEVICES list is applied; then the index is used as is.
    """
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                uuid = str(torch.cuda.get_device_properties(device_index).uuid)
                return nv.nvmlDeviceGetHandleByUUID(
                    uuid if uuid.startswith("GPU-") else "GPU-" + uuid
                )
        except Exception:
            pass
    index = device_index
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    parts = [p.strip() for p in visible.split(",") if p.strip()]
    if parts and all(p.isdigit() for p in parts) and device_index < len(parts):
        index = int(parts[device_index])
    return nv.nvmlDeviceGetHandleByIndex(index)


def decode_reasons(mask: int) -> list[str]:
    """Names of the set bits of an NVML clock event (throttle) reason mask, low bit first."""
    names = [name for bit, name in _REASON_BITS if mask & bit]
    known = 0
    for bit, _ in _REASON_BITS:
        known |= bit
    if mask & ~known:
        names.append(f"other_0x{mask & ~known:x}")
    return names


def telemetry_snapshot(device_index: int = 0) -> dict:
    """One reading of the GPU's state; never raises.

    Returns {sm_clock_mhz, mem_clock_mhz, temp_c, power_w, util_gpu_pct, util_mem_pct,
    throttle_reasons, pstate, t, error}. ``t`` is the Unix time of the reading. A field NVML cannot
    read is null and named in ``error`` (null when every field was read); without NVML every
    field is null. ``util_*`` is NVML's sampled utilization over its last period (not this
    instant); ``throttle_reasons`` lists why clocks are below maximum right now (``gpu_idle`` is
    normal between kernels).
    """
    snap: dict[str, Any] = dict.fromkeys(TELEMETRY_FIELDS)
    snap["t"] = time.time()
    snap["error"] = None
    try:
        nv = _nvml()
        if nv is None:
            snap["error"] = _nvml_state.get("error", "NVML unavailable")
            return snap
        handle = _handle(nv, device_index)
    except Exception as e:
        snap["error"] = f"NVML device {device_index}: {type(e).__name__}: {e}"
        return snap

    failed: list[str] = []

    def read(field, fn):
        try:
            snap[field] = fn()
        except Exception:
            failed.append(field)

    read("sm_clock_mhz", lambda: int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)))
    read("mem_clock_mhz", lambda: int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_MEM)))
    read("temp_c", lambda: float(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)))
    read("power_w", lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0)
    util = _try(lambda: nv.nvmlDeviceGetUtilizationRates(handle))
    if util is None:
        failed += ["util_gpu_pct", "util_mem_pct"]
    else:
        snap["util_gpu_pct"] = float(util.gpu)
        snap["util_mem_pct"] = float(util.memory)
    reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    if reasons is None:
        failed.append("throttle_reasons")
    else:
        read("throttle_reasons", lambda: decode_reasons(int(reasons(handle))))
    read("pstate", lambda: int(nv.nvmlDeviceGetPerformanceState(handle)))
    if failed:
        snap["error"] = "NVML could not read: " + ", ".join(failed)
    return snap


def null_snapshot(reason: str = "not measured") -> dict:
    """A snapshot with every field null, for records made where no GPU was asked."""
    snap: dict[str, Any] = dict.fromkeys(TELEMETRY_FIELDS)
    snap["t"] = time.time()
    snap["error"] = reason
    return snap


def host_gpus() -> dict:
    """Every GPU of the host and what runs on it, read through NVML; never raises.

    Returns {t, this_pid, devices, error}; each device: {index, uuid, name, util_gpu_pct,
    util_mem_pct, memory_used_bytes, memory_total_bytes, processes}, and each process {pid, kind
    ("compute" or "graphics"), name, used_memory_bytes}. A process whose pid is not ``this_pid``,
    or utilization on a GPU the run does not use, is other work that shared the host (in a
    container NVML may show no processes at all: ``processes`` is then [] or null, and the
    utilization figures are what remains).
    """
    out: dict[str, Any] = {"t": time.time(), "this_pid": os.getpid(), "devices": [], "error": None}
    nv = _nvml()
    if nv is None:
        out["error"] = _nvml_state.get("error", "NVML unavailable")
        return out
    count = _try(nv.nvmlDeviceGetCount)
    if count is None:
        out["error"] = "NVML could not count the GPUs"
        return out
    failed: list[str] = []
    for i in range(int(count)):
        handle = _try(lambda i=i: nv.nvmlDeviceGetHandleByIndex(i))
        if handle is None:
            failed.append(f"GPU {i}")
            continue
        util = _try(lambda h=handle: nv.nvmlDeviceGetUtilizationRates(h))
        mem = _try(lambda h=handle: nv.nvmlDeviceGetMemoryInfo(h))
        procs: list[dict] | None = []
        for kind, getter in (
            ("compute", "nvmlDeviceGetComputeRunningProcesses"),
            ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
        ):
            fn = getattr(nv, getter, None)
            listed = None if fn is None else _try(lambda h=handle, fn=fn: fn(h))
            if listed is None:
                procs = None if kind == "compute" else procs
                continue
            for pr in listed:
                used = getattr(pr, "usedGpuMemory", None)
                name = _try(lambda pid=pr.pid: _text(nv.nvmlSystemGetProcessName(pid)))
                entry = {"pid": int(pr.pid), "kind": kind, "name": name}
                entry["used_memory_bytes"] = (
                    int(used) if isinstance(used, int) and used >= 0 else None
                )
                if procs is None:
                    procs = []
                procs.append(entry)
        out["devices"].append(
            {
                "index": i,
                "uuid": _try(lambda h=handle: _text(nv.nvmlDeviceGetUUID(h))),
                "name": _try(lambda h=handle: _text(nv.nvmlDeviceGetName(h))),
                "util_gpu_pct": None if util is None else float(util.gpu),
                "util_mem_pct": None if util is None else float(util.memory),
                "memory_used_bytes": None if mem is None else int(mem.used),
                "memory_total_bytes": None if mem is None else int(mem.total),
                "processes": procs,
            }
        )
    if failed:
        out["error"] = "NVML could not open " + ", ".join(failed)
    return out


def other_gpu_work(snapshot: dict | None, own_uuid: str | None = None) -> list[str]:
    """Readable lines for the work a ``host_gpus()`` snapshot shows besides this run: processes
    other than ``this_pid`` on any GPU, and busy GPUs other than ``own_uuid``. [] when none."""
    if not snapshot:
        return []
    lines = []
    me = snapshot.get("this_pid")
    for d in snapshot.get("devices") or []:
        label = f"GPU {d.get('index')}" + (f" ({d['name']})" if d.get("name") else "")
        others = [p for p in (d.get("processes") or []) if p.get("pid") != me]
        for p in others:
            used = p.get("used_memory_bytes")
            mem = f", {used / 2**30:.1f} GiB" if isinstance(used, int) else ""
            lines.append(
                f"{label}: pid {p['pid']} {p.get('name') or ''} ({p['kind']}{mem})".replace(
                    "  ", " "
                )
            )
        util = d.get("util_gpu_pct")
        if own_uuid and d.get("uuid") != own_uuid and util:
            lines.append(f"{label}: {util:.0f}% busy")
    return lines
