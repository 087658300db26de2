"""AttentionLanguageModel: the lecture's GPT over token ids. Token (+ learned position) embeddings -> num_blocks
pre-norm blocks of attention and an MLP -> a final norm -> the LM head, which scores every token.

Read it with model/attention.py (`Head`, `MultiHeadAttention`) and model/block.py (`Block`). The model knows ids
and tensors only, never characters or files.

Design choices:
- The two ends come from one builder (model/input_output.py): the lecture's `nn.Embedding` and linear LM head
  by default, or the Hangul-aware layers (model/hangul/), which have the same interface. This class never asks
  which kind it holds.
- `position=rope` (the modern recipe) has no position embedding at all: positions enter only through the
  rotation of queries and keys inside attention, so the model has context_length x embedding_size fewer
  parameters.
- `init=gpt2` is GPT-2's N(0, 0.02) with residual projections scaled by 1/sqrt(2 * num_blocks); `init=torch`
  keeps each layer's PyTorch default. `zero_init_proj` then zeroes the attention and MLP output projections
  (each block starts as the identity), as in modded-nanogpt.
- Two levers of the data-limited records, off by default, reach across blocks: `unet_skips` (the first half's
  outputs added to the second half's inputs) and `value_embedding` (each block may read the embedding, `x0`).
  Off, the loop in `hidden` is the lecture's `for block in blocks: x = block(x)`.
- Generation lives beside the model, with the KV cache and the one-token decode step (model/streaming.py);
  `generate` is the lecture's way in. Counting parameters and FLOPs, attention maps and switching a built
  model's dropout are model/counts.py, model/attention_maps.py and model/switches.py.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from common.errors import ConfigError
from model.block import Block, make_norm
from model.config import ModelConfig
from model.dropout import Dropout
from model.input_output import build_lm_head, build_token_embedding
from model.kv_cache import KVCache
from model.qkv_layout import head_by_head
from model.streaming import stream


class AttentionLanguageModel(nn.Module):
    """Build from one `ModelConfig`, or from its fields as keywords (scripts and notebooks do):
    `AttentionLanguageModel(vocab_size=..., context_length=..., ...)`."""

    def __init__(self, config: ModelConfig | None = None, /, **kwargs):
        super().__init__()
        if config is None:
            config = ModelConfig(**kwargs)
        elif kwargs:
            raise TypeError("pass a ModelConfig or keyword settings, not both")
        if config.vocab_size is None:
            raise ConfigError("vocab_size must be set (ModelConfig.with_vocab(tokenizer.vocab_size))")
        if config.dropout is None:
            raise ConfigError("model.dropout=null (auto) is resolved by training; pass a number to build a model")
        self.config = c = config
        self.context_length = c.context_length
        self.token_embedding = build_token_embedding(c)  # a (vocab_size, E) table of token vectors
        self.position_embedding = nn.Embedding(c.context_length, c.embedding_size) if c.position == "learned" else None
        self.dropout = Dropout(c.dropout)
        self.blocks = nn.ModuleList(Block(c, i) for i in range(c.num_blocks))
        # model.unet_skips: block i of the first half feeds block L-1-i of the second, times a weight starting at 1
        self.skip_weights = nn.Parameter(torch.ones(c.num_blocks // 2)) if c.unet_skips else None
        self.ln_f = make_norm(c.norm, c.embedding_size)
        self.lm_head = build_lm_head(c)  # hidden state (E) -> a score for every token (vocab_size)
        if c.tie_weights:  # one matrix reads tokens in and scores them out
            self.lm_head.weight = self.token_embedding.weight
        self._init_weights(c)

    def _init_weights(self, c: ModelConfig) -> None:
        # GPT-2: N(0, 0.02) everywhere, residual projections scaled by 1/sqrt(2 * num_blocks) so the
        # residual stream's variance does not grow with depth. A layer may keep some parameters as it made them
        # (`keep_init`) or finish them its own way (`finish_init`): model/input_output.py.
        kept = {f"{prefix}.{name}" for prefix, m in self.named_modules() for name in getattr(m, "keep_init", ())}
        for name, p in self.named_parameters():
            residual = name.startswith("blocks.") and name.endswith(("proj.weight", "proj.bias"))
            if c.zero_init_proj and residual:
                nn.init.zeros_(p)
            elif c.init != "gpt2":
                continue
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2 and name not in kept:
                std = 0.02 / math.sqrt(2 * c.num_blocks) if name.endswith("proj.weight") else 0.02
                for w in head_by_head(p) if name.endswith(".attn.qkv") else (p,):  # either layout, same draws
                    nn.init.normal_(w, mean=0.0, std=std)
        for m in self.modules():
            if hasattr(m, "finish_init"):
                m.finish_init()

    def forward(
        self,
        idx: Tensor,
        targets: Tensor | None = None,
        kv_cache: KVCache | None = None,
        start: int = 0,
        last_only: bool = False,
    ) -> tuple[Tensor | None, Tensor | None]:
        """idx: (B, T) ids at positions start..start+T-1 -> (logits (B, T, V), loss or None).

        With targets (B, T), the loss is their mean cross-entropy. `kv_cache` and `start` serve generation
        (model/streaming.py); `last_only` computes the last position's logits only: (B, 1, V).
        """
        x = self.hidden(idx, kv_cache, start)  # (B, T, E)
        if last_only:
            x = x[:, -1:]  # (B, 1, E)
        if targets is None:
            return self.lm_head(x), None  # (B, T, V)
        return self.lm_head.logits_and_loss(x, targets)

    def hidden(self, idx: Tensor, kv_cache: KVCache | None = None, start: int = 0) -> Tensor:
        """idx: (B, T) ids at positions start..start+T-1 -> the final norm's output (B, T, E), before the head."""
        T = idx.shape[1]
        if start + T > self.context_length:
            raise ValueError(f"sequence of {start + T} positions exceeds context_length {self.context_length}")
        x = x0 = self.embed(idx, start)  # (B, T, E)
        half, skips = len(self.blocks) // 2, []
        for i, block in enumerate(self.blocks):
            if self.skip_weights is not None and i >= half and skips:
                x = x + self.skip_weights[i - half] * skips.pop()
            x = block(x, None if kv_cache is None else kv_cache.layer(i), start, x0)
            if self.skip_weights is not None and i < half:
                skips.append(x)
        return self.ln_f(x)

    def embed(self, idx: Tensor, start: int = 0) -> Tensor:
        """idx: (B, T) ids at positions start..start+T-1 -> the residual stream's input (B, T, E)."""
        x = self.token_embedding(idx)  # (B, T, E)
        if self.position_embedding is not None:
            x = x + self.position_embedding(torch.arange(start, start + idx.shape[1], device=idx.device))
        return self.dropout(x)

    def token_losses(self, idx: Tensor, targets: Tensor) -> Tensor:
        """idx, targets: (B, T) -> each target's negative log-likelihood in nats (B, T), float32."""
        return self.lm_head.token_losses(self.hidden(idx), targets)

    @torch.inference_mode()
    def generate(
        self,
        idx: Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Sample `max_new_tokens` ids after the prompt idx (B, T) -> (B, T + max_new_tokens).

        Longer than the context, the model reads the newest tokens only; with `use_cache` (the default) each new
        token costs one position's work, not the whole window's. model/streaming.py does both.
        """
        new = [t for t, _ in stream(self, idx, max_new_tokens, temperature, top_k, top_p, use_cache, generator)]
        return torch.cat([idx, *new], dim=1)
