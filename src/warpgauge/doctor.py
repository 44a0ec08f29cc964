"""``warpgauge doctor``: what this machine offers warpgauge, each item with a verdict and the fix.

``checks()`` returns a list of ``Check`` (name, status, detail, fix): "ok", "warn" (optional and
missing, or usable with a caveat) or "fail" (warpgauge cannot do its job here). Nothing is
installed or changed; the only work done is importing torch and triton, reading NVML and asking
each tool for its version (``--version``, with a timeout), and, where a GPU or the Triton
interpreter is there, running one tiny warpgauge kernel against torch.

``doctor_cli(as_json)`` prints a table (or JSON) and exits 1 when a check failed.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass

TOOL_TIMEOUT_S = 20
PEERS = (  # distribution, import name, what it adds
    ("liger-kernel", "liger_kernel", "Liger-Kernel's softmax and RMSNorm"),
    ("quack-kernels", "quack", "QuACK's softmax and RMSNorm (Hopper)"),
    ("gemlite", "gemlite", "gemlite's INT4 GEMV"),
)
OPTIONAL = (  # distribution, what needs it
    ("rich", "the CLI's tables"),
    ("typer", "the CLI"),
    ("matplotlib", "warpgauge report (figures)"),
    ("jsonschema", "warpgauge validate (schema checks)"),
    ("nvidia-ml-py", "clock, power and host-GPU telemetry in run artifacts"),
    ("pandas", "warpgauge.load_run and export --format parquet"),
    ("pyarrow", "export --format parquet"),
)
TOOLS = (  # executable, version flag, what needs it, where it comes from
    ("nvcc", "--version", "make -C cuda (the CUDA softmax program)", "the CUDA toolkit"),
    ("ncu", "--version", "kernel profiling (Nsight Compute)", "the CUDA toolkit / Nsight Compute"),
    ("compute-sanitizer", "--version", "memcheck/racecheck/initcheck runs", "the CUDA toolkit"),
)


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok" | "warn" | "fail"
    detail: str
    fix: str = ""


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _tool(exe: str, flag: str) -> tuple[str | None, str | None]:
    """(path, last non-empty line of ``exe flag``) or (None, None) when not on PATH."""
    path = shutil.which(exe)
    if path is None:
        return None, None
    try:
        out = subprocess.run(
            [path, flag], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError) as e:
        return path, f"could not run: {e}"
    lines = [ln.strip() for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    release = [ln for ln in lines if "release" in ln.lower() or "version" in ln.lower()]
    return path, (release or lines or ["no output"])[-1]


def _python_checks() -> list[Check]:
    v = sys.version_info
    ok = v >= (3, 10)
    return [
        Check(
            "python",
            "ok" if ok else "fail",
            f"{platform.python_version()} at {sys.executable}",
            "" if ok else "use Python 3.10 or newer (the venv scripts/test.sh makes)",
        )
    ]


def _interpreter_check() -> Check:
    value = os.environ.get("TRITON_INTERPRET")
    on = value not in (None, "", "0")
    return Check(
        "Triton interpreter",
        "ok",
        f"TRITON_INTERPRET={value}: kernels run on the CPU"
        if on
        else "off (TRITON_INTERPRET unset): kernels need a CUDA GPU",
        ""
        if on
        else "on a machine without a GPU: export TRITON_INTERPRET=1 before starting python",
    )


def _torch_checks() -> tuple[list[Check], object | None]:
    try:
        import torch
    except ImportError as e:
        return [Check("torch", "fail", f"not importable: {e}", "pip install torch")], None
    out = [
        Check("torch", "ok", f"{torch.__version__} (CUDA build: {torch.version.cuda or 'none'})")
    ]
    try:
        import triton

        out.append(Check("triton", "ok", triton.__version__))
    except ImportError as e:
        out.append(Check("triton", "fail", f"not importable: {e}", "pip install triton"))
    np_v = _version("numpy")
    if np_v and tuple(int(x) for x in np_v.split(".")[:2]) >= (2, 3):
        out.append(
            Check(
                "numpy",
                "warn",
                f"{np_v}: the Triton interpreter breaks on numpy >= 2.3",
                "pip install 'numpy<2.3'",
            )  # fmt: skip
        )
    else:
        out.append(
            Check(
                "numpy",
                "ok" if np_v else "fail",
                np_v or "not installed",
                "" if np_v else "pip install 'numpy<2.3'",
            )
        )
    return out, torch


def _gpu_checks(torch) -> list[Check]:
    if torch is None:
        return []
    out = []
    try:
        available = torch.cuda.is_available()
    except Exception as e:  # a broken driver: say so
        available, err = False, f"{type(e).__name__}: {e}"
    else:
        err = None
    if not available:
        out.append(
            Check(
                "CUDA GPU",
                "warn",
                "none visible"
                + (f" ({err})" if err else "")
                + f"; CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}",
                "bench needs a CUDA GPU; tests, report, validate, compare and export do not",
            )
        )
    else:
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out.append(
                Check(
                    f"GPU {i}",
                    "ok",
                    f"{p.name}, compute capability {p.major}.{p.minor}, "
                    f"{p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB",
                )  # fmt: skip
            )
    from warpgauge.environment import _nvml, _nvml_state, _text

    nv = _nvml()
    if nv is None:
        out.append(Check("driver (NVML)", "warn", _nvml_state.get("error", "NVML unavailable"),
                         "pip install nvidia-ml-py; needs the NVIDIA driver"))  # fmt: skip
    else:
        drv = _text(nv.nvmlSystemGetDriverVersion())
        cuda = torch.version.cuda or "none"
        out.append(Check("driver / CUDA", "ok", f"driver {drv}; torch built for CUDA {cuda}"))
    return out


def _kernel_check(torch) -> Check | None:
    """One tiny warpgauge add against torch, where a GPU or the interpreter can run it."""
    if torch is None:
        return None
    interp = os.environ.get("TRITON_INTERPRET") not in (None, "", "0")
    if not (interp or torch.cuda.is_available()):
        return None
    device = "cpu" if interp else "cuda"
    try:
        import warpgauge as wg

        x = torch.randn(37, device=device)
        y = torch.randn(37, device=device)
        ok = torch.equal(wg.add(x, y), x + y)
    except Exception as e:
        return Check(
            "a warpgauge kernel", "fail", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}",
            "set TRITON_INTERPRET=1 before python starts (before any import of triton) on a "
            "CPU machine; on a GPU machine check the driver and the triton install",
        )  # fmt: skip
    return Check("a warpgauge kernel", "ok" if ok else "fail",
                 f"add on {device}: " + ("matches torch" if ok else "DIFFERS from torch"),
                 "" if ok else "report this: the kernel is wrong on this machine")  # fmt: skip


def checks(run_kernel: bool = True) -> list[Check]:
    """Every check, in the order printed."""
    out = _python_checks()
    out.append(_interpreter_check())
    torch_checks, torch = _torch_checks()
    out += torch_checks
    out += _gpu_checks(torch)
    if run_kernel:
        k = _kernel_check(torch)
        if k is not None:
            out.append(k)
    from warpgauge._version import version

    out.append(
        Check(
            "warpgauge", "ok", f"{version() or 'unknown version'} from {os.path.dirname(__file__)}"
        )
    )
    for dist, mod, what in PEERS:
        v = _version(dist)
        out.append(Check(f"peer: {mod}", "ok" if v else "warn", v or f"not installed: runs record {what} as absent",
                         "" if v else f"pip install {dist}"))  # fmt: skip
    for dist, what in OPTIONAL:
        v = _version(dist)
        out.append(Check(dist, "ok" if v else "warn", v or f"not installed: needed for {what}",
                         "" if v else f"pip install {dist}"))  # fmt: skip
    for exe, flag, what, source in TOOLS:
        path, line = _tool(exe, flag)
        out.append(
            Check(
                exe,
                "ok" if path else "warn",
                f"{line} ({path})" if path else f"not on PATH: needed for {what}",
                "" if path else f"install {source} and put its bin/ on PATH",
            )  # fmt: skip
        )
    return out


_STYLE = {"ok": "green", "warn": "yellow", "fail": "red"}


def doctor_cli(as_json: bool = False, run_kernel: bool = True) -> int:
    """``warpgauge doctor [--json]``: print every check; 1 when any failed, else 0."""
    found = checks(run_kernel=run_kernel)
    failed = any(c.status == "fail" for c in found)
    if as_json:
        print(json.dumps({"ok": not failed, "checks": [asdict(c) for c in found]}, indent=2))
        return 1 if failed else 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title="warpgauge doctor: what this machine offers")
    for col in ("check", "verdict", "detail", "fix"):
        t.add_column(col, overflow="fold")
    for c in found:
        t.add_row(c.name, f"[{_STYLE[c.status]}]{c.status}[/]", c.detail, c.fix)
    console = (
        Console(highlight=False) if sys.stdout.isatty() else Console(width=160, highlight=False)
    )
    console.print(t)
    n = {s: sum(c.status == s for c in found) for s in _STYLE}
    console.print(f"{n['ok']} ok, {n['warn']} warn, {n['fail']} fail")
    return 1 if failed else 0
