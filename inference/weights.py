"""Which of a checkpoint's weights a reader uses, and the words that say so.

Design choices (docs/en/training.md, "Which weights a reader uses"):
- One rule for every reader: `weights=null` takes the average where the run kept one, else the raw weights; a set
  asked for that is not there is refused in one line, never swapped for the other.
- An exported folder holds one set, named by its record; one exported before the record is `raw` where its run kept
  no average, else `unknown`: read as it is, refused to anyone asking for a set.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from common.errors import UserError
from inference.checkpoint import Checkpoint


@dataclass(frozen=True)
class WeightsUsed:
    kind: str  # averaged | raw | unknown (an exported folder whose record does not say)
    average: str | None = None  # the run's train.average (ema | swa), for the averaged weights
    updates: int | None = None  # how many updates the average holds (None: not an average, or not recorded)
    why: str = ""  # why these weights, in a few words (for raw: asked for, or why there is no average)

    def words(self) -> str:
        """E.g. `averaged (train.average=ema, 120 updates)` or `raw (weights=raw)`."""
        detail = ""
        if self.kind == "averaged":
            count = "" if self.updates is None else f", {self.updates} update{'' if self.updates == 1 else 's'}"
            detail = f"train.average={self.average or 'unknown'}{count}"
        detail = "; ".join(part for part in (detail, self.why) if part)
        return f"{'not recorded' if self.kind == 'unknown' else self.kind}" + (f" ({detail})" if detail else "")

    def line(self, source: object | None = None) -> str:
        """A reader's first line: which weights (of which checkpoint or folder, where `source` names it)."""
        from common.names import shown_name

        return shown_name(f"weights: {self.words()}" + (f" from {source}" if source is not None else ""))

    def fields(self) -> dict:
        """What a JSON answer carries: `weights` and, for an average, its `average_updates`."""
        return {"weights": self.kind, "average_updates": self.updates}


def run_average(ckpt: Checkpoint) -> str | None:
    """The run's train.average as its config recorded it ("none" for a run from before the key existed)."""
    train = ckpt.config.get("train") if isinstance(ckpt.config, dict) else None
    value = train.get("average", "none") if isinstance(train, dict) else "none"
    return value if isinstance(value, str) else None


def _no_average(ckpt: Checkpoint) -> str:
    average = run_average(ckpt)
    if average in (None, "none"):
        return "the run kept no average: train.average=none"
    return f"train.average={average} had made no update by step {ckpt.step}"


def choose_weights(ckpt: Checkpoint, asked: str | None, key: str = "weights") -> WeightsUsed:
    """The weights `asked` for (None: the average where the run kept one, else raw); a set not held is refused."""
    if ckpt.held is not None:
        return _exported(ckpt, asked, key)
    if asked == "raw":
        return WeightsUsed("raw", why=f"{key}=raw")
    if ckpt.averaged is not None:
        updates = ckpt.training.average_updates if ckpt.training is not None else None
        return WeightsUsed("averaged", run_average(ckpt), updates)
    if asked == "averaged":
        raise UserError(
            f"{key}=averaged: {ckpt.path} holds no average ({_no_average(ckpt)}); drop {key}= "
            f"(or pass {key}=raw) to read its raw weights"
        )
    return WeightsUsed("raw", why=_no_average(ckpt))


def held_weights(ckpt: Checkpoint) -> WeightsUsed:
    """The one set an exported folder holds, as its record says (a checkpoint written into one: its `held`)."""
    held = ckpt.held or "raw"
    if held == "unknown":
        return WeightsUsed(held, why="exported before kochar-gpt recorded which set a folder holds")
    why = "the one set this exported folder holds"
    if held == "averaged":
        return WeightsUsed(held, run_average(ckpt), ckpt.held_updates, why)
    return WeightsUsed(held, why=why)


def _exported(ckpt: Checkpoint, asked: str | None, key: str) -> WeightsUsed:
    used = held_weights(ckpt)
    if asked is None or asked == used.kind:
        return used
    folder = ckpt.path.parent if ckpt.path is not None else "the exported folder"
    if used.kind == "unknown":
        raise UserError(
            f"{key}={asked}: {folder} does not record which weights it holds (exported by an older "
            f"kochar-gpt); drop {key}= to read it as it is, or export the run again"
        )
    raise UserError(
        f"{key}={asked}: {folder} holds only the {used.kind} weights (an exported folder keeps one "
        f"set); drop {key}=, or export the run again with weights={asked}"
    )


def exported_weights(ckpt: Checkpoint, used: WeightsUsed, source: dict | None = None) -> Checkpoint:
    """The checkpoint as an exported folder keeps it: the one set `used`, which set it is, and its `source`."""
    return replace(
        ckpt,
        model=ckpt.weights(used.kind),
        averaged=None,
        held=used.kind,
        held_updates=used.updates,
        source=source if source is not None else ckpt.source,
    )
