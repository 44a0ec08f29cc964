"""A lean C launcher for warpgauge's cached launches, in place of Triton's generated one.

Triton's launcher for a compiled kernel (``CudaLauncher.launch``, C code generated per
signature) parses 13 fixed arguments and the kernel metadata tuple per call through
``PyArg_ParseTuple`` and always goes through ``cuLaunchKernelEx``. On the H200's host
(``results/claunch-h200/out-1/host.json``, one launch per call, us from a Python loop) it takes
4.75-5.33 us per launch and this launcher 4.51-4.84 (4.40-4.74 holding the GIL): most of a
launch is the driver's own ``cuLaunchKernel`` there, which no launcher removes.
This module builds one small CPython extension (``_clauncher.c``, the same
for every kernel) whose ``launch(gridX, gridY, gridZ, stream, spec, *args)`` takes, per call, the
grid, the stream, a ``spec`` (bytes built once per compiled kernel: CUfunction handle, block size,
shared memory, cluster size, launch flags, one type code per kernel argument, the number of
trailing scratch pointers) and the kernel's arguments, and packs them as Triton's launcher does:

- a ``constexpr`` argument (including integers Triton specialized to constexpr) is not passed;
- a pointer is an int, None (null) or an object with ``data_ptr()`` (whose pointer is then
  checked to be device-accessible, as Triton checks it); integers keep their C width and range
  checks (signed widths raise on overflow, unsigned are masked, as ``PyArg_ParseTuple`` does;
  an i8/i1 takes -128..255: Triton 3.6 parses it with PyArg's ``b``, 0..255, and 3.9 as signed);
  fp32/fp64 are packed as such, fp16 by ``PyFloat_Pack2``, bf16 by truncating the fp32 value
  (Triton's ``pack_bf16``);
- the global-scratch and profile-scratch pointers Triton 3.6 (and 3.9) append after the
  arguments are passed as nulls: a kernel that needs scratch memory keeps Triton's launcher;
- ``cuLaunchKernel`` unless the kernel needs launch attributes (clusters, cooperative grid, PDL),
  then ``cuLaunchKernelEx`` with the attributes Triton sets; a grid with a zero extent launches
  nothing; the GIL is released around the launch (``RELEASE_GIL``), as Triton does.

The extension is built on first use with Triton's own ``compile_module_from_src`` (cached on disk
by Triton under the hash of its source), against the ``cuda.h`` Triton bundles; it opens
``libcuda.so.1`` with ``dlopen`` at its first launch, so it builds without a GPU. Everything
falls back to Triton's launcher (``for_compiled`` returns None, the reason kept in
``FALLBACKS``): the build failing, a Triton version whose trailing arguments are not known here,
a launcher that is not Triton's ``CudaLauncher``, scratch memory, tuple or tensor-descriptor
arguments, an unknown argument type. ``WARPGAUGE_C_LAUNCH=0`` (``_launch.C_LAUNCH``) turns it off.
A driver error raises ``RuntimeError`` naming the kernel, the CUDA error and the way back.
"""

from __future__ import annotations

import logging
import math
import os
import struct
from pathlib import Path

__all__ = [
    "SOURCE",
    "Unsupported",
    "build_error",
    "for_compiled",
    "module",
    "pack_reference",
    "spec_bytes",
    "trailing_pointers",
    "type_codes",
]

SOURCE = Path(__file__).with_name("_clauncher.c")
NAME = "_wg_clauncher"
RELEASE_GIL = True  # read when a kernel's spec is built

# Triton's scalar types (ty_to_cpp of backends/nvidia/driver.py, 3.6 and 3.9) -> type codes.
CODES = {
    "i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "l",
    "u1": "B", "u8": "B", "u16": "H", "u32": "I", "u64": "L",
    "fp16": "e", "bf16": "g", "fp32": "f", "f32": "f", "fp64": "d",
}  # fmt: skip

# Null pointers Triton's launcher appends after the kernel's own arguments, by Triton version:
# 3.6 (driver.py make_launcher: &global_scratch, &profile_scratch) and 3.9 (driver.c launch:
# "+ 2 for global & profile scratch"). Other versions were not checked: Triton's launcher.
TRAILING = {(3, 6): 2, (3, 9): 2}

# Header of a spec (struct WgSpec in _clauncher.c): function, block_x, shared, num_ctas, flags,
# nargs, trailing; then the codes and the kernel's name, NUL-terminated.
_HEADER = struct.Struct("<QIIIIII")
FLAG_COOP, FLAG_PDL, FLAG_GIL = 1, 2, 4
MAX_PARAMS = 128

