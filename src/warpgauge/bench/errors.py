"""Errors the harness raises or records, and the per-provider time limit.

Kept apart from the runner so that the runner, the precompile workers and the measuring code can
all import them without importing each other."""

from __future__ import annotations

import contextlib
import signal
import threading
import traceback
from collections.abc import Callable

ERROR_TAIL_LINES = 8
ERROR_MAX_CHARS = 2000


class Terminated(KeyboardInterrupt):
    """SIGTERM (e.g. ``timeout``), handled like Ctrl-C."""


class DeviceLost(RuntimeError):
    """The device stopped working (a sticky CUDA error); the run cannot go on."""


class ProviderTimeout(RuntimeError):
    """A provider's call ran past the per-provider time limit (``sampling.provider_timeout_s``)."""


def format_error(e: BaseException) -> str:
    """``Type: message`` plus the last lines of the traceback, bounded in length."""
    head = f"{type(e).__name__}: {e}".strip()
    tb = traceback.format_exception(type(e), e, e.__traceback__)
    lines = [ln.rstrip() for chunk in tb[:-1] for ln in chunk.splitlines() if ln.strip()]
    tail = "\n".join(lines[-ERROR_TAIL_LINES:])
    text = head if not tail else f"{head}\n{tail}"
    return (
        text if len(text) <= ERROR_MAX_CHARS else text[: ERROR_MAX_CHARS - 20] + " ... [truncated]"
    )


def is_oom(e: BaseException) -> bool:
    """Out of GPU memory (``torch.cuda.OutOfMemoryError`` or the allocator's message)."""
    return type(e).__name__ == "OutOfMemoryError" or "out of memory" in str(e).lower()


STUCK_GRACE_S = 30.0  # after the limit, how long a call blocked in the driver may still take
IMPORT_RETRY_S = 0.05  # a limit that fires inside an import is re-armed for this long


def _importing(frame) -> bool:
    """Whether ``frame`` (where a signal arrived) is inside a module import."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def time_limit(
    seconds: float | None,
    what: str = "the provider",
    on_stuck: Callable[[str], None] | None = None,
    grace_s: float = STUCK_GRACE_S,
):
    """Raise :class:`ProviderTimeout` in the main thread if the block runs longer than
    ``seconds`` of wall time (SIGALRM). A no-op off the main thread, for ``seconds`` <= 0, or
    where SIGALRM does not exist.

    SIGALRM interrupts Python code; a call blocked inside the driver (a kernel that never
    finishes) does not return to Python, so the signal cannot act. For that case ``on_stuck(what)``
    is called from a watchdog thread once the block has run ``seconds + grace_s``: the
    runner records the hung provider in ``run.json`` and ends the process, and ``--resume`` skips
    that provider and measures the rest."""
    usable = (
        seconds is not None
        and seconds > 0
        and hasattr(signal, "SIGALRM")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0  # no nesting: an outer limit holds
    )
    if not usable:
        yield
        return

    def handler(signum, frame):
        if _importing(frame):
            # An exception raised inside an import leaves a half-initialized module behind (on
            # the H200 a limit that fired while a provider's first call imported torch.fx left
            # `sympy` without `core`, and the whole run crashed); try again just after it.
            signal.setitimer(signal.ITIMER_REAL, IMPORT_RETRY_S)
            return
        raise ProviderTimeout(f"{what} ran past the per-provider time limit of {seconds:g} s")

    watchdog = None
    if on_stuck is not None:
        watchdog = threading.Timer(seconds + grace_s, on_stuck, args=(what,))
        watchdog.daemon = True
        watchdog.start()
    previous = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if watchdog is not None:
            watchdog.cancel()
