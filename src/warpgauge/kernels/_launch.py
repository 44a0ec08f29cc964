"""Small launch helpers shared by the kernel modules, and the one launch path.

Every launcher calls :func:`launch`. In eager code (wrap-triton dispatch off, see ``ops.py``) it
launches through a per-kernel cache of compiled kernels instead of ``JITFunction.run``, which
costs ~20 us of host time per call in Triton 3.6 (``anchors-h200.md``). What a cached launch does:

1. Triton's own binder (the function ``JITFunction.run`` calls first) binds the arguments and
   computes their specialization: dtypes, integers equal to 1 or divisible by 16, pointers
   aligned to 16 bytes, constexpr values. The cache key is that specialization plus the launch
   options (``num_warps``, ...) and the current device, so a cached kernel is only ever used for
   arguments Triton would have compiled the same binary for.
2. A hit launches the ``CompiledKernel`` through its low-level launcher on the current stream
   (warpgauge's lean C launcher, ``_clauncher``, where it handles the kernel; else Triton's).
   Launch hooks (profilers such as proton) are honoured: when a hook is installed, the launch
   metadata is built and the hooks are passed, exactly as ``JITFunction.run`` does.
3. A miss (first call, new specialization) takes Triton's normal path, which compiles if needed
   and launches, and caches the kernel it returns.

An autotuned kernel looks up the autotuner's own cache of chosen configs with the autotuner's key;
a key it has not tuned yet goes through ``Autotuner.run`` (which tunes), later calls launch the
chosen config's compiled kernel directly.

What the cached path skips (all per-call work of ``JITFunction.run`` that cannot change the
result for an already-compiled key): re-reading Triton's environment knobs (``TRITON_DEBUG`` and
the instrumentation mode are read when a kernel is first compiled, not per call), stringifying
the options for Triton's key, the check that the kernel's global constants did not change since
compilation, and the launch-metadata dict when no launch hook is installed. Pre-run hooks, a
non-JIT kernel, an async compile, or a Triton whose internals are not the ones recognised here
all take the normal path. Under the interpreter (``TRITON_INTERPRET=1``) or while wrap-triton
dispatch is on (``torch.compile`` tracing, fake tensors) the normal ``wrap_triton`` path is
always taken. ``WARPGAUGE_FAST_LAUNCH=0`` (or ``_launch.FAST = False``) turns the cache off.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import TYPE_CHECKING

import torch
from torch.library import wrap_triton

from .._device import device_info

if TYPE_CHECKING:
    from .plans import RowPlan

__all__ = [
    "launch",
    "cdiv",
    "next_pow2",
    "wrap_triton",
    "row_plan",
    "empty",
    "empty_rows_like",
    "compiled_variants",
    "launch_stats",
    "clear_launch_cache",
]

# Tests set WARPGAUGE_POISON_OUTPUTS=1 so that every output and scratch buffer the launchers
# allocate starts as NaN: an element a kernel forgets to write then fails the reference check.
# Read once at import; costs nothing per call when off.
POISON = os.environ.get("WARPGAUGE_POISON_OUTPUTS", "0") not in ("", "0")

# The cached launch path (module docstring). A plain module flag so tests and the host-cost
# benchmark can compare both paths in one process.
FAST = os.environ.get("WARPGAUGE_FAST_LAUNCH", "1") not in ("", "0")
# Cached launches through warpgauge's lean C launcher (``_clauncher``) instead of Triton's
# generated one, where it handles the kernel; read when a kernel is first cached.
C_LAUNCH = os.environ.get("WARPGAUGE_C_LAUNCH", "1") not in ("", "0")

try:  # torch's switch for wrap_triton's higher-order-op dispatch (on: tracing; off: eager)
    from torch._library.triton import is_wrap_triton_enabled as _wrap_enabled
except ImportError:  # pragma: no cover - a torch without it: never take the cached path
    _wrap_enabled = None


def cdiv(a: int, b: int) -> int:
    """Ceiling division of host ints. ``triton.cdiv`` is a constexpr function in newer Tritons
    (about 2.6 us a call on the host with Triton 3.9), too slow for a launcher's per-call math."""
    return -(-a // b)


def next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` for host ints (0 for 0), as ``triton.next_power_of_2``
    returns it for every ``n < 2**64``; that one is a constexpr function too (same host cost).
    Anything but a plain int (a traced ``SymInt``, a NumPy integer) goes to Triton's."""
    if type(n) is int:
        return 1 << (n - 1).bit_length() if n > 0 else 0
    import triton  # here, not at import: `import warpgauge` loads no Triton (tests/test_errors.py)

    return triton.next_power_of_2(n)


def empty(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    t = torch.empty(shape, dtype=dtype, device=device)
    if POISON:
        t.fill_(float("nan") if dtype.is_floating_point else 0x5A)
    if _RECORDING is not None and (rec := _recording()) is not None:
        rec.allocs.append(t)
    return t


def zeros(shape, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A zero-filled scratch tensor a launch needs zeroed (cooperative plans' statistics slots):
    ``torch.zeros``, never poisoned, and recorded as a zeroed allocation, so a replay allocates
    it with ``torch.zeros`` too (``_replay``)."""
    t = torch.zeros(shape, dtype=dtype, device=device)
    if _RECORDING is not None and (rec := _recording()) is not None:
        rec.zeroed.add(len(rec.allocs))
        rec.allocs.append(t)
    return t


# What makes torch.empty differ from the allocator's own entry: deterministic algorithms (it may
# fill the memory), dispatch modes and function modes (they see it and may change it).
MODE_CHECKS = tuple(
    getattr(torch._C, name, None)
    for name in (
        "_get_deterministic_algorithms",
        "_len_torch_dispatch_stack",
        "_len_torch_function_stack",
    )
)


def direct_empty(shape, strides, dtype, dev, current):
    """A zero-argument allocator of a ``shape``/``strides``/``dtype`` tensor on ``dev`` through
    the allocator's own entry (Inductor's ``empty_strided_cuda``/``_cpu``: sizes, strides and
    dtype straight to ``at::detail``, without torch.empty's argument parsing and dispatch; 0.47
    against 1.0 us per call on the CPU machine), or None. The CUDA one allocates on the current
    device, so only for an allocation on ``current`` (the recording's device, which every replay
    checks first). Tried once here: None unless it gives exactly that tensor (another torch's
    signature raises or differs)."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    if dev.type == "cuda" and dev.index == current:
        fn = getattr(guards, "_empty_strided_cuda", None)
    elif dev.type == "cpu":
        fn = getattr(guards, "_empty_strided_cpu", None)
    else:
        return None
    if fn is None or None in MODE_CHECKS:
        return None
    alloc = functools.partial(fn, tuple(shape), tuple(strides), dtype)
    try:
        t = alloc()
    except (TypeError, RuntimeError, ValueError):
        return None
    if (tuple(t.shape), t.stride(), t.dtype, t.device) != (
        tuple(shape),
        tuple(strides),
        dtype,
        dev,
    ):
        return None
    return alloc


@functools.lru_cache(maxsize=4096)
def _plan_for(
    rows: int, width: int, sm_count: int, op: str = "", l2_bytes: int = 0, elem_bytes: int = 2
) -> RowPlan:
    from .plans import RowPlan  # imports triton: not at ``import warpgauge`` time

    return RowPlan.for_shape(rows, width, sm_count, op, l2_bytes, elem_bytes)


def row_plan(
    rows: int, width: int, device: torch.device, plan: RowPlan | None, op: str = "",
    elem_bytes: int = 2,
) -> RowPlan:  # fmt: skip
    """``plan`` if given, else the documented rule's plan for ``op`` at this shape (cached per
    shape and element size: a frozen dataclass is immutable, so the same object serves every
    call). The rule reads the device's SM count and L2 size."""
    if plan is not None:
        return plan
    info = device_info(device)
    if isinstance(rows, int) and isinstance(width, int):  # SymInts (tracing) are not cached
        return _plan_for(rows, width, info.sm_count, op, info.l2_bytes, elem_bytes)
    from .plans import RowPlan

    # Under tracing with dynamic shapes the width is a SymInt. Widths are compile-time for the
    # kernels (constexpr N), so the plan specializes on it (a guard); the row count is hinted
    # (a plan chosen by the rows' L2 footprint uses the example's row count, as before for the
    # rows-per-SM thresholds).
    return RowPlan.for_shape(rows, int(width), info.sm_count, op, info.l2_bytes, elem_bytes)


def empty_rows_like(x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A contiguous output with ``x``'s shape (never ``x``'s strides: rows may be a slice)."""
    return empty(x.shape, dtype or x.dtype, x.device)


def compiled_variants(kernel) -> int:
    """How many compiled versions of a @triton.jit (or autotuned) kernel are cached in this
    process, over all devices. Tests use it to show that new row counts reuse compiled kernels."""
    fn = kernel
    # Autotuner / Heuristics -> JITFunction. A JITFunction's own ``fn`` is the Python function,
    # so unwrap only while there is no cache here (taking ``.fn`` of a plain @triton.jit kernel
    # counted 0 for every row kernel and made the GPU compile-once tests vacuous).
    while not hasattr(fn, "device_caches") and hasattr(fn, "fn"):
        fn = fn.fn
    caches = getattr(fn, "device_caches", None)
    if caches is None:
        return 0
    return sum(len(entry[0]) for entry in caches.values())


# --------------------------------------------------------------------------- the cached path


class _Stats:
    """Counters of what launches did (tests assert on them; cheap integer adds)."""

    __slots__ = ("hits", "misses", "slow", "tuned_misses")

    def __init__(self):
        self.hits = self.misses = self.slow = self.tuned_misses = 0

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__slots__}


_STATS = _Stats()
_RECORDING = None  # a _replay._Recording while a launcher call is being recorded ...
_RECORDING_THREAD = None  # ... by this thread


def _recording():
    """The recording this thread's launches and allocations belong to, if any."""
    if _RECORDING is not None and threading.get_ident() == _RECORDING_THREAD:
        return _RECORDING
    return None


# JITFunction -> {(device, specialization, options): _Entry}
_CACHE: dict = {}
_TYPES = None  # (JITFunction, Autotuner, HookChain or None), resolved on first use
_RUNTIME = None  # (get_device, get_stream, knobs.runtime)
# Persistent scratch tensors a launcher owns and reuses across calls (data pointer -> the raw
# stream handle they serve), e.g. int4_tile's split-K counters: a recorded launch may hold one
# as a constant pointer (``_replay``), and its replay is refused on any other stream.
WORKSPACES: dict[int, int] = {}


def launch_stats() -> dict:
    """Counts of cached launches (``hits``), first launches of a key (``misses``), launches that
    took Triton's normal path for another reason (``slow``), and autotuned launches whose key the
    autotuner had not tuned yet (``tuned_misses``)."""
    return _STATS.as_dict()


def clear_launch_cache() -> None:
    _CACHE.clear()
    _STATS.__init__()


class _Entry:
    """A compiled kernel and how to launch it. ``fast(g0, g1, g2, stream, *head, *args)``
    launches it when no launch hook is installed: warpgauge's C launcher (``_clauncher``) where
    it handles the kernel and ``C_LAUNCH`` is on, else Triton 3.6's C launcher itself when this
    module recognises it (no scratch memory to allocate, so ``CudaLauncher.__call__`` would only
    forward its arguments), else the ``CompiledKernel``'s launcher with no metadata or hooks."""

    __slots__ = ("compiled", "run", "function", "packed", "fast", "head")

    def __init__(self, compiled):
        self.compiled = compiled
        self.run = compiled.run  # the launcher (a property that loads the binary once)
        self.function = compiled.function
        self.packed = compiled.packed_metadata
        self.fast, self.head = _c_launcher(self.run, self.function, self.packed)
        if C_LAUNCH:  # warpgauge's own C launcher where it handles the kernel (_clauncher)
            from . import _clauncher

            self.fast, self.head = _clauncher.for_compiled(compiled, self.run) or (
                self.fast,
                self.head,
            )


# The argument layout of Triton 3.6's C launcher (backends/nvidia/driver.py): grid x, y, z,
# stream, function, cooperative, PDL, global scratch, profile scratch, kernel metadata, launch
# metadata, enter hook, exit hook, then the kernel arguments.
_C_FORMAT_36 = "iiiKKppOOOOOO"


def _c_launcher(run, function, packed):
    generic = (run, (function, packed, None, None, None))
    try:
        from triton.backends.nvidia import driver as nv
    except ImportError:  # pragma: no cover - no NVIDIA backend
        return generic
    if (
        getattr(nv, "_BASE_ARGS_FORMAT", None) != _C_FORMAT_36
        or type(run).__name__ != "CudaLauncher"
        or getattr(run, "global_scratch_size", 1) != 0
        or getattr(run, "profile_scratch_size", 1) != 0
        or not callable(getattr(run, "launch", None))
        or not hasattr(run, "launch_cooperative_grid")
        or not hasattr(run, "launch_pdl")
    ):
        return generic
    head = (function, run.launch_cooperative_grid, run.launch_pdl, None, None, packed)
    return run.launch, head + (None, None, None)


def hooks_idle() -> bool:
    """No launch hook installed (profilers such as proton install them)."""
    runtime = (_RUNTIME or _runtime())[2]
    chain = (_TYPES or _types())[2]
    enter, exit_ = runtime.launch_enter_hook, runtime.launch_exit_hook
    return not (_hook_active(enter, chain) or _hook_active(exit_, chain))


def _types():
    global _TYPES
    if _TYPES is None:
        from triton.runtime.autotuner import Autotuner
        from triton.runtime.jit import JITFunction

        try:
            from triton.knobs import HookChain
        except ImportError:  # older Triton: hooks are plain callables or None
            HookChain = None
        _TYPES = (JITFunction, Autotuner, HookChain)
    return _TYPES


def _runtime():
    """Current device and stream getters, the ones Triton's driver uses (resolved once)."""
    global _RUNTIME
    if _RUNTIME is None:
        from triton import knobs
        from triton.runtime.driver import driver

        get_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
        get_stream = driver.active.get_current_stream
        _RUNTIME = (get_device, get_stream, knobs.runtime)
    return _RUNTIME


def _hook_active(hook, chain_type) -> bool:
    if hook is None:
        return False
    if chain_type is not None and isinstance(hook, chain_type):
        return bool(hook.calls)
    return True


def launch(kernel, grid, *args, **meta) -> None:
    """Launch a @triton.jit (or autotuned) ``kernel`` over ``grid``: the one place every launcher
    goes through, so the launch path (and its host cost) is decided here, not in each module."""
    if FAST and _wrap_enabled is not None and not _wrap_enabled():
        jit_type, tuner_type, _ = _TYPES or _types()
        tk = type(kernel)
        if tk is jit_type:
            if _launch_cached(kernel, grid, args, meta):
                return
        elif (
            tk is tuner_type
            and type(kernel.fn) is jit_type
            and _launch_tuned(kernel, grid, args, meta)
        ):
            return
    _STATS.slow += 1
    if _RECORDING is not None and (rec := _recording()) is not None:
        rec.complete = False
    if _without_data(kernel, args):
        return
    wrap_triton(kernel)[grid](*args, **meta)


def _without_data(kernel, args) -> bool:
    """True for an interpreted kernel given meta or fake tensors: there is nothing to compute
    (the outputs already have their shapes and dtypes) and the interpreter would try to read the
    data. Compiled kernels go through wrap_triton, whose higher-order op handles both."""
    jit_type, tuner_type, _ = _TYPES or _types()
    inner = kernel.fn if type(kernel) is tuner_type else kernel
    if type(inner) is jit_type:
        return False
    from torch._subclasses.fake_tensor import FakeTensor

    return any(
        isinstance(a, torch.Tensor) and (a.is_meta or isinstance(a, FakeTensor)) for a in args
    )


def _launch_tuned(tuner, grid, args, meta) -> bool:
    """Autotuned kernel: the autotuner's chosen config for this key, then the cached JIT launch.
    Returns False when the normal path must run (untuned key, hooks, unexpected arguments)."""
    if len(tuner.configs) > 1:
        # Autotuner.run's key: the key arguments' values, then the dtype of every argument that
        # has one (positional first, then keywords), in that order.
        names = tuner.arg_names
        if len(args) > len(names):
            return False
        named = dict(zip(names, args))
        for k, v in meta.items():
            if k in names:
                named[k] = v
        try:
            key = [named[k] for k in tuner.keys if k in named]
        except TypeError:
            return False
        for v in named.values():
            if hasattr(v, "dtype"):
                key.append(str(v.dtype))
        key = tuple(key)
        config = tuner.cache.get(key)
        if config is None:
            _STATS.tuned_misses += 1
            return False  # Autotuner.run tunes this key; the next call finds it
    else:
        config = tuner.configs[0]
    if config.pre_hook is not None:
        return False
    tuner.best_config = config
    # Autotuner.run: kernel.fn.run(*args, **kwargs, **config.all_kwargs()), so a keyword given
    # both ways is an error there; keep that behaviour by taking the normal path.
    cfg = config.all_kwargs()
    if any(k in meta for k in cfg):
        return False
    return _launch_cached(tuner.fn, grid, args, {**meta, **cfg})


def _launch_cached(fn, grid, args, meta) -> bool:
    if fn.pre_run_hooks:
        return False
    get_device, get_stream, runtime = _RUNTIME or _runtime()
    device = get_device()
    caches = fn.device_caches.get(device)
    if caches is None:  # first launch on this device: Triton builds its binder, then we key
        return _first_launch(fn, grid, args, meta, None, device)
    binder = caches[-1]
    bound, spec, options = binder(*args, **meta)
    try:
        key = (device, tuple(spec), tuple(options.items()))
        per_fn = _CACHE.get(fn)
        entry = per_fn.get(key) if per_fn is not None else None
    except TypeError:  # an unhashable specialization value: never cached
        return False
    if entry is None:
        return _first_launch(fn, grid, args, meta, key)
    stream = get_stream(device)
    if callable(grid):
        grid = grid(bound)
    n = len(grid)
    g0 = grid[0]
    g1 = grid[1] if n > 1 else 1
    g2 = grid[2] if n > 2 else 1
    chain = _TYPES[2]
    enter = runtime.launch_enter_hook
    exit_ = runtime.launch_exit_hook
    if _hook_active(enter, chain) or _hook_active(exit_, chain):
        metadata = entry.compiled.launch_metadata(grid, stream, *bound.values())
        entry.run(g0, g1, g2, stream, entry.function, entry.packed, metadata, enter, exit_,
                  *bound.values())  # fmt: skip
    else:
        entry.fast(g0, g1, g2, stream, *entry.head, *bound.values())
    _STATS.hits += 1
    if _RECORDING is not None and (rec := _recording()) is not None:
        rec.launches.append((entry, (g0, g1, g2), _snapshot(bound.values())))
    return True


def _snapshot(values) -> tuple:
    """A launch's arguments as they were at the launch: an argument object other than a tensor
    (a TMA ``TensorDescriptor``) is copied with its list fields, so that a launcher changing it
    afterwards cannot change what was recorded."""
    out = []
    for v in values:
        d = getattr(v, "__dict__", None)
        if d is not None and not isinstance(v, torch.Tensor):
            c = object.__new__(type(v))
            c.__dict__ = {k: list(x) if isinstance(x, list) else x for k, x in d.items()}
            v = c
        out.append(v)
    return tuple(out)


def _first_launch(fn, grid, args, meta, key, device=None) -> bool:
    """Triton's normal path (compiles if needed, launches); cache the kernel it returns under
    ``key`` (computed now with the binder Triton has just built when ``key`` is None)."""
    compiled = fn.run(*args, grid=grid, warmup=False, **meta)
    _STATS.misses += 1
    if _RECORDING is not None and (rec := _recording()) is not None:
        rec.complete = False
    if key is None:
        caches = fn.device_caches.get(device)
        if caches is None:
            return True
        _, spec, options = caches[-1](*args, **meta)
        try:
            key = (device, tuple(spec), tuple(options.items()))
            hash(key)
        except TypeError:
            return True
    if compiled is not None and not hasattr(compiled, "result"):
        try:
            entry = _Entry(compiled)
        except AttributeError:  # not a CompiledKernel as this module knows it: never cached
            return True
        _CACHE.setdefault(fn, {})[key] = entry
    return True
