"""Checkpoints: a typed record, written atomically, loaded safely.

Design choices:
- A training state missing an entry makes `training` None: the weights still sample and score; resuming is refused.
- Read with `torch.load(weights_only=True)`: a file crafted to run code when unpickled is refused.
- Every older version loads, once every key, dtype and shape has been checked (inference/weight_checks.py).
- Written through `atomic_write`: a crash leaves the old file or the new one; a failed write is one UserError.
"""

from __future__ import annotations

import errno
import math
import pickle
import re
import shutil
import warnings
import zipfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, BinaryIO

import torch
from torch import Tensor, nn

from common.atomic_files import Writer, atomic_write
from common.config_checks import is_numeric, is_positive, is_whole
from common.errors import UserError
from inference.weight_checks import checked_weights, meta_model
from model.config import ModelConfig

FORMAT = "kochar-gpt/checkpoint"
VERSION = 3
CKPT_NAME = "ckpt.pt"
BEST_NAME = "best.pt"
PROBE_TOKENS = 8  # positions of the forward pass that checks the logits (attention over several, every block, head)


class CheckpointWriteError(UserError):
    """The disk refused a checkpoint (full, quota, read-only): not a mistake in the command, so exit 1."""

    exit_code = 1


@dataclass
class TrainingState:
    """What resuming needs beyond the weights: the loop's position, the optimizer and every random state."""

    step: int
    optimizer: dict
    scaler: dict
    best_val_loss: float
    val_loss: float
    elapsed_seconds: float
    rng: dict
    sampler: dict
    world_size: int = 1
    average_updates: int = 0  # train.average: updates the average holds (0: none yet, or no average)
    early_stop: dict = field(default_factory=dict)  # train.early_stop's count, for resuming (training/early_stop.py)


_TRAINING_KEYS = tuple(f.name for f in fields(TrainingState))


# What each entry of a training state must be, by its type in TrainingState, and the words a refusal says it in;
# the seconds trained and the world size have ranges of their own.
SHAPES = {
    "int": (is_whole, "a whole number"),
    "float": (is_numeric, "a number"),
    "dict": (lambda v: isinstance(v, dict), "a mapping"),
}
TRAINING_SHAPES = {f.name: SHAPES[f.type] for f in fields(TrainingState)}
TRAINING_SHAPES["elapsed_seconds"] = (lambda v: is_numeric(v) and 0 <= v < math.inf, "a number of seconds")
TRAINING_SHAPES["world_size"] = (lambda v: is_whole(v, 1), "a whole number from 1")


@dataclass
class Checkpoint:
    model_config: ModelConfig
    model: dict[str, torch.Tensor]  # state dict, without compile/DDP prefixes
    tokenizer: dict  # the tokenizer's to_dict()
    tokens_per_char: float = 1.0  # turns nats per token into bits per character
    config: dict = field(default_factory=dict)  # the whole run config, for the record
    training: TrainingState | None = None
    averaged: dict[str, torch.Tensor] | None = None  # train.average: the averaged weights (same keys as `model`)
    path: Path | None = None  # where it was loaded from (not saved)
    training_refusal: str = ""  # why the file's training state cannot be resumed, where it has one (not saved)
    ignored: tuple[str, ...] = ()  # records of how the run was made, in a shape no reader can use (not saved)
    held: str | None = None  # an exported folder's one set: averaged | raw | unknown (None: a training checkpoint)
    held_updates: int | None = None  # the updates of the average an exported folder holds (its record says)
    source: dict | None = None  # an export's source checkpoint: its path, step, val loss (inference/run_files.py)

    @property
    def step(self) -> int:
        return self.training.step if self.training else 0

    def weights(self, which: str = "averaged") -> dict[str, torch.Tensor]:
        """`which="averaged"`: the average where the checkpoint holds one, else the raw weights (as `which="raw"`)."""
        return self.averaged if which == "averaged" and self.averaged is not None else self.model

    def to_payload(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "model_config": self.model_config.to_dict(),
            "model": self.model,
            "tokenizer": self.tokenizer,
            "tokens_per_char": float(self.tokens_per_char),
            "config": self.config,
            "training": asdict(self.training) if self.training else None,
            "averaged_model": self.averaged,
        }

    @classmethod
    def from_payload(cls, payload: dict, path: Path) -> Checkpoint:
        """The record from a loaded dict of any known version; a missing part is one clear UserError."""
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise UserError(f"{path} is not a kochar-gpt checkpoint")
        version = payload.get("version", 1)
        if version not in (1, 2, VERSION):
            raise UserError(
                f"checkpoint {path} has format version {version}; this version of kochar-gpt reads "
                f"versions 1 to {VERSION} (update kochar-gpt)"
            )
        for key in ("model", "model_config", "tokenizer"):
            if key not in payload:
                raise UserError(f"checkpoint {path} is incomplete (no '{key}'): it cannot be sampled or resumed")
        try:
            model_config = ModelConfig.from_dict(dict(payload["model_config"]))
        except (TypeError, ValueError) as e:
            raise UserError(f"checkpoint {path} has unusable model settings ({e})") from None
        if not isinstance(payload["model"], dict):
            raise UserError(f"checkpoint {path} holds no weights: it cannot be sampled or resumed")
        weights = checked_weights(model_config, payload["model"], path)  # every key, dtype and shape, then converted
        averaged = payload.get("averaged_model")
        if averaged is not None:
            if not isinstance(averaged, dict):
                raise UserError(
                    f"checkpoint {path} has unusable averaged weights; use weights=raw or another checkpoint"
                )
            averaged = checked_weights(model_config, averaged, path)
        raw = payload.get("training") if version >= 2 else {k: payload[k] for k in _TRAINING_KEYS if k in payload}
        training, refusal = _training_state(raw)
        tokens_per_char, config = payload.get("tokens_per_char", 1.0), payload.get("config") or {}
        for key, value, usable_, need in (
            ("tokenizer", payload["tokenizer"], isinstance(payload["tokenizer"], dict), "a mapping"),
            ("tokens_per_char", tokens_per_char, is_positive(tokens_per_char), "a positive number"),
            ("config", config, isinstance(config, dict), "a mapping of the run's settings"),
        ):
            if not usable_:
                raise UserError(
                    f"checkpoint {path} has an unusable {key} ({_shown(value)}, not {need}): it cannot be sampled "
                    f"or resumed; {another_checkpoint(path)}"
                )
        config, ignored = _records_checked(config)
        return cls(
            model_config=model_config,
            model=weights,
            tokenizer=payload["tokenizer"],
            tokens_per_char=float(tokens_per_char),
            config=config,
            training=training,
            averaged=averaged,
            path=path,
            training_refusal=refusal,
            ignored=ignored,
        )

    def resume_refusal(self) -> str | None:
        """Why this checkpoint cannot be resumed (one line saying what still works), or None."""
        if self.training is not None:
            return None
        what = self.training_refusal or "holds no training state (optimizer, step, random states)"
        return (
            f"checkpoint {self.path} {what}, so it cannot be resumed; its weights can still be sampled "
            "(generate.py) and scored (evaluate.py), or start a new run"
        )


