"""The model's two ends, chosen by one builder from `ModelConfig`: the token embedding (ids in) and the LM head
(hidden states out).

Design choices:
- The lecture's ends are the default: `nn.Embedding(vocab_size, embedding_size)` and `SoftmaxHead`, a bias-free
  `nn.Linear(embedding_size, vocab_size)` with its cross-entropy beside it. The Hangul-aware ends (model/hangul/:
  a syllable composed from its jamo on the way in, predicted jamo by jamo on the way out) have the same
  interface, so `AttentionLanguageModel` never asks which kind it holds:
  - an embedding maps ids (...) to vectors (..., E);
  - a head maps hidden states (..., E) to logits (..., V) (the staged head's are log-probabilities, which softmax
    and sampling treat alike), `token_losses(h, targets)` to each target's loss in nats, and
    `logits_and_loss(h, targets)` to what a training step needs (the staged head returns no logits there: it
    never builds the whole distribution when the targets say which ids matter);
  - a layer that starts some of its parameters other than the model's initialisation would names them in
    `keep_init` (left as the layer made them) or sets them in `finish_init()` (called after the initialisation).
- Parameter names are the lecture model's (`token_embedding.weight`, `lm_head.weight`); the Hangul-aware layers
  keep theirs under those two names. Checkpoints written before they moved there call them `jamo_embedding.*`
  and `jamo_head.*`: `upgrade_state_names` renames those when a checkpoint or an exported folder is read.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import ModelConfig
from model.hangul.jamo_embedding import JamoEmbedding
from model.hangul.jamo_head import JamoHead

# (old prefix, new prefix) of the parameter names of checkpoints written before the Hangul-aware layers took the
# places of the token embedding and the LM head
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
    return JamoEmbedding(c.vocab_size, c.embedding_size) if c.embedding == "jamo" else \
        nn.Embedding(c.vocab_size, c.embedding_size)


def build_lm_head(c: ModelConfig) -> nn.Module:
    return JamoHead(c.vocab_size, c.embedding_size, c.jamo_initials) if c.head == "jamo" else \
        SoftmaxHead(c.embedding_size, c.vocab_size, c.logit_softcap)


def upgrade_state_names(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """A state dict with the parameter names of before the Hangul-aware layers moved (`RENAMED`) renamed; any
    other state dict unchanged."""
    def renamed(key: str) -> str:
        for old, new in RENAMED:
            if key.startswith(old):
                return new + key[len(old):]
        return key

    if not any(key.startswith(old) for key in state for old, _ in RENAMED):
        return state
    return {renamed(key): value for key, value in state.items()}