FALLBACKS: dict = {}  # kernel name -> why it launches through Triton's launcher
_STATE: dict = {}  # "module": the built extension | None (failed), "error": why

log = logging.getLogger(__name__)


class Unsupported(ValueError):
    """A kernel (or Triton) this launcher does not handle: Triton's launcher is used."""


def type_codes(signature) -> str:
    """One type code per kernel argument, in order, from a compiled kernel's signature types
    (``CompiledKernel.src.signature.values()``): ``c`` for a constexpr, ``p`` for a pointer
    (``*fp16``, ``*i8``, ...), else ``CODES``. Raises ``Unsupported`` for tuples, tensor
    descriptors and types Triton's 3.6 launcher does not know."""
    out = []
    for i, ty in enumerate(signature):
        if not isinstance(ty, str):
            raise Unsupported(f"argument {i} has type {ty!r} (a tuple): Triton's launcher")
        if ty == "constexpr":
            out.append("c")
        elif ty.startswith("*"):
            out.append("p")
        elif ty in CODES:
            out.append(CODES[ty])
        else:  # tensordesc<...>, nvTmaDesc, anything newer
            raise Unsupported(f"argument {i} has type {ty!r}: Triton's launcher")
    if sum(c != "c" for c in out) + 2 > MAX_PARAMS:
        raise Unsupported(f"{len(out)} arguments: more than {MAX_PARAMS - 2} parameters")
    return "".join(out)


def trailing_pointers(version: str) -> int:
    """The scratch pointers Triton ``version`` (``triton.__version__``) appends to a kernel's
    parameters; ``Unsupported`` for a version not checked here (``TRAILING``)."""
    try:
        key = tuple(int(p) for p in version.split(".")[:2])
    except ValueError:
        raise Unsupported(f"Triton version {version!r} not understood") from None
    if key not in TRAILING:
        raise Unsupported(f"Triton {version}: its launcher's trailing arguments are not known")
    return TRAILING[key]


def spec_bytes(function, num_warps, num_ctas, shared, coop, pdl, codes, trailing, name,
               release_gil=True) -> bytes:  # fmt: skip
    """The ``spec`` of one compiled kernel (``_clauncher.c``'s ``WgSpec``)."""
    if not (0 < num_warps <= 32) or num_ctas < 1 or shared < 0 or not 0 <= trailing <= 4:
        raise Unsupported(f"launch settings {num_warps=}, {num_ctas=}, {shared=}, {trailing=}")
    flags = (FLAG_COOP if coop else 0) | (FLAG_PDL if pdl else 0) | (FLAG_GIL if release_gil else 0)
    head = _HEADER.pack(
        int(function), 32 * num_warps, shared, num_ctas, flags, len(codes), trailing
    )
    return head + codes.encode("ascii") + name.encode("utf-8", "replace") + b"\0"


def _int(v, lo, hi, i):
    if not isinstance(v, int):
        raise TypeError(f"argument {i}: expected an int, got {type(v).__name__}")
    if not lo <= v <= hi:
        raise OverflowError(f"argument {i}: {v} out of range [{lo}, {hi}]")
    return v