def _shown(value: object) -> str:
    return repr(value)[:40] if isinstance(value, str | int | float) else f"a {type(value).__name__}"


def _training_state(raw: Any) -> tuple[TrainingState | None, str]:
    """The TrainingState, or None and why not: the entries it lacks (older files may lack the optional ones), or
    one of another shape than the code writes."""
    if not isinstance(raw, dict) or not raw:
        return None, ""
    optional = {"scaler": {}, "val_loss": float("nan"), "world_size": 1, "average_updates": 0, "early_stop": {}}
    state = optional | {k: raw[k] for k in _TRAINING_KEYS if k in raw}
    missing = [k for k in _TRAINING_KEYS if k not in state]
    if missing:
        return None, f"lacks the training state's {', '.join(missing)}"
    for key, (fits, need) in TRAINING_SHAPES.items():
        if not fits(state[key]):
            return None, f"has an unusable training state ({key} is {_shown(state[key])}, not {need})"
    return TrainingState(**state), ""


def _records_checked(config: dict) -> tuple[dict, tuple[str, ...]]:
    """`config` without its records of how the run was made (`measured`, `init_from`) where they are in a shape the
    code never writes, and their names: a resume says it ignored them (training/settings/resume.py)."""
    precision = config.get("measured", {}).get("precision") if isinstance(config.get("measured"), dict) else None
    step_ms = precision.get("step_ms") if isinstance(precision, dict) else None
    checks = {
        "measured": isinstance(step_ms, dict)
        and all(is_positive(ms) for ms in step_ms.values())
        and precision.get("chosen") in step_ms
        and is_positive(precision.get("tokens_per_sec")),
        "init_from": isinstance(config.get("init_from"), dict)
        and all(isinstance(v, str | int | float | None) for v in config["init_from"].values()),
    }
    bad = tuple(key for key, fits in checks.items() if key in config and not fits)
    return {k: v for k, v in config.items() if k not in bad}, tuple(f"config.{key}" for key in bad)


def another_checkpoint(path: str | Path | None) -> str:
    """Advice for a checkpoint `path` that cannot be used: its run's other file (ckpt.pt, best.pt), never itself."""
    others = [Path(path).parent / n for n in (CKPT_NAME, BEST_NAME) if path and n != Path(path).name]
    other = next((p for p in others if p.is_file()), None)
    if other is None:
        return "use another run's checkpoint or train again"
    return f"use its run's other checkpoint (ckpt={other}), another run's, or train again"


def refuse_non_finite(ckpt: Checkpoint) -> None:
    """Weights (raw or averaged) holding NaN or infinity, which sample noise and score NaN: one UserError."""
    for key, w in {**ckpt.model, **{f"averaged {k}": v for k, v in (ckpt.averaged or {}).items()}}.items():
        if isinstance(w, torch.Tensor) and w.is_floating_point() and not bool(torch.isfinite(w).all()):
            raise UserError(
                f"checkpoint {ckpt.path} holds weights that are not finite numbers ({key} has NaN or "
                "infinity): it cannot be sampled, scored, exported or fine-tuned from; "
                f"{another_checkpoint(ckpt.path)}"
            )


