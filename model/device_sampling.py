"""`sample_next`'s draw with its settings held in device tensors: nothing read back, nothing fixed at capture.

Design choices:
- A CUDA graph fixes its kernels and their arguments when it is captured. Which filters run (greedy, temperature,
  top-k, top-p, a token grammar) changes the kernels, so it is the graph's key (`SamplingMode`); the numbers
  themselves (the temperature, k, p) live in tensors the graph reads, so one capture serves every value a
  playground request may send.
- The math is `sampling_probs` + `sample_from` (model/sampling.py) op for op: the same shift before the
  temperature, the same nucleus (`nucleus`), the same inverse-CDF draw with the same generator, so a seed gives
  the ids `sample_next` gives. The k-th largest logit is read from a sort at a device index (torch.topk needs k
  on the host); it is the same value.
- No op here reads a value back to the host, so a step that samples can be replayed without a sync.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from model.sampling import TokenGrammar, nucleus, sample_from


@dataclass(frozen=True)
class SamplingMode:
    """Which filters a draw runs (the numbers are `DeviceSampler`'s tensors)."""

    greedy: bool = False
    scaled: bool = False  # a temperature other than 1
    top_k: bool = False
    top_p: bool = False
    grammar: bool = False

    @classmethod
    def of(cls, temperature: float, top_k: int | None, top_p: float | None, vocab_size: int,
           grammar: bool) -> SamplingMode:
        """The filters `sample_next(logits, temperature, top_k, top_p)` runs on a vocabulary of `vocab_size`."""
        if temperature < torch.finfo(torch.float32).tiny:  # as sample_next: greedy
            return cls(greedy=True, grammar=grammar)
        return cls(scaled=temperature != 1.0, top_k=top_k is not None and top_k < vocab_size,
                   top_p=top_p is not None and top_p < 1.0, grammar=grammar)


class DeviceSampler:
    """Draws the next ids (B, 1) from float32 logits (B, V) on their device, settings read from tensors."""

    def __init__(self, batch_size: int, device: torch.device):
        self.temperature = torch.ones((), device=device)
        self.kth = torch.zeros(batch_size, 1, dtype=torch.long, device=device)  # top_k - 1: where the k-th sorts
        self.top_p = torch.ones((), device=device)
        self.state: Tensor | None = None  # the grammar's tensors (TokenGrammar.state, .allowed), copied in
        self.allowed: Tensor | None = None

    def set(self, temperature: float, top_k: int | None, top_p: float | None, grammar: TokenGrammar | None) -> bool:
        """Settings for the next draws (fills, no sync; a graph captured before reads them). True when the grammar's
        tensors had to be made anew (a graph captured with the old ones would not see them)."""
        self.temperature.fill_(temperature if temperature >= torch.finfo(torch.float32).tiny else 1.0)
        self.kth.fill_((top_k or 1) - 1)
        self.top_p.fill_(1.0 if top_p is None else top_p)
        if grammar is None:
            return False
        fits = self.state is not None and self.state.shape == grammar.state.shape \
            and self.allowed.shape == grammar.allowed.shape
        if fits:  # in place: graphs read these very tensors
            self.state.copy_(grammar.state)
            self.allowed.copy_(grammar.allowed)
            return False
        device = self.temperature.device
        self.state, self.allowed = grammar.state.to(device).clone(), grammar.allowed.to(device).clone()
        return True

    def mask(self, logits: Tensor, previous: Tensor) -> Tensor:
        """`TokenGrammar.mask` after the ids `previous` (B, 1), with the grammar given to `set`."""
        return logits.masked_fill(~self.allowed[self.state[previous[:, 0]]], float("-inf"))

    def __call__(self, logits: Tensor, mode: SamplingMode, generator: torch.Generator | None) -> Tensor:
        if mode.greedy:
            return logits.argmax(dim=-1, keepdim=True)
        if mode.scaled:
            logits = (logits - logits.amax(dim=-1, keepdim=True)) / self.temperature
        if mode.top_k:
            kth = logits.sort(dim=-1, descending=True).values.gather(-1, self.kth)  # (B, 1)
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if mode.top_p:
            logits = nucleus(logits, self.top_p)
        return sample_from(torch.softmax(logits, dim=-1), generator)
