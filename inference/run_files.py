"""Which checkpoint file of a run a reader reads: the best validated weights unless a file is named.

Design choices:
- A run folder holds `ckpt.pt`, the last weights (written at every evaluation and when a signal stops the run;
  `train.resume` continues from it), and `best.pt`, a byte copy of `ckpt.pt` at the evaluation with the lowest
  validation loss. Given a run folder, or nothing (the newest run under runs/), generate.py, evaluate.py,
  serve.py, export.py and train.init_from read `best.pt` where it holds other weights than `ckpt.pt` (an earlier
  step: validation has not improved since), else `ckpt.pt`. A run that memorises its text then never hands a
  reader weights worse than the best it had.
- A file named on the command line is read as named: `ckpt=<run>/ckpt.pt` is how to get the last weights, and
  `ckpt=<run>/best.pt` the best ones whatever the last. Every reader says which file it read, its step and
  validation loss, and why (`RunFile.words()`), so the choice is never silent.
- Whether the two files differ is decided by the step each holds, read from their headers (mapped, not read:
  inference/checkpoint.py) once per version of each file, so the playground may ask on every request.
- A `best.pt` that cannot be read does not stop a reader: it reads `ckpt.pt` and says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from common.errors import UserError
from inference.checkpoint import (
    BEST_NAME,
    CKPT_NAME,
    load_checkpoint,
    newest_checkpoint,
    refuse_two_models,
    resolve_checkpoint,
)

CHOSEN = ("best", "last", "named")  # best.pt over a later ckpt.pt | ckpt.pt (no other best) | the file named


@dataclass(frozen=True)
class Header:
    """What a checkpoint says about itself without its weights being read."""

    step: int
    val_loss: float  # the validation loss of its evaluation (nan: none yet, or no training state)


@dataclass(frozen=True)
class RunFile:
    path: Path
    chosen: str  # one of CHOSEN
    header: Header
    other: Header | None = None  # best: the last weights' (ckpt.pt); named ckpt.pt: best.pt's where it differs
    note: str = ""  # why best.pt was not read although it is there (it cannot be read)

    def words(self, extra: str = "") -> str:
        """E.g. `runs/x/best.pt (step 500, val loss 3.8512: the best validation; ...)`; `extra` ends the brackets."""
        loss = "not evaluated" if math.isnan(self.header.val_loss) else f"val loss {self.header.val_loss:.4f}"
        detail = f"step {self.header.step}, {loss}"
        folder = self.path.parent
        if self.chosen == "best" and self.other is not None:
            detail += (f": the best validation; the last weights, step {self.other.step}{_loss(self.other)}, are "
                       f"ckpt={folder / CKPT_NAME}")
        elif self.chosen == "named" and self.other is not None:
            detail += (f": the last weights, as named; the best, step {self.other.step}{_loss(self.other)}, are "
                       f"{BEST_NAME}")
        elif self.chosen == "named" and self.path.name == CKPT_NAME:
            detail += ": the last weights, as named"
        detail += "".join(f"; {part}" for part in (self.note, extra) if part)
        return f"{self.path} ({detail})"

    def fields(self) -> dict:
        """What a JSON answer carries about the file: its step and validation loss, and why it was read."""
        loss = None if math.isnan(self.header.val_loss) else self.header.val_loss
        return {"checkpoint": str(self.path), "chosen": self.chosen, "step": self.header.step, "val_loss": loss}


def _loss(h: Header) -> str:
    return "" if math.isnan(h.val_loss) else f" at {h.val_loss:.4f}"


def header(path: Path) -> Header:
    """The step and validation loss `path` holds; unreadable is one UserError (as any reader would say)."""
    path = Path(path)
    st = path.stat()
    return _header(str(path.resolve()), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=256)
def _header(path: str, mtime_ns: int, size: int) -> Header:  # keyed by the file's version: rewritten, read again
    ckpt = load_checkpoint(path, mmap=True)
    training = ckpt.training
    return Header(ckpt.step, float(training.val_loss) if training is not None else math.nan)


def run_file(ckpt: str | Path | None, runs_root: str | Path = "runs", key: str = "ckpt") -> RunFile:
    """The file a reader reads for `ckpt`: a run folder (or None: the newest run under `runs_root`) gives best.pt
    where it differs from ckpt.pt, else ckpt.pt; a file is read as named. A folder that also holds an exported model
    is refused naming `key` (checkpoint.py's refuse_two_models)."""
    if ckpt in (None, ""):
        return folder_file(newest_checkpoint(runs_root).parent, key)
    p = Path(ckpt).expanduser()
    if p.is_dir():
        return folder_file(p, key)
    path = resolve_checkpoint(p, runs_root, key)  # a missing file: the one line every reader gives
    other = None
    best = path.parent / BEST_NAME
    if path.name == CKPT_NAME and best.is_file():
        mine, other = header(path), _readable_header(best)
        other = other if other is not None and other.step != mine.step else None
        return RunFile(path, "named", mine, other)
    return RunFile(path, "named", header(path))


def folder_file(folder: Path, key: str = "ckpt") -> RunFile:
    """best.pt where it holds another step than ckpt.pt, else ckpt.pt (a folder with best.pt alone: best.pt)."""
    refuse_two_models(folder, key)
    last, best = folder / CKPT_NAME, folder / BEST_NAME
    if not best.is_file():
        path = resolve_checkpoint(folder, key=key)  # no ckpt.pt either: the one line every reader gives
        return RunFile(path, "last", header(path))
    best_header = _readable_header(best)
    if not last.is_file():
        if best_header is None:
            header(best)  # the reason it cannot be read, as one line
        return RunFile(best, "best", best_header)
    last_header = header(last)
    if best_header is None:
        return RunFile(last, "last", last_header, note=f"{BEST_NAME} is there but cannot be read, so {CKPT_NAME} was")
    if best_header.step == last_header.step:
        return RunFile(last, "last", last_header)
    return RunFile(best, "best", best_header, last_header)


def _readable_header(path: Path) -> Header | None:
    try:
        return header(path)
    except (UserError, OSError):
        return None
