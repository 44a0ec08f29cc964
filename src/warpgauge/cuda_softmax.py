"""Run the CUDA softmax program (``cuda/``) N times and keep the evidence.

``main(argv)`` builds ``cuda/build/softmax`` with make if needed, runs its ``--self-check`` once,
runs it ``--runs`` times (default 7), each run writing one raw JSON document, and reports for each
kernel the run whose median is the middle one (the 4th of 7) plus the spread of the run medians
(min, max, max/min). Within each run, right after the binary exits, this process also times
``torch.softmax`` and ``warpgauge.softmax`` at the same shape the same way (compute warm-up,
rotating order, CUDA events, median, same rounds), so the docs can set the CUDA kernels beside
what a user would call instead. Those two are timed in a different process from the CUDA kernels:
ratios between a CUDA kernel and them are between adjacent measurements, not interleaved samples.

Everything goes to ``--out DIR``::

    raw/cuda-run-<i>.json    the binary's JSON, verbatim     raw/cuda-run-<i>.log   its stderr
    raw/python-run-<i>.json  torch/warpgauge timing of run i
    self-check.json/.log     the broken-kernel self-check     resources.txt          ptxas report
    sanitize/                memcheck/racecheck logs (--sanitize)
    summary.json             middle runs, spreads, ratios     summary.md             a short table

Usable as ``python -m warpgauge.cuda_softmax`` and as the ``warpgauge cuda-softmax`` subcommand.
Nothing here imports torch until the Python providers are timed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .cuda_softmax_summary import (  # noqa: F401  (re-exported: the runner's public helpers)
    KERNELS,
    PYTHON_PROVIDERS,
    PYTHON_SCHEMA,
    SUMMARY_SCHEMA,
    TOLERANCE,
    middle_run,
    percentile,
    render_markdown,
    sample_stats,
    summarize,
    worst_errors,
)

# The small, slow-path shape the sanitizers run (instrumented runs are 10-100x slower): an odd
# width with misaligned rows reaches the scalar head, float4 body and scalar tail.
SANITIZE_ARGS = (
    "--rows", "64", "--width", "1027", "--offset", "1", "--rounds", "3",
    "--warmup-ms", "0", "--pad-us", "0", "--suite", "quick",
)  # fmt: skip


class CommandError(RuntimeError):
    """A build, run or sanitizer command failed; the message says which and where its log is."""


# ------------------------------------------------------------------------------------- build


def default_cuda_dir() -> Path:
    """``cuda/`` of the checkout this module lives in (src/warpgauge/ -> repo root)."""
    return Path(__file__).resolve().parents[2] / "cuda"


def build(
    cuda_dir: str | os.PathLike | None = None,
    build_dir: str | os.PathLike | None = None,
    nvcc: str | None = None,
    arch: str | None = None,
) -> Path:
    """``make -C cuda`` (a no-op when up to date); returns the binary's path."""
    cuda_dir = Path(cuda_dir) if cuda_dir else default_cuda_dir()
    if not (cuda_dir / "Makefile").is_file():
        raise CommandError(
            f"no Makefile in {cuda_dir}: run from a warpgauge checkout, or pass --cuda-dir "
            "(or --binary for a prebuilt program)"
        )
    build_dir = Path(build_dir).resolve() if build_dir else cuda_dir / "build"
    cmd = ["make", "-C", str(cuda_dir), f"BUILD={build_dir}"]
    if nvcc:
        cmd.append(f"NVCC={nvcc}")
    if arch:
        cmd.append(f"ARCH={arch}")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CommandError(
            f"build failed ({' '.join(cmd)}, exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    return build_dir / "softmax"


_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")


def parse_resources(text: str) -> dict[str, dict[str, Any]]:
    """Per-kernel registers, shared memory, stack and spills from a ``-Xptxas -v`` report."""
    kernels: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            current = kernels.setdefault(m.group(1), {"arch": m.group(2)})
        elif current is None:
            continue
        elif m := _FRAME.search(line):
            current.update(
                stack_bytes=int(m.group(1)),
                spill_store_bytes=int(m.group(2)),
                spill_load_bytes=int(m.group(3)),
            )
        elif m := _USED.search(line):
            current.update(
                registers=int(m.group(1)),
                barriers=int(m.group(2) or 0),
                smem_bytes=int(m.group(3) or 0),
            )
    return kernels


# ---------------------------------------------------------------------------- the GPU probe

# CUDA driver API results that mean "there is no usable GPU here" (cuda.h): no device, no driver
# loaded, a driver too old for the runtime, and a device that CUDA_VISIBLE_DEVICES hides.
_NO_GPU_CODES = {100: "CUDA_ERROR_NO_DEVICE", 35: "CUDA_ERROR_INSUFFICIENT_DRIVER",
                 3: "CUDA_ERROR_NOT_INITIALIZED", 999: "CUDA_ERROR_UNKNOWN"}  # fmt: skip
# The same conditions as the CUDA runtime reports them in the program's log.
_NO_GPU_LOG = re.compile(
    r"cudaErrorInsufficientDriver|cudaErrorNoDevice|no CUDA-capable device|"
    r"CUDA driver version is insufficient"
)


def cuda_gpu_missing() -> str | None:
    """Why no CUDA GPU can run the program here, or None when one is visible.

    Asks the driver itself (libcuda through ctypes: cuInit, cuDeviceGetCount), so it needs
    neither torch nor the toolkit and honours CUDA_VISIBLE_DEVICES."""
    import ctypes

    lib = None
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is None:
        return "no NVIDIA driver is installed (libcuda cannot be loaded)"
    rc = lib.cuInit(0)
    if rc != 0:
        return f"the CUDA driver found no usable GPU (cuInit: {_NO_GPU_CODES.get(rc, rc)})"
    count = ctypes.c_int(0)
    rc = lib.cuDeviceGetCount(ctypes.byref(count))
    if rc != 0 or count.value < 1:
        return "the CUDA driver reports no GPU (check CUDA_VISIBLE_DEVICES)"
    return None


def _no_gpu_message(reason: str) -> str:
    return (
        f"cuda-softmax: no CUDA GPU: {reason}. The CUDA softmax program runs on an NVIDIA GPU; "
        "run it on a GPU machine (the CPU test suite checks its bookkeeping with a fake binary)"
    )


# ----------------------------------------------------------------------------- the binary


def run_binary(
    binary: Path, args: list[str], json_path: Path, log_path: Path, timeout: float
) -> tuple[int, dict | None]:
    """Run the program with ``--json json_path``; stderr goes to ``log_path``."""
    cmd = [str(binary), *args, "--json", str(json_path)]
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        try:
            rc = subprocess.run(cmd, stdout=log, stderr=log, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            log.write(f"\ntimed out after {timeout} s\n")
            return 124, None
    doc = json.loads(json_path.read_text()) if json_path.is_file() else None
    return rc, doc


def binary_args(a: argparse.Namespace) -> list[str]:
    """The CUDA program's options for a timing run, from this command's options."""
    opts = {
        "--rows": a.rows,
        "--width": a.width,
        "--offset": a.offset,
        "--rounds": a.rounds,
        "--inner": a.inner,
        "--warmup-ms": a.warmup_ms,
        "--pad-us": a.pad_us,
        "--seed": a.seed,
        "--suite": a.suite,
    }
    return [s for flag, value in opts.items() for s in (flag, str(value))]


# ------------------------------------------------------------------------------ sanitizers

_SUMMARY_LINE = re.compile(r"(ERROR|RACECHECK|LEAK) SUMMARY:.*")
_COUNT = re.compile(r"(\d+)\s+(?:bytes leaked|errors?|hazards?|warnings?|leaks?)\b")


def parse_sanitizer_log(text: str, returncode: int) -> dict[str, Any]:
    """Clean only if the tool exited 0, printed at least one summary line, and every count
    on its summary lines (errors, hazards, warnings, leaked bytes; singular or plural) is 0."""
    lines = [m.group(0).strip() for m in _SUMMARY_LINE.finditer(text)]
    counts = [int(n) for line in lines for n in _COUNT.findall(line)]
    if returncode != 0:
        reason = f"exit status {returncode}"
    elif not lines:
        reason = "no summary line in the log (did the tool run?)"
    elif not counts:
        reason = "summary lines without counts: " + " | ".join(lines)
    elif any(counts):
        reason = "reported: " + " | ".join(lines)
    else:
        reason = ""
    return {"clean": not reason, "reason": reason or None, "summary": lines}


def find_sanitizer(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if root and (p := Path(root) / "bin" / "compute-sanitizer").is_file():
            return str(p)
    return None


def sanitize(binary: Path, out_dir: Path, sanitizer: str | None, timeout: float) -> dict:
    """memcheck (with leak check) and racecheck on a small shape; logs under out_dir."""
    tool_path = find_sanitizer(sanitizer)
    if tool_path is None:
        return {"clean": False, "reason": "compute-sanitizer not found (pass --sanitizer PATH)"}
    out_dir.mkdir(parents=True, exist_ok=True)
    tools = {
        "memcheck": ["--tool", "memcheck", "--leak-check", "full"],
        "racecheck": ["--tool", "racecheck"],
    }
    results: dict[str, Any] = {"sanitizer": tool_path, "binary_args": list(SANITIZE_ARGS)}
    for name, opts in tools.items():
        log_path = out_dir / f"{name}.log"
        cmd = [
            tool_path,
            *opts,
            "--error-exitcode",
            "1",
            str(binary),
            *SANITIZE_ARGS,
            "--json",
            str(out_dir / f"{name}.json"),
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            text, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            text = f"{e.stdout or ''}{e.stderr or ''}\ntimed out after {timeout} s\n"
            rc = 124
        log_path.write_text("$ " + " ".join(cmd) + "\n" + text)
        results[name] = {"log": str(log_path), "returncode": rc, **parse_sanitizer_log(text, rc)}
    results["clean"] = all(results[n]["clean"] for n in tools)
    return results


def _write_json(path: Path, doc: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    tmp.replace(path)


def _jsonable(v: Any) -> Any:
    """NaN/inf -> None, recursively, so the summary is strict JSON."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    return v


def _environment() -> tuple[Any, Any]:
    """warpgauge.environment's provenance() and telemetry_snapshot(), or stand-ins saying why not."""
    try:
        from warpgauge.environment import provenance, telemetry_snapshot
    except ImportError as e:
        reason = f"unavailable: {e}"
        return (lambda: {"reason": reason}), (lambda: {"reason": reason})
    return (lambda: provenance(default_cuda_dir().parent)), telemetry_snapshot


# -------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="warpgauge cuda-softmax",
        description="Build, check and time the CUDA softmax kernels N times; keep every run.",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output directory (default .out/cuda-softmax/<UTC time>)",
    )
    p.add_argument("--runs", type=int, default=7, help="runs of the binary (default 7)")
    p.add_argument("--rows", type=int, default=1024)
    p.add_argument("--width", type=int, default=1024)
    p.add_argument(
        "--offset",
        type=int,
        default=0,
        help="floats added to the CUDA buffers' base pointers (misaligns rows)",
    )
    p.add_argument("--rounds", type=int, default=300, help="samples per kernel per run")
    p.add_argument("--inner", type=int, default=1, help="launches per sample")
    p.add_argument("--warmup-ms", type=float, default=250.0)
    p.add_argument(
        "--pad-us",
        type=float,
        default=100.0,
        help="GPU busy pad before each round in the CUDA program",
    )
    p.add_argument(
        "--python-pad-us",
        type=float,
        default=500.0,
        help="the same for the Python providers (their launches cost more host time)",
    )
    p.add_argument("--seed", type=int, default=20261130)
    p.add_argument(
        "--suite",
        choices=("full", "quick"),
        default="full",
        help="correctness cases run before timing in each run",
    )
    p.add_argument(
        "--skip-python", action="store_true", help="do not time torch.softmax / warpgauge.softmax"
    )
    p.add_argument("--no-self-check", action="store_true", help="skip the --self-check run")
    p.add_argument(
        "--sanitize",
        action="store_true",
        help="also run compute-sanitizer memcheck and racecheck (small shape)",
    )
    p.add_argument("--sanitizer", default=None, help="path to compute-sanitizer")
    p.add_argument("--binary", type=Path, default=None, help="use this prebuilt program")
    p.add_argument("--cuda-dir", type=Path, default=None, help="the cuda/ directory to build")
    p.add_argument("--nvcc", default=None, help="NVCC for make (default: nvcc on PATH)")
    p.add_argument("--arch", default=None, help="ARCH for make (default sm_90)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per binary run")
    return p


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    if a.runs < 0 or a.rows < 1 or a.width < 1 or a.rounds < 1 or a.inner < 1:
        print(
            "cuda-softmax: --runs >= 0 and --rows, --width, --rounds, --inner >= 1", file=sys.stderr
        )
        return 2
    missing = cuda_gpu_missing()
    if missing:
        print(_no_gpu_message(missing), file=sys.stderr)
        return 2
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out: Path = a.out or Path(".out") / "cuda-softmax" / stamp
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)

    def say(msg: str) -> None:
        print(f"[cuda-softmax] {msg}", file=sys.stderr, flush=True)

    try:
        binary = a.binary or build(a.cuda_dir, nvcc=a.nvcc, arch=a.arch)
    except CommandError as e:
        say(str(e))
        return 1
    resources_txt = binary.parent / "resources.txt"
    resources = None
    if resources_txt.is_file():
        shutil.copyfile(resources_txt, out / "resources.txt")
        resources = parse_resources(resources_txt.read_text())
    say(f"binary {binary}; writing to {out}")

    provenance, telemetry = _environment()
    summary: dict[str, Any] = {
        "schema": SUMMARY_SCHEMA,
        "created_utc": stamp,
        "argv": sys.argv[1:] if argv is None else list(argv),
        "shape": {"rows": a.rows, "width": a.width, "offset_floats": a.offset, "dtype": "float32"},
        "runs_requested": a.runs,
        "binary": str(binary),
        "binary_args": binary_args(a),
        "resources": resources,
        "python_timing": "skipped"
        if a.skip_python
        else (
            "in this process, within each run right after the binary exits: same rounds, inner "
            "and warm-up; pad via torch.cuda._sleep; contiguous input (offset not applied)"
        ),
        "provenance": provenance(),
    }
    ok = True

    if not a.no_self_check:
        rc, doc = run_binary(
            binary,
            ["--suite", a.suite, "--seed", str(a.seed), "--self-check"],
            out / "self-check.json",
            out / "self-check.log",
            a.timeout,
        )
        sc_ok = rc == 0 and bool(doc and doc.get("ok"))
        log_text = (out / "self-check.log").read_text(errors="replace")
        if not sc_ok and _NO_GPU_LOG.search(log_text):
            print(_no_gpu_message(_NO_GPU_LOG.search(log_text).group(0)), file=sys.stderr)
            return 2
        summary["self_check"] = {"ok": sc_ok, "returncode": rc}
        say(f"self-check {'OK' if sc_ok else 'FAILED'} (log {out / 'self-check.log'})")
        ok &= sc_ok

    if a.sanitize:
        san = sanitize(binary, out / "sanitize", a.sanitizer, a.timeout * 4)
        summary["sanitize"] = san
        say("sanitizers " + ("clean" if san["clean"] else f"NOT clean: {san}"))
        ok &= san["clean"]

    cuda_docs: list[dict | None] = []
    python_docs: list[dict | None] = []
    run_status = []
    for i in range(1, a.runs + 1):
        before = telemetry()
        rc, doc = run_binary(
            binary, binary_args(a), raw / f"cuda-run-{i}.json", raw / f"cuda-run-{i}.log", a.timeout
        )
        after = telemetry()
        good = rc == 0 and bool(doc and doc.get("ok") and doc.get("timing"))
        run_status.append(
            {
                "run": i,
                "returncode": rc,
                "ok": good,
                "telemetry_before": before,
                "telemetry_after": after,
            }
        )
        cuda_docs.append(doc if good else None)
        say(
            f"run {i}/{a.runs}: {'ok' if good else f'FAILED (exit {rc}, log raw/cuda-run-{i}.log)'}"
        )
        ok &= good
        if not a.skip_python:
            from .cuda_softmax_python import time_python_providers

            pdoc = time_python_providers(a)
            pdoc["run"] = i
            _write_json(raw / f"python-run-{i}.json", _jsonable(pdoc))
            python_docs.append(pdoc)

    first = next((d for d in cuda_docs if d), None)
    summary["device"] = first.get("device") if first else None
    summary["runs_ok"] = sum(r["ok"] for r in run_status)
    summary["run_status"] = run_status
    summary["correctness"] = {
        "all_pass": bool(cuda_docs) and all(d and d["correctness"]["all_pass"] for d in cuda_docs),
        "per_run": [bool(d and d["correctness"]["all_pass"]) for d in cuda_docs],
        "worst_errors": worst_errors(cuda_docs),
    }
    unavailable: dict[str, str] = {}
    for pdoc in python_docs:
        for p in pdoc.get("providers", []):
            if p.get("median_us") is None:
                unavailable.setdefault(p["name"], p.get("reason", "not timed"))
            if p.get("available") and not p.get("correct"):
                say(f"warning: {p['name']} failed its correctness check ({p})")
    summary["unavailable"] = unavailable
    summary.update(summarize(cuda_docs, python_docs))
    summary["ok"] = ok
    md = render_markdown(summary)
    (out / "summary.md").write_text(md)
    # SHA-256 of every file of the run (summary.json itself excepted), so a later reader can
    # tell whether the raw documents behind the summary were changed.
    summary["files_sha256"] = {
        str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file() and p.name != "summary.json"
    }
    _write_json(out / "summary.json", _jsonable(summary))
    say(f"{'OK' if ok else 'FAILED'}: {out / 'summary.md'}")
    print(md)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
