"""Loaded runs kept in memory: a least-recently-used cache with one lock per run.

Design choices:
- Each run loads under its own lock: a large load holds up no request for a loaded run, and a new run loads once.
- Callers take a run's `lock` per decoding step, not per request: requests on one run advance in turns.
- A rewritten checkpoint (a new file stamp) loads again; eviction only forgets an entry (its samples keep it)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import torch

from inference.loading import LoadedRun, load_run
from inference.run_files import RunFile
from playground.runs import file_stamp


@dataclass
class CachedRun:
    name: str
    run: LoadedRun
    stamp: tuple[int, int]
    lock: threading.Lock = field(default_factory=threading.Lock)  # one forward at a time on this model


class RunCache:
    def __init__(self, capacity: int, device: torch.device, weights: str = "averaged"):
        if capacity < 1:
            raise ValueError(f"cache capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.device = device
        self.weights = weights  # averaged (where a run kept an average) | raw
        self._runs: OrderedDict[Path, CachedRun] = OrderedDict()
        self._guard = threading.Lock()
        self._loading: dict[Path, threading.Lock] = {}
        self.loads = 0  # how many times a checkpoint was read (the tests count cache hits with it)

    def __len__(self) -> int:
        return len(self._runs)

    def _hit(self, path: Path, stamp: tuple[int, int]) -> CachedRun | None:
        with self._guard:
            entry = self._runs.get(path)
            if entry is None or entry.stamp != stamp:
                return None
            self._runs.move_to_end(path)
            return entry

    def get(self, name: str, target: Path | RunFile) -> CachedRun:
        """The run at `target` (a file RunRegistry.file chose, or a path), loaded now if it is not cached."""
        path = target.path if isinstance(target, RunFile) else target
        stamp = file_stamp(path)
        entry = self._hit(path, stamp)
        if entry is not None:
            return entry
        with self._guard:
            load_lock = self._loading.setdefault(path, threading.Lock())
        with load_lock:
            entry = self._hit(path, stamp)  # loaded by another request while we waited
            if entry is not None:
                return entry
            entry = CachedRun(name, load_run(target, self.device, weights=self.weights), stamp)
            with self._guard:
                self.loads += 1
                self._runs[path] = entry
                self._runs.move_to_end(path)
                while len(self._runs) > self.capacity:
                    self._runs.popitem(last=False)
            return entry
