"""Turning next-token logits into a token: greedy, temperature, top-k and nucleus (top-p) sampling, and the token
grammar, applied by one `Sampler` for every caller (eager loop, static step, its CUDA graph, the playground).

Design choices:
- The settings live in device tensors that `set` fills in place: a captured graph reads its numbers from them, so
  one capture serves every value a request may send. Which filters run changes the kernels: the graph's key
  (`SamplingMode`).
- Top-k reads the k-th largest logit from `torch.topk` with k on the host (faster on the CPU: docs/en/speed.md),
  except on CUDA, where a graph needs k in a device tensor (a sort, read at that index).
- The draw is inverse transform sampling (`sample_from`): one uniform number per row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from common.config_checks import is_numeric, is_whole
from common.errors import ConfigError

_FLOAT32_MAX = torch.finfo(torch.float32).max  # the Sampler's tensors are float32 on every device


def check_sampling_args(max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Refuse values that would sample nonsense: negative counts, and NaN or infinite numbers (a NaN
    temperature turns every logit into NaN; an infinite one samples uniformly), in Python or in the float32 that
    `Sampler` computes in (a temperature past its largest value, 1e39, overflows it; a tiny one is greedy,
    top_k is capped to the vocabulary and every top_p in (0, 1] is held)."""
    if not is_whole(max_new_tokens):
        raise ConfigError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens}")
    if not (is_numeric(temperature) and math.isfinite(temperature) and 0 <= temperature <= _FLOAT32_MAX):
        raise ConfigError(
            f"temperature must be a finite number >= 0 (0 = greedy) that float32 holds (at most "
            f"{_FLOAT32_MAX:g}), got {temperature}"
        )
    if top_k is not None and not is_whole(top_k, 1):
        raise ConfigError(f"top_k must be an integer >= 1 (or null), got {top_k}")
    if top_p is not None and not (is_numeric(top_p) and math.isfinite(top_p) and 0.0 < top_p <= 1.0):
        raise ConfigError(f"top_p must be a finite number in (0, 1] (or null), got {top_p}")


