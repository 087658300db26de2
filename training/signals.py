"""SIGINT / SIGTERM during training: finish the current step, save, and exit with the signal's code."""

from __future__ import annotations

import signal


class StopSignals:
    """Records the first SIGINT or SIGTERM so the loop stops after its current step (a checkpoint is written
    then); a second Ctrl-C aborts at once."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._old: dict = {}

    def __enter__(self) -> StopSignals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def _handle(self, signum, frame) -> None:
        if self.received and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
