"""Random (x, y) windows for next-token training, reproducible from a seed and resumable.

Design choices:
- Windows start at uniformly random positions: no epoch bookkeeping, and any prefix of a run sees the whole corpus.
- One numpy gather per batch from the memory-mapped tokens; ids become int64 only for that batch.
- Seeded from (seed, rank), so DDP ranks differ; its state is a plain dict, so a resumed run draws the same batches.
- `train.input_noise` swaps inputs, never targets, for ids drawn from the training tokens ("data noising as
  smoothing", Xie et al. 2017), drawn after the starts so a run without it draws what it always drew.
"""

from __future__ import annotations

import numpy as np
import torch


class BatchSampler:
    """`batch_size` windows a batch: `x` each window's first `context_length` tokens, `y` the same shifted by one."""

    def __init__(
        self,
        tokens: np.ndarray,
        context_length: int,
        batch_size: int,
        device: torch.device | str = "cpu",
        seed: int = 0,
        rank: int = 0,
        input_noise: float = 0.0,
    ):
        if len(tokens) < context_length + 1:
            raise ValueError(f"need at least {context_length + 1} tokens, got {len(tokens)}")
        self.tokens = tokens
        self.context_length = context_length
        self.batch_size = batch_size
        if not 0.0 <= input_noise < 1.0:
            raise ValueError(f"input_noise must be in [0, 1), got {input_noise}")
        self.input_noise = input_noise
        self.device = torch.device(device)
        self.rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, rank])))
        self._offsets = np.arange(context_length + 1)
        self._pin = self.device.type == "cuda"

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        starts = self.rng.integers(0, len(self.tokens) - self.context_length, size=self.batch_size)
        windows = self.tokens[starts[:, None] + self._offsets]  # (B, T+1), one gather from the memmap
        if self.input_noise:
            # x and y overlap in a window, so the noised inputs get their own copy: (B, T) + (B, T) -> (B, 2T)
            inputs = windows[:, :-1].copy()
            swap = self.rng.random(inputs.shape) < self.input_noise
            inputs[swap] = self.tokens[self.rng.integers(0, len(self.tokens), size=int(swap.sum()))]
            windows = np.concatenate([inputs, windows[:, 1:]], axis=1)
        batch = torch.from_numpy(windows.astype(np.int64))
        if self._pin:
            batch = batch.pin_memory()
        batch = batch.to(self.device, non_blocking=True)
        T = self.context_length
        return batch[:, :T], batch[:, -T:]  # x, y: (B, T) each

    __next__ = next_batch

    def peek(self, n: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The next `n` batches without moving on: `next_batch` draws the same ones after."""
        saved = self.state_dict()
        batches = [self.next_batch() for _ in range(n)]
        self.load_state_dict(saved)
        return batches

    def __iter__(self):
        return self

    def state_dict(self) -> dict:
        return {"bit_generator": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["bit_generator"]
