"""Checkpoints: a typed record, written atomically, loaded safely.

Design choices:
- `Checkpoint` holds what every reader needs (the `ModelConfig`, the weights, the tokenizer, bits-per-
  character scale) and, for resuming, a `TrainingState`. Generation and evaluation need only the first part,
  so a checkpoint without a training state still samples.
- On disk it is a plain dict of tensors and built-in types with a format name and version, so
  `torch.load(weights_only=True)` can read it: a file crafted to run code when unpickled is refused.
- Version 1 (the flat dict written before this record existed) still loads: `from_payload` maps it.
- Writing goes through `common.fsutil.atomic_write`: a crash or Ctrl-C leaves the old file or the new one.
"""

from __future__ import annotations

import pickle
import warnings
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from common.errors import UserError
from common.fsutil import atomic_write
from model.config import ModelConfig

FORMAT = "kochar-gpt/checkpoint"
VERSION = 2
CKPT_NAME = "ckpt.pt"
BEST_NAME = "best.pt"
_TRAINING_KEYS = ("step", "optimizer", "scaler", "best_val_loss", "val_loss", "elapsed_seconds", "rng", "sampler",
                  "world_size")


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


@dataclass
class Checkpoint:
    model_config: ModelConfig
    model: dict[str, torch.Tensor]  # state dict, without compile/DDP prefixes
    tokenizer: dict  # the tokenizer's to_dict()
    tokens_per_char: float = 1.0  # turns nats per token into bits per character
    config: dict = field(default_factory=dict)  # the whole run config, for the record
    training: TrainingState | None = None
    path: Path | None = None  # where it was loaded from (not saved)

    @property
    def step(self) -> int:
        return self.training.step if self.training else 0

    def to_payload(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "model_config": self.model_config.to_dict(),
                "model": self.model, "tokenizer": self.tokenizer, "tokens_per_char": float(self.tokens_per_char),
                "config": self.config, "training": asdict(self.training) if self.training else None}

    @classmethod
    def from_payload(cls, payload: dict, path: Path) -> Checkpoint:
        """The record from a loaded dict of any known version; a missing part is one clear UserError."""
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise UserError(f"{path} is not a kochar-gpt checkpoint")
        version = payload.get("version", 1)
        if version not in (1, VERSION):
            raise UserError(f"checkpoint {path} has format version {version}; this version of kochar-gpt reads "
                            f"versions 1 and {VERSION} (update kochar-gpt)")
        for key in ("model", "model_config", "tokenizer"):
            if key not in payload:
                raise UserError(f"checkpoint {path} is incomplete (no '{key}'): it cannot be sampled or resumed")
        try:
            model_config = ModelConfig.from_dict(dict(payload["model_config"]))
        except (TypeError, ValueError) as e:
            raise UserError(f"checkpoint {path} has unusable model settings ({e})") from None
        training = payload.get("training") if version >= 2 else _v1_training(payload)
        return cls(model_config, payload["model"], payload["tokenizer"], float(payload.get("tokens_per_char", 1.0)),
                   dict(payload.get("config") or {}), TrainingState(**training) if training else None, path)


def _v1_training(payload: dict) -> dict | None:
    """Version 1 kept the training state in the top-level dict."""
    if not all(k in payload for k in _TRAINING_KEYS if k not in ("world_size", "scaler", "val_loss")):
        return None
    state = {k: payload[k] for k in _TRAINING_KEYS if k in payload}
    state.setdefault("scaler", {})
    state.setdefault("val_loss", float("nan"))
    return state


def save_checkpoint(ckpt: Checkpoint, path: str | Path) -> None:
    payload = ckpt.to_payload()
    atomic_write(path, lambda f: torch.save(payload, f))


def strip_compile_prefix(state_dict: dict) -> dict:
    """torch.compile wraps the model as `_orig_mod`, DDP as `module`; checkpoints never carry those prefixes."""
    return {k.removeprefix("_orig_mod.").removeprefix("module."): v for k, v in state_dict.items()}


def newest_checkpoint(root: str | Path = "runs") -> Path:
    root = Path(root)
    found = list(root.rglob(CKPT_NAME)) if root.is_dir() else []
    if not found:
        raise UserError(f"no checkpoint found under {root}/; train first (python train.py) or pass ckpt=<run dir>")
    return max(found, key=lambda p: p.stat().st_mtime)


def resolve_checkpoint(path: str | Path | None, runs_root: str | Path = "runs") -> Path:
    """A checkpoint file, a run directory holding ckpt.pt, or None for the newest run under runs/."""
    if path in (None, ""):
        return newest_checkpoint(runs_root)
    p = Path(path).expanduser()
    if p.is_dir():
        if (p / CKPT_NAME).is_file():
            return p / CKPT_NAME
        raise UserError(f"no {CKPT_NAME} in run directory {p}")
    if not p.exists():
        raise UserError(f"checkpoint not found: {p}")
    return p


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Load to the CPU with weights_only=True; every failure is one clear UserError."""
    path = Path(path)
    return Checkpoint.from_payload(_load_payload(path), path)


def _load_payload(path: Path) -> Any:
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols before refusing a file
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UserError(f"checkpoint not found: {path}") from None
    except IsADirectoryError:
        raise UserError(f"checkpoint path is a directory without {CKPT_NAME}: {path}") from None
    except PermissionError:
        raise UserError(f"cannot read checkpoint {path}: permission denied") from None
    except pickle.UnpicklingError:
        raise UserError(
            f"refusing to load {path}: it holds Python objects other than tensors and plain data "
            "(it may be malicious, or not a kochar-gpt checkpoint)"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as e:
        first = str(e).strip().splitlines()[0].split(". ")[0] if str(e).strip() and not isinstance(e, OSError) else ""
        raise UserError(f"checkpoint {path} is truncated or corrupt{f' ({first})' if first else ''}; "
                        "use another checkpoint (best.pt, or an earlier run) or train again") from None
    except Exception as e:  # noqa: BLE001 - arbitrary bytes can fail the unpickler in any way
        raise UserError(f"{path} is not a kochar-gpt checkpoint (it cannot be read: {type(e).__name__})") from None
