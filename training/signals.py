"""SIGINT / SIGTERM during training: finish the current step, save, and exit with the signal's code.

Design choices:
- A second Ctrl-C aborts at once, except under torchrun: there a Ctrl-C reaches each worker twice, once from
  the terminal and once forwarded by torchrun's agent, so a second one is not the user insisting (the agent
  kills workers that take longer than its shutdown timeout anyway).
"""

from __future__ import annotations

import os
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
        if self.received and signum == signal.SIGINT and "TORCHELASTIC_RUN_ID" not in os.environ:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc) -> None:
        if self.received and "TORCHELASTIC_RUN_ID" in os.environ:
            return  # stopping: torchrun's forwarded copy may still arrive, and must not abort the ending run
        for sig, old in self._old.items():
            signal.signal(sig, old)