def sample_from(probs: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One id per row of probs (B, V), drawn with probability probs[b, i] / sum(probs[b]) -> (B, 1): one uniform
    number per row located in the running sum (torch.multinomial draws V variates per row, as costly as a step)."""
    cdf = probs.cumsum(dim=-1)  # (B, V)
    total = cdf[:, -1:].contiguous()  # (B, 1)
    u = torch.rand(total.shape, generator=generator, device=probs.device, dtype=probs.dtype) * total
    picked = torch.searchsorted(cdf, u, right=True)  # first i with cdf[i] > u: never a zero-probability id
    # u * total can round up to total itself; the last id with any probability is the first to reach it.
    last = torch.searchsorted(cdf, total).clamp_(max=probs.shape[-1] - 1)  # clamp: a NaN row finds nothing
    return torch.minimum(picked, last)


@dataclass(frozen=True)
class SamplingMode:
    """Which filters a draw runs (the numbers are `Sampler`'s tensors)."""

    greedy: bool = False
    scaled: bool = False  # a temperature other than 1
    top_k: bool = False
    top_p: bool = False
    grammar: bool = False

    @classmethod
    def of(
        cls, temperature: float, top_k: int | None, top_p: float | None, vocab_size: int, grammar: bool
    ) -> SamplingMode:
        """The filters these settings run on a vocabulary of `vocab_size`."""
        if temperature < torch.finfo(torch.float32).tiny:  # 0, or so small it rounds to 0 in float32: greedy
            return cls(greedy=True, grammar=grammar)
        return cls(
            scaled=temperature != 1.0,
            top_k=top_k is not None and top_k < vocab_size,
            top_p=top_p is not None and top_p < 1.0,
            grammar=grammar,
        )


class Sampler:
    """Next ids (B, 1) from float32 logits (B, V) on their device, with the settings of the last `set`."""

    def __init__(self, vocab_size: int, device: torch.device):
        self.vocab_size, self.mode, self.k = vocab_size, SamplingMode(), 1
        self.temperature = torch.ones((), device=device)
        self.kth = torch.zeros(1, 1, dtype=torch.long, device=device)  # top_k - 1: where the k-th sorts
        self.top_p = torch.ones((), device=device)
        self.state: Tensor | None = None  # the grammar's tensors (TokenGrammar.state, .allowed), copied in
        self.allowed: Tensor | None = None

    def set(self, temperature: float, top_k: int | None, top_p: float | None, grammar: TokenGrammar | None) -> bool:
        """Settings for the next draws (fills, no sync; a graph captured before reads them). True when the grammar's
        tensors had to be made anew (a graph captured with the old ones would not see them)."""
        self.mode = SamplingMode.of(temperature, top_k, top_p, self.vocab_size, grammar is not None)
        self.temperature.fill_(1.0 if self.mode.greedy else temperature)
        self.k = min(top_k or 1, self.vocab_size)  # a k past the vocabulary filters nothing (and may not fit a long)
        self.kth.fill_(self.k - 1)
        self.top_p.fill_(1.0 if top_p is None else top_p)
        if grammar is None:
            return False
        same = self.state is not None and self.state.shape == grammar.state.shape
        if same and self.allowed.shape == grammar.allowed.shape:  # in place: graphs read these very tensors
            self.state.copy_(grammar.state)
            self.allowed.copy_(grammar.allowed)
            return False
        device = self.temperature.device
        self.state, self.allowed = grammar.state.to(device).clone(), grammar.allowed.to(device).clone()
        return True

    def mask(self, logits: Tensor, previous: Tensor) -> Tensor:
        """logits (B, V) with the ids the grammar does not allow after the ids `previous` (B, 1) set to -inf (the
        logits themselves without a grammar)."""
        if not self.mode.grammar:
            return logits
        return logits.masked_fill(~self.allowed[self.state[previous[:, 0]]], float("-inf"))

    def probs(self, logits: Tensor) -> Tensor:
        """The distribution a draw is made from: float32 logits (B, V) -> probabilities (B, V). Greedy decoding
        draws from nothing; the softmax of the raw logits stands in for it, for callers that show probabilities."""
        mode = self.mode
        if mode.scaled:
            # Shift the largest logit to 0 before dividing: a tiny temperature then sends the others to -inf
            # (probability 0) instead of overflowing to inf - inf = NaN, so it approaches greedy as it should.
            logits = (logits - logits.amax(dim=-1, keepdim=True)) / self.temperature
        if mode.top_k:
            if logits.is_cuda:
                kth = logits.sort(dim=-1, descending=True).values.gather(-1, self.kth.expand(logits.shape[0], 1))
            else:
                kth = torch.topk(logits, self.k, dim=-1).values[:, -1:]  # (B, 1)
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if mode.top_p:
            sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
            probs = torch.softmax(sorted_logits, dim=-1)
            # Drop a token when the tokens ranked above it already hold top_p of the mass; the first never drops.
            drop_sorted = (probs.cumsum(dim=-1) - probs) >= self.top_p
            # A top_p that rounds to 0 in float32 (1e-320) would drop every token: the most probable one stays.
            drop_sorted[..., 0] = False
            logits = logits.masked_fill(torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted), float("-inf"))
        return torch.softmax(logits, dim=-1)

    def __call__(self, logits: Tensor, generator: torch.Generator | None) -> Tensor:
        """Next ids (B, 1) drawn from `probs(logits)` (the argmax when greedy); nothing read back to the host."""
        if self.mode.greedy:
            return logits.argmax(dim=-1, keepdim=True)
        return sample_from(self.probs(logits), generator)


class TokenGrammar:
    """Which token may follow which, for tokenizers that spell a character in parts (the jamo one), so that sampling
    never writes half a syllable. state: (V,) long, the state after each id; allowed: (S, V) bool, the ids each state
    allows (none empty). State 0 is "between characters": a sample may stop there and nowhere else."""

    def __init__(self, state: Tensor, allowed: Tensor):
        if allowed.dim() != 2 or state.shape != allowed.shape[1:] or not bool(allowed.any(dim=1).all()):
            raise ValueError("a token grammar needs a state per id and at least one allowed id per state")
        self.state, self.allowed = state.long(), allowed.bool()

    def to(self, device: torch.device) -> TokenGrammar:
        return TokenGrammar(self.state.to(device), self.allowed.to(device))

    def after(self, ids: Tensor) -> Tensor:
        """The state after the last id of each row: ids (B, T) -> (B,)."""
        return self.state[ids[:, -1]]
