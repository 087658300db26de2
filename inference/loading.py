"""From a run folder or checkpoint file to a model ready to sample, and its tokenizer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from common.errors import UserError
from inference.checkpoint import Checkpoint, load_checkpoint, refuse_non_finite, resolve_checkpoint
from model import AttentionLanguageModel
from tokenizer import Tokenizer, tokenizer_from_dict


@dataclass
class LoadedRun:
    model: AttentionLanguageModel  # on its device, in eval mode
    tokenizer: Tokenizer
    checkpoint: Checkpoint

    @property
    def path(self) -> Path:
        assert self.checkpoint.path is not None
        return self.checkpoint.path


def model_from_checkpoint(ckpt: Checkpoint, weights: str = "averaged") -> AttentionLanguageModel:
    """The exact model the checkpoint was saved from, on the CPU, with its averaged weights where the run kept them
    (`weights="raw"`: the raw ones); a mismatch is one UserError."""
    try:
        model = AttentionLanguageModel(ckpt.model_config)
        model.load_state_dict(ckpt.weights(weights))
    except (TypeError, ValueError, RuntimeError) as e:
        raise UserError(f"checkpoint {ckpt.path} does not match its model settings "
                        f"({str(e).strip().splitlines()[0]})") from None
    return model


def load_any(ckpt: str | Path | None, runs_root: str | Path = "runs", mmap: bool = False) -> Checkpoint:
    """A checkpoint from a run folder, a checkpoint file, or a folder `export.py` wrote (Hugging Face format);
    `mmap` maps a checkpoint file's tensors instead of reading them (load_checkpoint)."""
    if ckpt not in (None, ""):
        from inference.exported_folder import is_exported, read_folder

        if is_exported(ckpt):
            return read_folder(ckpt)
    return load_checkpoint(resolve_checkpoint(ckpt, runs_root), mmap=mmap)


def load_run(ckpt: str | Path | None, device: torch.device, runs_root: str | Path = "runs",
             weights: str = "averaged") -> LoadedRun:
    """Model (on `device`, eval mode), tokenizer and checkpoint record from a run folder or checkpoint file;
    `None` means the newest run under `runs_root`. `weights`: averaged (where the run kept an average) or raw."""
    checkpoint = load_any(ckpt, runs_root)
    refuse_non_finite(checkpoint)
    tokenizer = tokenizer_from_dict(checkpoint.tokenizer)
    model = model_from_checkpoint(checkpoint, weights)
    if model.config.vocab_size != tokenizer.vocab_size:
        raise UserError(f"checkpoint {checkpoint.path} is inconsistent: model and tokenizer vocabularies differ")
    return LoadedRun(model.to(device).eval(), tokenizer, checkpoint)
