"""The training progress bar: it counts toward whichever limit will stop the run.

Design choices:
- Steps toward the step limit; under `train.max_seconds` alone, seconds from the start.
- With both, the bar estimates after every step which runs out first, counts toward that one (its percentage and ETA
  true), shows the step count beside the loss, and names the limit in `until=`.
- The loop calls `update(1)` per step as with any tqdm bar; the bar reads the run's clock itself.
"""

from __future__ import annotations

from collections.abc import Callable

from tqdm import tqdm

_SECONDS_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f}s [{elapsed}<{remaining}{postfix}]"


class RunBar(tqdm):
    """`tqdm` over steps, or over seconds while a time budget is the limit that will stop the run; `elapsed` is the
    run's clock (seconds, resumed time included)."""

    def __init__(
        self,
        max_steps: int | None,
        step: int,
        max_seconds: float | None,
        elapsed: Callable[[], float],
        disable: bool = False,
        file=None,
    ):
        self.max_steps, self.max_seconds, self.clock = max_steps, max_seconds, elapsed
        self.step, self.first_step, self.first_time = step, step, elapsed()
        self.limit = "max_steps"
        self.shown: dict = {}
        super().__init__(
            total=max_steps, initial=step, disable=disable, desc="train", unit="step", dynamic_ncols=True, file=file
        )
        if max_steps is None and max_seconds:
            self._switch("max_seconds", self.first_time)

    def _seconds_bind(self, now: float) -> bool:
        """Whether the time budget will stop the run before the step limit, at this process's pace."""
        if self.max_steps is None:
            return True
        done, spent = self.step - self.first_step, now - self.first_time
        if done <= 0 or spent <= 0:
            return False
        return (self.max_steps - self.step) * spent / done > self.max_seconds - now

    def _switch(self, limit: str, now: float) -> None:
        self.limit = limit
        if limit == "max_seconds":
            self.unit, self.total, self.bar_format = "s", self.max_seconds, _SECONDS_FORMAT
            self.n = self.last_print_n = min(now, self.max_seconds)
        else:
            self.unit, self.total, self.bar_format = "step", self.max_steps, None
            self.n = self.last_print_n = self.step
        self.set_postfix(self.shown, refresh=False)

    def update(self, n: float = 1) -> bool | None:
        self.step += int(n)
        if not self.max_seconds:
            return super().update(n)
        now = self.clock()
        limit = "max_seconds" if self._seconds_bind(now) else "max_steps"
        if limit != self.limit:
            self._switch(limit, now)
        if self.limit == "max_seconds":
            self.set_postfix(self.shown, refresh=False)  # the step count beside the loss
            return super().update(max(0.0, min(now, self.max_seconds) - self.n))
        return super().update(n)

    def set_postfix(self, ordered_dict=None, refresh: bool = True, **kwargs) -> None:
        """The caller's values (loss, tokens/s), then the step count when counting seconds, and the limit."""
        self.shown = {**(ordered_dict or {}), **kwargs}
        extra = {}
        if self.limit == "max_seconds":
            extra["step"] = self.step
        if self.max_seconds:
            extra["until"] = f"{self.max_seconds:g}s" if self.limit == "max_seconds" else f"step {self.max_steps}"
        super().set_postfix({**self.shown, **extra}, refresh=refresh)

    @property
    def format_dict(self) -> dict:
        d = super().format_dict
        if self.limit == "max_seconds":
            d["rate"] = 1.0  # a second of budget per second of wall-clock: the ETA is the time left
        return d
