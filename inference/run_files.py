"""Which checkpoint file of a run a reader reads: the best validated weights unless a file is named.

Design choices (docs/en/training.md, "Best weights and early stopping"):
- A run folder gives `best.pt` only where it is this run's and its validation loss is finite and lower than
  `ckpt.pt`'s, else `ckpt.pt`, saying why: never weights worse than the run's best, nor another run's `best.pt`.
- "This run's": the same weight-making model settings, tokenizer, corpus keys and tokens per character.
- Headers are read mapped, once per version of each file: the playground may ask on every request.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

from common.config_checks import shown_value
from common.errors import UserError
from data.config import DataConfig
from inference.checkpoint import BEST_NAME, CKPT_NAME, Checkpoint, load_checkpoint

RESUMABLE_MODEL_KEYS = ("dropout", "attention")  # training/settings/resume.py's MODEL_CHANGEABLE
CORPUS_KEYS = ("path", "val_fraction", "val_files", "tokenizer")  # the data keys that fix the validation text


@dataclass(frozen=True)
class Header:
    """What a checkpoint says about itself without its weights being read."""

    step: int
    val_loss: float  # the validation loss of its evaluation (nan: none yet, or no training state)
    model: tuple = ()  # (key, value) of the model settings that make the weights
    tokenizer: str = ""  # the tokenizer's dict, as sorted JSON
    corpus: tuple = ()  # (key, value) of what fixes the validation text (CORPUS_KEYS, the tokens per character)


@dataclass(frozen=True)
class RunFile:
    path: Path
    chosen: str  # best (best.pt over ckpt.pt) | last (ckpt.pt: best.pt absent or passed over) | named
    header: Header
    other: Header | None = None  # best: the last weights' (ckpt.pt); named ckpt.pt: best.pt's where it is better
    note: str = ""  # why best.pt was not read although it is there (passed_over)

    def words(self, extra: str = "") -> str:
        """E.g. `runs/x/best.pt (step 500, val loss 3.8512: the best validation; ...)`; `extra` ends the brackets."""
        loss = "not evaluated" if math.isnan(self.header.val_loss) else f"val loss {self.header.val_loss:.4f}"
        detail = f"step {self.header.step}, {loss}"
        if self.chosen == "best" and self.other is not None:
            detail += (
                f": the best validation; the last weights, step {self.other.step}{_loss(self.other)}, are "
                f"ckpt={self.path.parent / CKPT_NAME}"
            )
        elif self.chosen == "named" and self.other is not None:
            detail += (
                f": the last weights, as named; the best, step {self.other.step}{_loss(self.other)}, are {BEST_NAME}"
            )
        elif self.chosen == "named" and self.path.name == CKPT_NAME:
            detail += ": the last weights, as named"
        detail += "".join(f"; {part}" for part in (self.note, extra) if part)
        return f"{self.path} ({detail})"

    def fields(self) -> dict:
        """What a JSON answer carries about the file: its step, validation loss, and why it was read (`note`)."""
        loss = None if math.isnan(self.header.val_loss) else self.header.val_loss
        return {
            "checkpoint": str(self.path),
            "chosen": self.chosen,
            "step": self.header.step,
            "val_loss": loss,
            "note": self.note or None,
        }


def _loss(h: Header) -> str:
    return "" if math.isnan(h.val_loss) else f" at {h.val_loss:.4f}"


def header(path: Path) -> Header:
    """The step, validation loss and run of `path`; unreadable is one UserError (as any reader would say)."""
    path = Path(path)
    st = path.stat()
    return _header(str(path.resolve()), st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=256)
def _header(path: str, mtime_ns: int, size: int) -> Header:  # keyed by the file's version: rewritten, read again
    ckpt = load_checkpoint(path, mmap=True)
    val_loss = float(ckpt.training.val_loss) if ckpt.training is not None else math.nan
    model = tuple((f"model.{k}", v) for k, v in ckpt.model_config.to_dict().items() if k not in RESUMABLE_MODEL_KEYS)
    return Header(ckpt.step, val_loss, model, json.dumps(ckpt.tokenizer, sort_keys=True, default=str), _corpus(ckpt))


def _corpus(ckpt: Checkpoint) -> tuple:
    """What fixes the run's validation text (a key its config lacks: DataConfig's default)."""
    data = ckpt.config.get("data") if isinstance(ckpt.config, dict) else None
    data = data if isinstance(data, dict) else {}
    defaults = {f.name: f.default for f in fields(DataConfig)}
    values = {f"data.{k}": data.get(k, defaults[k]) for k in CORPUS_KEYS}
    path = values["data.path"]
    values["data.path"] = os.path.normpath(os.path.expanduser(path)) if isinstance(path, str) else path
    values["data.val_files"] = json.dumps(values["data.val_files"], default=str)
    return (*values.items(), ("tokens_per_char", float(ckpt.tokens_per_char)))


def newest_checkpoint(root: str | Path = "runs") -> Path:
    root = Path(root)
    found = list(root.rglob(CKPT_NAME)) if root.is_dir() else []
    if not found:
        raise UserError(f"no checkpoint found under {root}/; train first (python train.py) or pass ckpt=<run dir>")
    return max(found, key=lambda p: p.stat().st_mtime)


def refuse_two_models(path: str | Path, key: str = "ckpt") -> None:
    """One UserError naming `key` where a folder holds both a run's checkpoint and an exported model."""
    from hf_format import RECORD

    folder = Path(path).expanduser()
    record = folder / RECORD
    ckpts = [folder / n for n in (CKPT_NAME, BEST_NAME) if (folder / n).is_file()]
    if ckpts and record.is_file() and (folder / "model.safetensors").is_file():
        which = f"{key}={ckpts[0]}" + ("" if key.startswith("train.") else f" or {key}={record}")
        raise UserError(
            f"{key}={folder} holds two models, a run's checkpoint {ckpts[0]} and an exported model "
            f"{record}: name the one you mean ({which}), or move one of them to a folder of its own"
        )


