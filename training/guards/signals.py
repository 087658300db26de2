"""SIGINT / SIGTERM during training: finish the current step, save, and exit with the signal's code; a wait that
may be cut short (the setup, an evaluation, a snapshot, the closing sample, a compile's warm-up) is cut at once.

Design choices:
- Between steps the handler only records the signal (a step cut in half would tear the optimizer's state). Waits
  that change nothing a checkpoint holds run inside `stop_at_once()`, where it raises `Interrupted`; a checkpoint
  write never does, and always runs to its end.
- Under torchrun no wait is cut short (the ranks would leave a collective at different points): they stop at the
  end of the step, together.
- A second Ctrl-C aborts at once, except under torchrun, whose agent forwards each Ctrl-C a second time.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

from common.errors import Interrupted

SIGNALS = ("SIGINT", "SIGTERM")  # what a run stopped by a signal records as `stopped`
_active: StopSignals | None = None  # the handlers installed now (one training per process)


def under_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ


class StopSignals:
    """Records the first SIGINT or SIGTERM so the loop stops after its current step (a checkpoint is written
    then); inside `stop_at_once()` it raises `Interrupted` instead; a second Ctrl-C aborts at once."""

    def __init__(self) -> None:
        self.received: str | None = None
        self.at_once = False
        self._old: dict = {}

    def __enter__(self) -> StopSignals:
        global _active
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        if self._old:
            _active = self
        return self

    def _handle(self, signum, frame) -> None:
        if self.received and signum == signal.SIGINT and not under_torchrun():
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name
        if self.at_once:
            self.at_once = False  # once: the clean-up after it is not cut short in turn
            raise Interrupted(self.received)

    def __exit__(self, *exc) -> None:
        global _active
        if _active is self:
            _active = None
        self.at_once = False
        if self.received and under_torchrun():
            return  # stopping: torchrun's forwarded copy may still arrive, and must not abort the ending run
        for sig, old in self._old.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def stop_signals() -> Iterator[StopSignals]:
    """The training's `StopSignals`: the one installed already (the loop runs inside train()'s), else a new one."""
    if _active is not None:
        yield _active
        return
    with StopSignals() as signals:
        yield signals


@contextlib.contextmanager
def stop_at_once() -> Iterator[None]:
    """Within: SIGINT or SIGTERM raise `Interrupted` at once (one received before raises on entry). Outside a
    training's `StopSignals`, and under torchrun, it changes nothing."""
    signals = _active
    if signals is None or under_torchrun():
        yield
        return
    if signals.received:
        raise Interrupted(signals.received)
    before, signals.at_once = signals.at_once, True
    try:
        yield
    finally:
        signals.at_once = before
