"""From a run folder, checkpoint file or exported folder to a model ready to sample, and its tokenizer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from common.errors import UserError
from inference.checkpoint import Checkpoint, load_checkpoint, refuse_non_finite, refuse_non_finite_logits
from inference.run_files import RunFile, refuse_two_models, run_file
from inference.weights import WeightsUsed, choose_weights
from model import AttentionLanguageModel
from tokenizer import Tokenizer, tokenizer_from_dict


@dataclass
class LoadedRun:
    model: AttentionLanguageModel  # on its device, in eval mode
    tokenizer: Tokenizer
    checkpoint: Checkpoint
    weights: WeightsUsed  # which of its weights the model holds (inference/weights.py)
    file: RunFile | None = None  # which file of the run, and why (None: an exported folder)

    @property
    def path(self) -> Path:
        assert self.checkpoint.path is not None
        return self.checkpoint.path

    def line(self) -> str:
        """`weights: <which set> from <file> (step, val loss: why this file)`."""
        return self.weights.line(self.source())

    def source(self) -> str:
        """The file read, its step and validation loss, and why; an exported folder's record of its source."""
        if self.file is not None:
            average = self.weights.kind == "raw" and self.checkpoint.averaged is not None
            return self.file.words("that val loss is the average's" if average else "")
        came = self.checkpoint.source
        if not came:
            return str(self.path)
        loss = came.get("val_loss")
        return f"{self.path} (exported from {came.get('checkpoint')}: step {came.get('step')}" + (
            f", val loss {loss:.4f})" if isinstance(loss, float) else ")"
        )


def model_from_checkpoint(ckpt: Checkpoint, weights: str = "averaged") -> AttentionLanguageModel:
    """The model the checkpoint was saved from, on the CPU, holding `ckpt.weights(weights)` (else one UserError)."""
    try:
        model = AttentionLanguageModel(ckpt.model_config)
        model.load_state_dict(ckpt.weights(weights))
    except (TypeError, ValueError, RuntimeError) as e:
        raise UserError(
            f"checkpoint {ckpt.path} does not match its model settings ({str(e).strip().splitlines()[0]})"
        ) from None
    return model


def load_any(
    ckpt: str | Path | RunFile | None, runs_root: str | Path = "runs", mmap: bool = False
) -> tuple[Checkpoint, RunFile | None]:
    """The checkpoint of a run folder (its file chosen by run_files.py), a checkpoint file or an exported folder."""
    if isinstance(ckpt, RunFile):
        return load_checkpoint(ckpt.path, mmap=mmap), ckpt
    if ckpt not in (None, ""):
        from inference.exported_folder import is_exported, read_folder

        refuse_two_models(ckpt)
        if is_exported(ckpt):
            return read_folder(ckpt), None
    chosen = run_file(ckpt, runs_root)
    return load_checkpoint(chosen.path, mmap=mmap), chosen


def load_run(
    ckpt: str | Path | RunFile | None, device: torch.device, runs_root: str | Path = "runs", weights: str | None = None
) -> LoadedRun:
    """Model (on `device`, eval mode), tokenizer and checkpoint of `ckpt` (as `load_any`), holding `weights`."""
    checkpoint, chosen = load_any(ckpt, runs_root)
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
    return LoadedRun(model.to(device).eval(), tokenizer, checkpoint, used, chosen)
