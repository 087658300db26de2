"""From a run folder or checkpoint file to a model ready to sample, and its tokenizer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from common.errors import UserError
from inference.checkpoint import Checkpoint, load_checkpoint, refuse_non_finite, refuse_two_models, resolve_checkpoint
from inference.weight_checks import refuse_non_finite_logits
from inference.weights import WeightsUsed, choose_weights
from model import AttentionLanguageModel
from tokenizer import Tokenizer, tokenizer_from_dict


@dataclass
class LoadedRun:
    model: AttentionLanguageModel  # on its device, in eval mode
    tokenizer: Tokenizer
    checkpoint: Checkpoint
    weights: WeightsUsed  # which of its weights the model holds (inference/weights.py)

    @property
    def path(self) -> Path:
        assert self.checkpoint.path is not None
        return self.checkpoint.path


def model_from_checkpoint(ckpt: Checkpoint, weights: str = "averaged") -> AttentionLanguageModel:
    """The exact model the checkpoint was saved from, on the CPU, with its averaged weights where it holds them
    (`weights="raw"`: the raw ones; choose_weights decides which a reader asked for); a mismatch is one UserError."""
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

        refuse_two_models(ckpt)  # a folder holding a run's checkpoint and an exported model: neither is chosen
        if is_exported(ckpt):
            return read_folder(ckpt)
    return load_checkpoint(resolve_checkpoint(ckpt, runs_root), mmap=mmap)


def load_run(ckpt: str | Path | None, device: torch.device, runs_root: str | Path = "runs",
             weights: str | None = None) -> LoadedRun:
    """Model (on `device`, eval mode), tokenizer and checkpoint record from a run folder or checkpoint file;
    `None` means the newest run under `runs_root`. `weights`: None (the average where the run kept one, else the
    raw weights), averaged or raw (refused in one line where the checkpoint does not hold that set)."""
    checkpoint = load_any(ckpt, runs_root)
    used = choose_weights(checkpoint, weights)
    refuse_non_finite(checkpoint)
    try:
        tokenizer = tokenizer_from_dict(checkpoint.tokenizer)
    except UserError as e:
        raise UserError(f"checkpoint {checkpoint.path}: {e}") from None
    model = model_from_checkpoint(checkpoint, used.kind)
    if model.config.vocab_size != tokenizer.vocab_size:
        raise UserError(f"checkpoint {checkpoint.path} is inconsistent: model and tokenizer vocabularies differ")
    refuse_non_finite_logits(model, checkpoint.path, used.kind)  # finite weights can still overflow
    return LoadedRun(model.to(device).eval(), tokenizer, checkpoint, used)
