"""Turning next-token logits into a token: greedy, temperature, top-k and nucleus (top-p) sampling."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def check_sampling_args(max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Refuse values that would sample nonsense: negative counts, and NaN or infinite numbers (a NaN
    temperature turns every logit into NaN; an infinite one samples uniformly)."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature) \
            or temperature < 0:
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k must be an integer >= 1 (or null), got {top_k}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float))
                              or not math.isfinite(top_p) or not 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be a finite number in (0, 1] (or null), got {top_p}")


def sampling_probs(logits: Tensor, temperature: float, top_k: int | None = None,
                   top_p: float | None = None) -> Tensor:
    """The distribution `sample_next` draws from: logits (B, V) -> float32 probabilities (B, V), after
    temperature, top-k and top-p. Greedy decoding (a temperature that rounds to 0 in float32) draws from
    nothing; the softmax of the raw logits stands in for it, for callers that show probabilities."""
    logits = logits.float()
    if temperature < torch.finfo(torch.float32).tiny:
        return torch.softmax(logits, dim=-1)
    if temperature != 1.0:
        # Shift the largest logit to 0 before dividing: a tiny temperature then sends the others to -inf
        # (probability 0) instead of overflowing to inf - inf = NaN, so it approaches greedy as it should.
        logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        logits = nucleus(logits, top_p)
    return torch.softmax(logits, dim=-1)


def nucleus(logits: Tensor, top_p: float | Tensor) -> Tensor:
    """logits (B, V) with -inf for the ids outside the top_p nucleus (top_p a number, or a float32 tensor: the
    device sampler's, model/device_sampling.py)."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
    probs = torch.softmax(sorted_logits, dim=-1)
    # Drop a token when the tokens ranked above it already hold top_p of the mass; the first never drops.
    drop_sorted = (probs.cumsum(dim=-1) - probs) >= top_p
    # A top_p that rounds to 0 in float32 (1e-320) would drop every token: the most probable one stays.
    drop_sorted[..., 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return logits.masked_fill(drop, float("-inf"))


def sample_next(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """logits: (B, V) -> next ids (B, 1). Temperature 0 means greedy (argmax)."""
    if temperature < torch.finfo(torch.float32).tiny:  # 0, or so small it rounds to 0 in float32: greedy
        return logits.argmax(dim=-1, keepdim=True)
    return sample_from(sampling_probs(logits, temperature, top_k, top_p), generator)


def sample_from(probs: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One id per row of probs (B, V), drawn with probability probs[b, i] / sum(probs[b]) -> (B, 1).

    Inverse transform sampling: one uniform number per row, located in the running sum of the
    probabilities. torch.multinomial draws V exponential variates per row instead, which for a vocabulary of
    thousands of characters costs as much as a cached decoding step.
    """
    cdf = probs.cumsum(dim=-1)  # (B, V)
    total = cdf[:, -1:].contiguous()  # (B, 1)
    u = torch.rand(total.shape, generator=generator, device=probs.device, dtype=probs.dtype) * total
    picked = torch.searchsorted(cdf, u, right=True)  # first i with cdf[i] > u: never a zero-probability id
    # u * total can round up to total itself; the last id with any probability is the first to reach it.
    last = torch.searchsorted(cdf, total).clamp_(max=probs.shape[-1] - 1)  # clamp: a NaN row finds nothing
    return torch.minimum(picked, last)


class TokenGrammar:
    """Which token may follow which, for tokenizers whose ids spell characters in parts (the jamo one: a
    syllable is always initial, medial, then a final or "no final"). Each id leads to a state; each state
    allows a set of next ids. Sampling masks every other id, so a model can never write half a syllable.

    state: (V,) long, the state after each id; allowed: (S, V) bool, the ids allowed in each state, none
    empty. State 0 is "between characters": a sample may stop there and nowhere else.
    """

    def __init__(self, state: Tensor, allowed: Tensor):
        if allowed.dim() != 2 or state.shape != allowed.shape[1:] or not bool(allowed.any(dim=1).all()):
            raise ValueError("a token grammar needs a state per id and at least one allowed id per state")
        self.state, self.allowed = state.long(), allowed.bool()

    def to(self, device: torch.device) -> TokenGrammar:
        return TokenGrammar(self.state.to(device), self.allowed.to(device))

    def after(self, ids: Tensor) -> Tensor:
        """The state after the last id of each row: ids (B, T) -> (B,)."""
        return self.state[ids[:, -1]]

    def mask(self, logits: Tensor, states: Tensor) -> Tensor:
        """logits (B, V) with the ids the rows' states do not allow set to -inf."""
        return logits.masked_fill(~self.allowed[states], float("-inf"))