@torch.no_grad()
def refuse_non_finite_logits(model: nn.Module, source: str | Path | None, which: str = "") -> None:
    """One UserError naming the weights where `model`'s logits on a few tokens are not finite."""
    c = model.config
    n = min(PROBE_TOKENS, c.context_length)
    device = next(model.parameters()).device
    ids = (torch.arange(n, device=device) * 7919 + 1) % c.vocab_size  # a prime stride: ids far apart
    was_training = model.training
    model.eval()
    try:
        logits, _ = model(ids[None])
    finally:
        model.train(was_training)
    if not bool(torch.isfinite(logits).all()):
        raise UserError(
            f"the {which + ' ' if which in ('averaged', 'raw') else ''}weights of {source} compute "
            "logits that are not finite numbers (NaN or infinity) on a few tokens: they cannot be "
            f"sampled, scored, exported, resumed or fine-tuned from; {another_checkpoint(source)}"
        )


def probe_model(config: ModelConfig, weights: dict[str, Tensor]) -> nn.Module:
    """A CPU model holding `weights` (as float32) for one check: built on `meta`, the weights assigned in place."""
    model = meta_model(config)
    model.load_state_dict({k: v.float() for k, v in weights.items()}, assign=True)
    return model


def usable(ckpt: Checkpoint, which: str | None = None) -> Checkpoint:
    """`ckpt`, once the set `which` of its weights (None: every set) is finite and computes finite logits."""
    refuse_non_finite(ckpt)
    for kind in [which] if which is not None else ["raw"] + (["averaged"] if ckpt.averaged is not None else []):
        refuse_non_finite_logits(probe_model(ckpt.model_config, ckpt.weights(kind)), ckpt.path, kind)
    return ckpt


def save_checkpoint(ckpt: Checkpoint, path: str | Path) -> None:
    _write_checkpoint(Path(path), lambda f: torch.save(ckpt.to_payload(), f))


def copy_checkpoint(src: str | Path, dst: str | Path) -> None:
    """`dst` becomes a byte copy of `src`, written atomically (a hard link would change under a `cp` over one)."""

    def copy(f: BinaryIO) -> None:
        with open(src, "rb") as source:
            shutil.copyfileobj(source, f)

    _write_checkpoint(Path(dst), copy)


def _write_checkpoint(path: Path, writer: Writer) -> None:
    try:
        atomic_write(path, writer)
    except (OSError, RuntimeError) as e:  # torch.save reports a failed write as a RuntimeError
        kept = f"the previous {path.name} is kept unchanged" if path.exists() else "nothing was written"
        raise CheckpointWriteError(
            f"could not save checkpoint {path} ({_write_failure(e)}); {kept}; free space or fix the folder, then resume"
        ) from None


def _write_failure(e: BaseException) -> str:
    code = getattr(e, "errno", None)
    if code in (errno.ENOSPC, errno.EDQUOT):
        return "the disk is full"
    if code is not None:
        return e.strerror or errno.errorcode.get(code, str(code))
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return "write failed: " + re.sub(r"^\[enforce fail at [^\]]*\][\s.]*", "", first)  # torch's C++ location


def strip_compile_prefix(state_dict: dict) -> dict:
    """torch.compile wraps the model as `_orig_mod`, DDP as `module`; checkpoints never carry those prefixes."""
    return {k.removeprefix("_orig_mod.").removeprefix("module."): v for k, v in state_dict.items()}


def load_checkpoint(path: str | Path, mmap: bool = False) -> Checkpoint:
    """Load to the CPU with weights_only=True, every failure one UserError; `mmap=True` maps the tensors (cheap)."""
    return Checkpoint.from_payload(_load_payload(Path(path), mmap), Path(path))


def _load_payload(path: Path, mmap: bool = False) -> Any:
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols before refusing a file
            warnings.simplefilter("ignore")
            try:
                return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
            except RuntimeError:
                if not mmap:
                    raise
            return torch.load(path, map_location="cpu", weights_only=True)  # a legacy (non-zip) file
    except FileNotFoundError:
        raise UserError(f"checkpoint not found: {path}") from None
    except IsADirectoryError:
        raise UserError(f"checkpoint path is a directory without {CKPT_NAME}: {path}") from None
    except PermissionError:
        raise UserError(f"cannot read checkpoint {path}: permission denied") from None
    except pickle.UnpicklingError:
        raise UserError(
            f"refusing to load {path}: it holds Python objects other than tensors and plain data (it may "
            "be malicious, or not a kochar-gpt checkpoint)"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as e:
        first = str(e).strip().splitlines()[0].split(". ")[0] if str(e).strip() and not isinstance(e, OSError) else ""
        raise UserError(
            f"checkpoint {path} is truncated or corrupt{f' ({first})' if first else ''}; {another_checkpoint(path)}"
        ) from None
    except Exception as e:  # noqa: BLE001 - arbitrary bytes can fail the unpickler in any way
        raise UserError(f"{path} is not a kochar-gpt checkpoint (it cannot be read: {type(e).__name__})") from None
