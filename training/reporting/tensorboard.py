"""TensorBoard logging. Every run writes the same tag names, so runs compare side by side.

Scalars on the step axis; at each evaluation, samples from fixed prompts (text tab) and the attention maps
of a fixed prompt (images tab); once per run, a parameter table; at the end, the run's hyperparameters with
its final metrics (HParams tab). Only rank 0 logs; on other ranks every method is a no-op.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, ListConfig, OmegaConf

from common.names import shown_name
from model import AttentionLanguageModel
from model.attention_maps import attention_maps
from model.counts import num_parameters, parameter_counts

# Evaluation samples are drawn a little cooler than 1.0 so that what changes over steps is the model, not noise.
SAMPLE_TEMPERATURE = 0.8

# Viridis at five stops: dark = little attention, yellow = all of it; perceptually even without matplotlib.
_RAMP = np.array([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], dtype=np.float64)
_FUTURE = np.array([235, 235, 235], dtype=np.uint8)  # positions a causal head cannot see
_GAP = np.array([255, 255, 255], dtype=np.uint8)


def colorize(weights: np.ndarray) -> np.ndarray:
    """Values in [0, 1], any shape -> uint8 RGB of that shape + (3,)."""
    x = np.clip(weights, 0.0, 1.0) * (len(_RAMP) - 1)
    stops = np.arange(len(_RAMP))
    rgb = np.stack([np.interp(x, stops, _RAMP[:, c]) for c in range(3)], axis=-1)
    return rgb.round().astype(np.uint8)


def attention_image(maps: np.ndarray, cell: int | None = None, gap: int = 4) -> np.ndarray:
    """One block's maps (H, T, T) -> uint8 HWC image, heads side by side, each weight a cell x cell square, coloured
    by its square root on a fixed scale (images compare across steps and runs; small weights stay visible); the
    future is light grey."""
    H, T, _ = maps.shape
    cell = cell or max(1, min(8, 192 // T))
    future = ~np.tril(np.ones((T, T), dtype=bool))
    tiles = []
    for h in range(H):
        tile = colorize(np.sqrt(np.clip(maps[h], 0.0, 1.0)))  # (T, T, 3)
        tile[future] = _FUTURE
        tiles.append(tile.repeat(cell, axis=0).repeat(cell, axis=1))  # (T*cell, T*cell, 3)
        if h < H - 1:
            tiles.append(np.broadcast_to(_GAP, (T * cell, gap, 3)))
    return np.ascontiguousarray(np.concatenate(tiles, axis=1))  # (T*cell, H*T*cell + (H-1)*gap, 3)


def parameter_table(model: AttentionLanguageModel) -> str:
    """Markdown table of where the parameters are."""
    total = num_parameters(model)
    lines = ["| module | parameters | share |", "|---|---:|---:|"]
    lines += [f"| {name} | {n:,} | {100 * n / total:.1f}% |" for name, n in parameter_counts(model)]
    lines.append(f"| **total** | **{total:,}** | 100% |")
    return "\n".join(lines)


def _hparam_value(value) -> bool | int | float | str:
    if value is None:
        return "null"  # HParams accepts only numbers, strings and booleans
    if isinstance(value, bool):
        return "true" if value else "false"  # torch's hparams() would store a bool as the number 0 or 1
    if isinstance(value, int | float):
        return value
    # A file name that is not valid UTF-8 (a corpus folder's) cannot go into TensorBoard's protobuf as it is.
    return shown_name(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


def flatten_hparams(sections: Mapping[str, Mapping], prefix: str = "") -> dict[str, bool | int | float | str]:
    """{"model": {"num_heads": 4}, "train": {"resume": None}} -> {"model.num_heads": 4, "train.resume": "null"}.

    Nested mappings are flattened with dots; lists become JSON strings.
    """
    flat: dict[str, bool | int | float | str] = {}
    for key, value in sections.items():
        name = f"{prefix}{key}"
        if isinstance(value, DictConfig | ListConfig):
            value = OmegaConf.to_container(value, resolve=True)
        if isinstance(value, Mapping):
            flat.update(flatten_hparams(value, name + "."))
        else:
            flat[name] = _hparam_value(value)
    return flat


def _text_block(text: str) -> str:
    """Markdown that shows the text verbatim (line breaks kept) in TensorBoard's text tab."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}\n{text}\n{fence}"


class RunLogger:
    def __init__(self, run_dir: Path, enabled: bool = True, purge_step: int | None = None):
        self.writer = None
        self._watched = None
        if enabled:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=purge_step)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        if self.writer is None:
            return
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def text(self, tag: str, text: str, step: int) -> None:
        if self.writer is not None:
            self.writer.add_text(tag, text, step)

    def watch(
        self,
        model: AttentionLanguageModel,
        tokenizer,
        prompts: Sequence[str],
        sample_tokens: int,
        attention_ids: Sequence[int],
        seed: int,
    ) -> None:
        """Remember what `snapshot` shows (samples of `sample_tokens` from each prompt, the attention maps of
        `attention_ids`, the same seed each time, so snapshots differ by the weights alone); log the parameters once."""
        if self.writer is None:
            return
        from inference.generation import prompt_ids  # warns once about prompt characters the vocabulary lacks

        self._watched = (
            model,
            tokenizer,
            [(p, prompt_ids(tokenizer, p)) for p in prompts],
            sample_tokens,
            list(attention_ids),
            seed,
        )
        self.writer.add_text("model/parameters", parameter_table(model), 0)
        if attention_ids:
            self.writer.add_text("attention/prompt", _text_block(tokenizer.decode(list(attention_ids))), 0)

    def snapshot(self, step: int) -> None:
        """Samples from the watched prompts (`samples/prompt_<i>`) and attention maps (`attention/block_<i>`)."""
        if self.writer is None or self._watched is None:
            return
        model, tokenizer, prompts, sample_tokens, attention_ids, seed = self._watched
        device = next(model.parameters()).device
        if sample_tokens > 0:
            generator = torch.Generator(device=device)
            for i, (prompt, ids) in enumerate(prompts):
                generator.manual_seed(seed)
                idx = torch.tensor([ids], dtype=torch.long, device=device)
                out = model.generate(idx, sample_tokens, temperature=SAMPLE_TEMPERATURE, generator=generator)
                text = prompt + tokenizer.decode(out[0, len(ids) :].tolist())
                self.writer.add_text(f"samples/prompt_{i}", _text_block(text), step)
        if attention_ids:
            idx = torch.tensor(attention_ids, dtype=torch.long, device=device)
            maps = attention_maps(model, idx).cpu().numpy()  # (L, H, T, T)
            for b, block_maps in enumerate(maps):
                self.writer.add_image(f"attention/block_{b}", attention_image(block_maps), step, dataformats="HWC")

    def hparams(self, hparams: Mapping[str, Mapping], metrics: Mapping[str, float], step: int) -> None:
        """The run's flattened hyperparameters and final metrics, in the run's own event directory (one HParams row
        per run, under its name, unlike add_hparams' sub-runs), with no experiment summary: TensorBoard builds the
        columns from every run's values, right even when runs of several sweeps share a folder."""
        if self.writer is None:
            return
        from torch.utils.tensorboard.summary import hparams as hparams_summaries

        _, session_start, session_end = hparams_summaries(flatten_hparams(hparams), dict(metrics))
        file_writer = self.writer.file_writer
        file_writer.add_summary(session_start)
        file_writer.add_summary(session_end)
        self.scalars(step, dict(metrics))

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
