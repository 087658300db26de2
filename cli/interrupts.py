"""Ctrl-C from an entry script's first import to its exit: `interrupted`, exit 130, no traceback, nothing half-done.

Design choices:
- cli.entry imports this first, and it imports nothing slow: Python's own start-up is all that comes before it.
- SIGINT raises KeyboardInterrupt as Python's handler does, but not where a library would swallow or mangle it:
  - inside an import (torch's C++ start-up goes on without numpy, or aborts in pybind11, when numpy's import fails):
    a thread sends it again to the main thread as soon as that thread's stack holds no import;
  - while Hydra starts a job (its first look at the config takes an error caused by one for "no mode" and goes
    on): within `held()` (run_hydra) until `release()` (config_object: the job has its config), which raises it.
- An uncaught KeyboardInterrupt (or an error caused by one) prints `interrupted` and exits 130; `finally` blocks
  and `with` exits have run by then. One that Python swallows in a callback or __del__ is sent again.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

_IMPORTLIB = ("importlib._bootstrap", "_frozen_importlib")  # the import machinery's modules, frozen or not
_resending = False  # a SIGINT waits for the main thread to leave its import
_holding = _held = False  # within held(): whether SIGINT waits, and whether one came


def from_interrupt(exc: BaseException | None) -> bool:
    """True for a KeyboardInterrupt, or an error raised because of one: Python 3.11 wraps a Ctrl-C that lands in
    a class body's __set_name__ (mid-import) in a RuntimeError whose __cause__ is the KeyboardInterrupt."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def debug_enabled() -> bool:
    return os.environ.get("KOCHAR_DEBUG", "") not in ("", "0") or os.environ.get("HYDRA_FULL_ERROR") == "1"


def _importing(frame) -> bool:
    """True when `frame` or one of its callers is the import machinery's: that thread is inside an import."""
    while frame is not None:
        if str(frame.f_globals.get("__name__")).startswith(_IMPORTLIB):
            return True
        frame = frame.f_back
    return False


def _send_after_imports(main: int) -> None:
    global _resending
    time.sleep(0.005)  # the callback or handler that held it has returned by then
    while _importing(sys._current_frames().get(main)):
        time.sleep(0.005)
    _resending = False
    if main in sys._current_frames():  # else the main thread is done: the command is ending anyway
        signal.pthread_kill(main, signal.SIGINT)


def _send_again() -> None:
    """Send SIGINT to the main thread again once it is out of every import (from a thread: nothing waits here)."""
    global _resending
    if not _resending:
        _resending = True
        _thread.start_new_thread(_send_after_imports, (threading.main_thread().ident,))  # takes no Python lock


def _on_sigint(signum, frame) -> None:
    global _held
    if _holding:
        _held = True
    elif _importing(frame):
        _send_again()
    else:
        raise KeyboardInterrupt


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Within, a Ctrl-C waits until `release()` or the block's end, which raise it (Hydra may swallow one)."""
    global _holding, _held
    _holding, _held = True, False
    try:
        yield
    finally:
        release()


def release() -> None:
    """End the wait of `held()`: the Ctrl-C that came meanwhile, if any, is raised now, as a KeyboardInterrupt."""
    global _holding, _held
    came = _holding and _held
    _holding = _held = False
    if came:
        raise KeyboardInterrupt


def _interrupt_hook(exc_type, exc, tb) -> None:
    if from_interrupt(exc) and not debug_enabled():  # nothing imported here: it may run mid-import
        print("interrupted", file=sys.__stderr__, flush=True)
        os._exit(130)  # sys.exit cannot be used from inside an excepthook
    _previous_hook(exc_type, exc, tb)


def _unraisable_hook(unraisable) -> None:
    """A Ctrl-C that lands in a weakref callback or a __del__ is printed by Python with its traceback and lost: the
    command would go on. While SIGINT raises KeyboardInterrupt (ours or Python's handler) it is sent again."""
    ours = signal.getsignal(signal.SIGINT) in (_on_sigint, signal.default_int_handler)
    if type(unraisable.exc_value) is KeyboardInterrupt and ours:
        _send_again()
        return
    _previous_unraisable_hook(unraisable)


_previous_hook, _previous_unraisable_hook = sys.excepthook, sys.unraisablehook
sys.excepthook, sys.unraisablehook = _interrupt_hook, _unraisable_hook
# in place of Python's handler only: a SIGINT ignored (a background job) stays ignored, a caller's own handler stays
_in_main = threading.current_thread() is threading.main_thread()
if _in_main and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _on_sigint)
if os.environ.get("KOCHAR_READY_FILE"):  # a test interrupts from here on
    open(os.environ["KOCHAR_READY_FILE"], "a").close()