def pack_reference(codes: str, args, trailing: int) -> bytes:
    """The parameters the C launcher passes for ``args`` (8 bytes each, the value in the low
    bytes), computed in Python from Triton 3.6's launcher rules: the reference the C packing is
    tested against. Pointers are ints, None or objects with ``data_ptr()`` (taken as given)."""
    if len(args) != len(codes):
        raise TypeError(f"{len(codes)} arguments expected, got {len(args)}")
    out = []
    for i, (c, v) in enumerate(zip(codes, args)):
        if c == "c":
            continue
        if c == "p":
            p = 0 if v is None else v if isinstance(v, int) else v.data_ptr()
            out.append(struct.pack("<Q", _int(p, 0, 2**64 - 1, i)))
        elif c == "b":  # Triton 3.6: PyArg's 'b' (0..255); 3.9: -128..127; the byte either way
            out.append(struct.pack("<q", _int(v, -128, 255, i))[:1].ljust(8, b"\0"))
        elif c in "hil":
            bits = {"h": 16, "i": 32, "l": 64}[c]
            x = _int(v, -(2 ** (bits - 1)), 2 ** (bits - 1) - 1, i)
            out.append(struct.pack("<q", x)[: bits // 8].ljust(8, b"\0"))
        elif c in "BHIL":
            bits = {"B": 8, "H": 16, "I": 32, "L": 64}[c]
            x = _int(v, -(2**64), 2**64 * 2, i) % (2**bits)  # masked, as PyArg's B/H/I/K
            out.append(struct.pack("<Q", x))
        elif c == "d":
            out.append(struct.pack("<d", float(v)))
        elif c == "f":
            out.append(_f32(float(v)).ljust(8, b"\0"))
        elif c == "g":  # Triton's pack_bf16: the upper half of the fp32 value
            out.append(_f32(float(v))[2:4].ljust(8, b"\0"))
        elif c == "e":
            out.append(struct.pack("<e", float(v)).ljust(8, b"\0"))
        else:
            raise ValueError(f"unknown type code {c!r}")
    return b"".join(out) + b"\0" * (8 * trailing)


def _f32(x: float) -> bytes:
    """C's ``(float)x``: round to nearest, out of range to infinity (struct raises instead)."""
    try:
        return struct.pack("<f", x)
    except OverflowError:
        return struct.pack("<f", math.copysign(math.inf, x))


# --------------------------------------------------------------------------- the extension


def module():
    """The built extension, or None when it cannot be built (``build_error()`` says why).
    Built once per process (Triton caches the binary on disk under its source's hash)."""
    if "module" not in _STATE:
        try:
            _STATE["module"] = _build(SOURCE.read_text())
        except Exception as e:  # noqa: BLE001 - any build failure means Triton's launcher
            _STATE["module"], _STATE["error"] = None, f"{type(e).__name__}: {e}"
            log.warning("warpgauge C launcher not built (%s): Triton's launcher is used",
                        _STATE["error"])  # fmt: skip
    return _STATE["module"]


def build_error() -> str | None:
    return _STATE.get("error")


def _build(src: str):
    from triton.runtime.build import compile_module_from_src

    return compile_module_from_src(
        src=src, name=NAME, library_dirs=[], include_dirs=[include_dir()], libraries=[]
    )


def include_dir() -> str:
    """Triton's bundled CUDA headers (``backends/nvidia/include``, holding ``cuda.h``)."""
    import triton.backends.nvidia as nv

    return os.path.join(os.path.dirname(nv.__file__), "include")


def for_compiled(compiled, run):
    """``(launch, (spec,))`` for a loaded ``CompiledKernel`` whose Triton launcher is ``run``,
    called as ``launch(g0, g1, g2, stream, spec, *args)`` like ``_launch._Entry.fast``; None
    when Triton's launcher must be used (the reason in ``FALLBACKS[name]``)."""
    name = str(getattr(compiled, "name", "?"))
    try:
        spec = _spec_of(compiled, run, name)
    except Unsupported as e:
        FALLBACKS[name] = str(e)
        return None
    mod = module()
    if mod is None:
        FALLBACKS[name] = f"not built: {build_error()}"
        return None
    return mod.launch, (spec,)


def _spec_of(compiled, run, name) -> bytes:
    import triton

    trailing = trailing_pointers(triton.__version__)
    if type(run).__name__ != "CudaLauncher":
        raise Unsupported(f"launcher {type(run).__name__} is not Triton's CudaLauncher")
    if getattr(run, "gsan_enabled", False):
        raise Unsupported("GSan instrumentation adds arguments")
    for attr in ("global_scratch_size", "profile_scratch_size"):
        if getattr(run, attr, 1) != 0:
            raise Unsupported(f"{attr} = {getattr(run, attr, None)}: scratch memory")
    signature = getattr(getattr(compiled, "src", None), "signature", None)
    if not isinstance(signature, dict):
        raise Unsupported("no argument signature on the compiled kernel's source")
    md = compiled.metadata
    if getattr(md, "tensordesc_meta", None):
        raise Unsupported("tensor descriptor arguments")
    function = compiled.function
    if not isinstance(function, int) or function == 0:
        raise Unsupported("kernel not loaded")
    packed = getattr(compiled, "packed_metadata", None)  # what Triton's launcher parses ("iii")
    if type(packed) is not tuple or len(packed) != 3 or any(type(v) is not int for v in packed):
        raise Unsupported(f"packed metadata {packed!r} is not (num_warps, num_ctas, shared)")
    num_warps, num_ctas, shared = packed
    return spec_bytes(
        function,
        num_warps,
        num_ctas,
        shared,
        getattr(run, "launch_cooperative_grid", False),
        getattr(run, "launch_pdl", False),
        type_codes(signature.values()),
        trailing,
        name,
        RELEASE_GIL,
    )