def resolve_checkpoint(path: str | Path | None, runs_root: str | Path = "runs", key: str = "ckpt") -> Path:
    """A checkpoint file, a run directory holding ckpt.pt, or None for the newest run under runs/."""
    if path in (None, ""):
        newest = newest_checkpoint(runs_root)
        refuse_two_models(newest.parent, key)
        return newest
    p = Path(path).expanduser()
    if p.is_dir():
        refuse_two_models(p, key)
        if (p / CKPT_NAME).is_file():
            return p / CKPT_NAME
        raise UserError(f"no {CKPT_NAME} in run directory {p}")
    if not p.exists():
        raise UserError(f"checkpoint not found: {p}")
    return p


def run_file(ckpt: str | Path | None, runs_root: str | Path = "runs", key: str = "ckpt") -> RunFile:
    """The file read for `ckpt`: a run folder's (None: the newest run's) per `folder_file`, a file as named."""
    p = newest_checkpoint(runs_root).parent if ckpt in (None, "") else Path(ckpt).expanduser()
    if p.is_dir():
        return folder_file(p, key)
    path = resolve_checkpoint(p, runs_root, key)  # a missing file: the one line every reader gives
    best = path.parent / BEST_NAME
    if path.name == CKPT_NAME and best.is_file():
        mine, other = header(path), _readable_header(best)
        return RunFile(path, "named", mine, other if passed_over(other, mine) is None else None)
    return RunFile(path, "named", header(path))


def folder_file(folder: Path, key: str = "ckpt") -> RunFile:
    """best.pt where `passed_over` finds nothing against it, else ckpt.pt with the reason in `note`; best.pt
    without ckpt.pt is refused (nothing to compare it with)."""
    refuse_two_models(folder, key)
    last, best = folder / CKPT_NAME, folder / BEST_NAME
    if best.is_file() and not last.is_file():
        raise UserError(
            f"no {CKPT_NAME} in run directory {folder}: its {BEST_NAME} cannot be compared with the run's "
            f"last weights, so it is not read as the run's best; name it to read it anyway: {key}={best}"
        )
    path = resolve_checkpoint(folder, key=key)  # no ckpt.pt either: the one line every reader gives
    last_header = header(path)
    if not best.is_file():
        return RunFile(path, "last", last_header)
    best_header = _readable_header(best)
    why = passed_over(best_header, last_header)
    if why is None:
        return RunFile(best, "best", best_header, last_header)
    return RunFile(path, "last", last_header, note=why)


def passed_over(best: Header | None, last: Header) -> str | None:
    """Why a run's best.pt (`best`; None: unreadable) is not read beside its ckpt.pt (`last`): None where it is this
    run's and its validation loss is finite and lower; "" where it holds ckpt.pt's own evaluation (a copy)."""
    if best is None:
        return f"{BEST_NAME} is there but cannot be read, so {CKPT_NAME} was"
    why = f"{BEST_NAME} was passed over: "
    for part, mine, theirs in (
        ("tokenizer", best.tokenizer, last.tokenizer),
        ("model", best.model, last.model),
        ("corpus", best.corpus, last.corpus),
    ):
        if mine != theirs:
            return why + f"it is another run's: its {part} differs{_differences(mine, theirs)}"
    if best.step == last.step and (best.val_loss == last.val_loss or math.isnan(best.val_loss + last.val_loss)):
        return ""
    if not math.isfinite(best.val_loss):
        return why + "it records no validation loss"
    if not math.isfinite(last.val_loss):
        return why + f"{CKPT_NAME} records no validation loss to compare it with"
    if not best.val_loss < last.val_loss:
        return why + (
            f"its val loss {best.val_loss:.4f} (step {best.step}) is not lower than {CKPT_NAME}'s {last.val_loss:.4f}"
        )
    return None


def _differences(mine: object, theirs: object) -> str:
    """` (model.num_blocks=3, ckpt.pt's 2; ...)` for two (key, value) tuples; "" for anything else."""
    if not isinstance(mine, tuple) or not isinstance(theirs, tuple):
        return ""
    other = dict(theirs)
    parts = [f"{k}={_shown(v)}, {CKPT_NAME}'s {_shown(other.get(k))}" for k, v in mine if other.get(k) != v]
    return f" ({'; '.join(parts)})" if parts else ""


def _shown(value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return "null" if value is None else shown_value(value)


def _readable_header(path: Path) -> Header | None:
    try:
        return header(path)
    except (UserError, OSError):
        return None
