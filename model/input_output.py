"""The model's two ends, built from `ModelConfig`: the token embedding (ids in) and the LM head (hidden states out).

Design choices:
- The lecture's ends are the default (`nn.Embedding`, and `SoftmaxHead`: a bias-free `nn.Linear` with its
  cross-entropy beside it); the Hangul-aware ones (model/hangul/) share their interface (a head's `token_losses`,
  `logits_and_loss`; `keep_init` and `finish_init()` for its own initialisation), so the model never asks which
  kind it holds.
- Parameter names are the lecture model's (`token_embedding.weight`, `lm_head.weight`); `upgrade_state_names`
  renames the older `jamo_embedding.*` and `jamo_head.*` when a checkpoint or an exported folder is read.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import ModelConfig
from model.hangul.jamo_embedding import JamoEmbedding
from model.hangul.jamo_head import JamoHead

# (old prefix, new prefix) of checkpoints' parameter names from before the Hangul-aware layers took the ends' places
RENAMED = (("jamo_embedding.", "token_embedding."), ("jamo_head.", "lm_head."))


class SoftmaxHead(nn.Linear):
    """The lecture's LM head: one logit per token from the final hidden state; softmax makes them a distribution.

    With `softcap` (model.logit_softcap, off by default) the logits are squashed to (-cap, cap) by
    cap * tanh(z / cap): close to z while small, never confident beyond e^(2 cap) to one.
    """

    def __init__(self, embedding_size: int, vocab_size: int, softcap: float = 0.0):
        super().__init__(embedding_size, vocab_size, bias=False)
        self.softcap = softcap

    def forward(self, h: Tensor) -> Tensor:
        z = super().forward(h)
        return z if not self.softcap else self.softcap * torch.tanh(z / self.softcap)

    def logits_and_loss(self, h: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
        """h: (B, T, E), targets: (B, T) -> logits (B, T, V) and their mean cross-entropy."""
        logits = self(h)
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))

    def token_losses(self, h: Tensor, targets: Tensor) -> Tensor:
        """h: (B, T, E), targets: (B, T) -> each target's negative log-likelihood in nats (B, T), float32."""
        return F.cross_entropy(self(h).float().transpose(1, 2), targets, reduction="none")


def build_token_embedding(c: ModelConfig) -> nn.Embedding:
    if c.embedding == "jamo":
        return JamoEmbedding(c.vocab_size, c.embedding_size)
    return nn.Embedding(c.vocab_size, c.embedding_size)


def build_lm_head(c: ModelConfig) -> nn.Module:
    if c.head == "jamo":
        return JamoHead(c.vocab_size, c.embedding_size, c.jamo_initials)
    return SoftmaxHead(c.embedding_size, c.vocab_size, c.logit_softcap)


def upgrade_state_names(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A state dict with the parameter names of before the Hangul-aware layers moved (`RENAMED`) renamed; any
    other state dict unchanged."""

    def renamed(key: str) -> str:
        for old, new in RENAMED:
            if key.startswith(old):
                return new + key[len(old) :]
        return key

    if not any(key.startswith(old) for key in state for old, _ in RENAMED):
        return state
    return {renamed(key): value for key, value in state.items()}
