"""Which runs the playground may open: discovery under `runs_dir`, safe names, a summary of each run, and the loaded
runs kept in memory (a least-recently-used cache with one lock per run).

Design choices:
- A name is checked as text, then by where it resolves; any refusal is the same 404: a client learns nothing outside.
- `ckpt=` may name a checkpoint outside `runs_dir` (as `generate.py` allows), listed as `@ckpt` and read as named.
- A summary is kept until its file's size or mtime changes: a page reload reads no weights.
- Each run loads under its own lock: a large load holds up no request for a loaded run, and a new run loads once.
- Callers take a run's `lock` per decoding step, not per request: requests on one run advance in turns.
- A rewritten checkpoint (a new file stamp) loads again; eviction only forgets an entry (its samples keep it)."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

import torch

from common.errors import UserError
from inference.checkpoint import CKPT_NAME
from inference.exported_folder import RECORD, exported_folder, is_exported
from inference.loading import LoadedRun, load_any, load_run
from inference.run_files import RunFile, folder_file, refuse_two_models, resolve_checkpoint, run_file
from inference.weights import choose_weights
from playground.schemas import ApiError

OUTSIDE_NAME = "@ckpt"
ROOT_NAME = "."
DISCOVERY_TTL = 2.0  # seconds a walk of runs_dir is reused: a page reload does not walk thousands of runs again
NAME_SHOWN = 80  # characters of a requested name repeated in an error message

log = logging.getLogger("kochar.playground")


def shown(name: str) -> str:
    """A requested name as an error message may repeat it: cut short, and any unencodable character escaped."""
    cut = name if len(name) <= NAME_SHOWN else name[:NAME_SHOWN] + "..."
    return repr(cut.encode("utf-8", "backslashreplace").decode("utf-8"))


def relative_message(message: str, path: Path, name: str) -> str:
    """An error message about the checkpoint `path` naming the run instead: no server path leaves the server."""
    text = " ".join(message.split())
    for p in sorted(
        {str(path), str(path.resolve()), str(path.parent), str(path.parent.resolve())}, key=len, reverse=True
    ):
        text = text.replace(f"{p}/{CKPT_NAME}", f"run {name!r}").replace(p, f"run {name!r}")
    return text


class SkipLog:
    """Logs each unreadable folder or file once, however many times the runs are listed."""

    def __init__(self) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def once(self, key: Path | str, message: str) -> None:
        with self._lock:
            if str(key) in self._seen:
                return
            self._seen.add(str(key))
        log.warning("playground: %s", message.encode("utf-8", "backslashreplace").decode("utf-8"))


def walk_checkpoints(runs_dir: Path, root: Path, skipped: SkipLog) -> list[Path]:
    """Every readable ckpt.pt resolving inside runs_dir, newest first; names not UTF-8 (unrequestable) are skipped."""
    found: dict[Path, int] = {}
    if not runs_dir.is_dir():
        return []
    for folder, _, files in os.walk(runs_dir, onerror=lambda e: skipped.once(e.filename, f"cannot read {e}")):
        if CKPT_NAME not in files:  # os.walk does not descend into symlinked folders
            continue
        p = Path(folder) / CKPT_NAME
        try:
            p.relative_to(runs_dir).as_posix().encode("utf-8")
            real = p.resolve()
            if real.is_relative_to(root) and real.is_file():
                real.relative_to(root).as_posix().encode("utf-8")  # the name it is listed under
                found[real] = real.stat().st_mtime_ns
        except UnicodeError:
            skipped.once(p, f"skipping {os.fsencode(folder)!r}: its name is not UTF-8, rename it to list it")
        except (OSError, RuntimeError, ValueError) as e:  # a symlink loop, a file removed while we walked
            skipped.once(p, f"skipping {p}: {type(e).__name__}: {e}")
    return sorted(found, key=lambda p: (-found[p], str(p)))


@dataclass
class RunInfo:
    name: str
    step: int | None
    recipe: str | None
    val_bpc: float | None
    tokenizer: str | None
    context_length: int | None
    default: bool = False
    error: str | None = None  # why the checkpoint could not be read; the run is still listed
    weights: str | None = None  # which of its weights the playground samples: averaged | raw | unknown
    average_updates: int | None = None  # the updates of that average (None: raw weights, or not recorded)
    checkpoint: str | None = None  # the file it reads: best.pt, ckpt.pt (or the file ckpt= named, kochar.json)
    chosen: str | None = None  # why that file: best (a better best.pt) | last | named (None: exported)


def file_stamp(path: Path) -> tuple[int, int]:
    """Changes whenever a checkpoint is rewritten (training saves atomically: a new inode, size, mtime)."""
    st = path.stat()
    return st.st_mtime_ns, st.st_size


def summarize(name: str, path: Path | RunFile, weights: str | None = None) -> RunInfo:
    """The RunInfo of the checkpoint at `path` (as RunRegistry.file chose it), naming the weights `weights=` picks."""
    where = path.path if isinstance(path, RunFile) else path
    try:
        ckpt, chosen = load_any(path, mmap=True)  # mapped: a checkpoint of any size costs little memory
        used = choose_weights(ckpt, weights)
    except UserError as e:
        return RunInfo(name, None, None, None, None, None, error=relative_message(str(e), where, name))
    config = ckpt.config if isinstance(ckpt.config, dict) else {}
    train = config.get("train") if isinstance(config.get("train"), dict) else {}
    # The modern recipe will record itself; runs older than that are the lecture's recipe.
    recipe = config.get("recipe") or train.get("recipe") or getattr(ckpt.model_config, "recipe", None) or "lecture"
    evaluated = ckpt.training is not None and math.isfinite(ckpt.training.val_loss)
    val_bpc = round(ckpt.training.val_loss * ckpt.tokens_per_char / math.log(2), 4) if evaluated else None
    kind = ckpt.tokenizer.get("kind", "char") if isinstance(ckpt.tokenizer, dict) else None
    return RunInfo(
        name,
        ckpt.step,
        str(recipe),
        val_bpc,
        kind,
        ckpt.model_config.context_length,
        weights=used.kind,
        average_updates=used.updates,
        checkpoint=where.name,
        chosen=chosen.chosen if chosen is not None else None,
    )


class RunRegistry:
    def __init__(
        self, runs_dir: str | Path, ckpt: str | None = None, ttl: float = DISCOVERY_TTL, weights: str | None = None
    ):
        self.runs_dir = Path(runs_dir).expanduser()
        self.weights = weights  # serve.py's weights=: which set each run's summary names
        self.fixed: Path | None = None  # the ckpt= checkpoint, when one was given
        self.fixed_file = False  # whether ckpt= named a checkpoint file (read as named) rather than a run folder
        if ckpt not in (None, ""):
            refuse_two_models(ckpt)  # a folder holding a run's checkpoint and an exported model
            self.fixed = (
                exported_folder(ckpt) / RECORD
                if is_exported(ckpt)  # export.py's folder
                else resolve_checkpoint(ckpt, self.runs_dir)
            ).resolve()
            self.fixed_file = not Path(ckpt).expanduser().is_dir()
        self.ttl = ttl
        self._summaries: dict[Path, tuple[tuple[int, int], RunInfo]] = {}
        self._found: tuple[float, list[Path]] | None = None  # (when, what) the last walk found
        self._lock = threading.Lock()
        self._skipped = SkipLog()

    @property
    def root(self) -> Path:
        return self.runs_dir.resolve()

    def name_of(self, path: Path) -> str:
        """The name of a checkpoint path: its folder relative to runs_dir, or @ckpt for one outside it."""
        real = path.resolve()
        if not real.is_relative_to(self.root):
            return OUTSIDE_NAME
        return real.parent.relative_to(self.root).as_posix()  # `.` (ROOT_NAME) for the run in runs_dir itself

    def discover(self) -> list[Path]:
        """`walk_checkpoints`, at most once every `ttl` seconds (thousands of runs take a while). Blocking."""
        with self._lock:
            if self._found is not None and time.monotonic() - self._found[0] < self.ttl:
                return list(self._found[1])
        found = walk_checkpoints(self.runs_dir, self.root, self._skipped)
        with self._lock:
            self._found = (time.monotonic(), found)
        return list(found)

    def default_path(self) -> Path | None:
        if self.fixed is not None:
            return self.fixed
        found = self.discover()
        return found[0] if found else None

    def resolve(self, name: str | None) -> tuple[str, Path]:
        """(canonical name, checkpoint path) for a request's `run` (None: the default); any bad name: the one 404."""
        if name is None or name == "":
            path = self.default_path()
            if path is None:
                raise ApiError(404, "run", "no runs under runs_dir yet; train one first (python train.py)")
            return self.name_of(path), path
        if name == OUTSIDE_NAME and self.fixed is not None and self.name_of(self.fixed) == OUTSIDE_NAME:
            return name, self.fixed
        missing = ApiError(404, "run", f"no run named {shown(name)} under runs_dir (GET /api/runs lists them)")
        parts = PurePosixPath(name).parts
        if name != ROOT_NAME and (
            name.startswith("/") or "\\" in name or "\0" in name or any(p in ("..", ".") for p in parts)
        ):
            raise missing
        try:
            real = (self.runs_dir / name / CKPT_NAME).resolve()
            if not real.is_relative_to(self.root) or not real.is_file():
                raise missing
            return self.name_of(real), real  # `./a`, `a/` and `a` are one run, always reported as `a`
        except (OSError, RuntimeError, ValueError, UnicodeError):  # too long, a loop, not encodable
            raise missing from None

    def file(self, path: Path) -> RunFile | Path:
        """The file read for the run at `path`: as every reader picks it, as ckpt= named it, or an export's record."""
        if path.name == RECORD:
            return path
        if path == self.fixed and self.fixed_file:
            return run_file(path)
        return folder_file(path.parent)

    def summary(self, name: str, path: Path) -> RunInfo:
        try:
            target = self.file(path)
        except UserError:  # its ckpt.pt cannot be read: summarize says so, as for any unreadable checkpoint
            target = path
        read = target.path if isinstance(target, RunFile) else target
        stamp = file_stamp(read)
        with self._lock:
            known = self._summaries.get(read)
        if known is not None and known[0] == stamp:
            return RunInfo(**{**asdict(known[1]), "name": name})
        info = summarize(name, target, self.weights)
        with self._lock:
            self._summaries[read] = (stamp, info)
        return info

    def list_runs(self) -> list[RunInfo]:
        """Every run the page may open, newest first, the default marked; unreadable ones logged once. Blocking."""
        paths = self.discover()
        if self.fixed is not None and self.fixed not in paths:
            paths.insert(0, self.fixed)
        default = self.default_path()
        runs = []
        for path in paths:
            try:
                info = self.summary(self.name_of(path), path)
            except FileNotFoundError:  # deleted while we listed
                continue
            except (OSError, RuntimeError, ValueError) as e:
                self._skipped.once(path, f"cannot read {path} ({type(e).__name__}: {e}); not listed")
                continue
            info.default = path == default
            runs.append(info)
        return runs


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
                self._runs[path] = entry
                self._runs.move_to_end(path)
                while len(self._runs) > self.capacity:
                    self._runs.popitem(last=False)
            return entry
