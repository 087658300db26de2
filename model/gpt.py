"""AttentionLanguageModel: a GPT over token ids: token (+ learned position) embeddings -> num_blocks pre-norm
blocks -> final norm -> LM head.

Design choices:
- With `position=rope` there is no position embedding at all: positions enter only through the rotation of
  queries and keys, so a rope model has context_length x embedding_size fewer parameters.
- `init=gpt2` is GPT-2's N(0, 0.02) with residual projections scaled by 1/sqrt(2 * num_blocks); `init=torch`
  keeps each layer's PyTorch default. `zero_init_proj` then zeroes the attention and MLP output projections
  (each block starts as the identity and the residual stream is the embedding alone), as in modded-nanogpt.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from common.errors import ConfigError
from model.attention import ATTENTION_KINDS
from model.block import Block, make_norm
from model.config import ModelConfig
from model.decode import DecodeStep
from model.dropout import Dropout
from model.jamo_embedding import FIRST_ID, NUM_PARTS, NUM_SYLLABLES, JamoEmbedding
from model.jamo_head import JamoHead
from model.kv_cache import KVCache, TokenWindow
from model.sampling import TokenGrammar, check_sampling_args, sample_next


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
        self.config = config
        c = config
        self.context_length = c.context_length
        self.token_embedding = nn.Embedding(c.vocab_size, c.embedding_size)
        self.jamo_embedding = JamoEmbedding(c.vocab_size, c.embedding_size) if c.embedding == "jamo" else None
        self.position_embedding = nn.Embedding(c.context_length, c.embedding_size) if c.position == "learned" \
            else None
        self.dropout = Dropout(c.dropout)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.num_blocks))
        self.ln_f = make_norm(c.norm, c.embedding_size)
        self.lm_head = nn.Linear(c.embedding_size, c.vocab_size, bias=False) if c.head == "softmax" else None
        self.jamo_head = JamoHead(c.vocab_size, c.embedding_size, c.jamo_initials) if c.head == "jamo" else None
        if c.tie_weights:
            self.lm_head.weight = self.token_embedding.weight
        self._init_weights(c)
        if self.jamo_embedding is not None:  # a syllable starts as its jamo; its own row (a residual) at zero
            with torch.no_grad():
                self.token_embedding.weight[FIRST_ID:FIRST_ID + NUM_SYLLABLES].zero_()
                self.jamo_embedding.parts.weight[NUM_PARTS].zero_()  # the padding row of non-syllables

    def _init_weights(self, c: ModelConfig) -> None:
        # GPT-2: N(0, 0.02) everywhere, residual projections scaled by 1/sqrt(2 * num_blocks) so the
        # residual stream's variance does not grow with depth.
        for name, p in self.named_parameters():
            residual = name.startswith("blocks.") and name.endswith(("proj.weight", "proj.bias"))
            if c.zero_init_proj and residual:
                nn.init.zeros_(p)
            elif c.init != "gpt2":
                continue
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() >= 2 and not name.endswith("final_rows"):  # a syllable's own read-out row: zero
                std = 0.02 / math.sqrt(2 * c.num_blocks) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)

    @property
    def attention(self) -> str:
        return self.blocks[0].attn.attention

    def set_attention(self, attention: str) -> None:
        """Switch every block between the `heads` and `fused` paths (same parameters)."""
        if attention not in ATTENTION_KINDS:
            raise ValueError(f"attention must be one of {', '.join(ATTENTION_KINDS)}, got {attention!r}")
        for b in self.blocks:
            b.attn.attention = attention
        self.config = replace(self.config, attention=attention)

    def set_dropout(self, p: float) -> None:
        """Set every dropout probability (residual, MLP, attention weights); the parameters are unchanged."""
        for m in self.modules():
            if isinstance(m, nn.Dropout):
                m.p = p
            if hasattr(m, "dropout_p"):
                m.dropout_p = p
        self.config = replace(self.config, dropout=p)

    def num_parameters(self) -> int:
        """Tied weights count once; a table held as kept rows while training (model/syllable_rows.py) in full."""
        return sum(p.numel() for p in self.parameters()) + sum(getattr(m, "not_held", 0) for m in self.modules())

    def flops_per_token(self, context_length: int | None = None) -> int:
        """Training FLOPs per token (forward + backward = 3x forward), matmuls only, as in PaLM / nanoGPT."""
        c = self.config
        T = context_length or c.context_length
        E, HS, L, V = c.embedding_size, c.head_size, c.num_blocks, c.vocab_size
        mlp = (3 if c.mlp == "swiglu" else 2) * E * c.mlp_hidden
        per_block = 2 * (3 * E * HS + HS * E + mlp) + 2 * 2 * T * HS  # projections + QK^T and AV
        return 3 * (L * per_block + 2 * E * V)

    # -- forward ----------------------------------------------------------------------------------
    def forward(
        self,
        idx: Tensor,
        targets: Tensor | None = None,
        kv_cache: KVCache | None = None,
        start: int = 0,
        last_only: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """idx: (B, T) ids at positions start..start+T-1 -> (logits (B, T, V), loss or None).

        With `last_only`, logits are computed for the last position only: (B, 1, V).
        """
        x = self.hidden(idx, kv_cache, start)
        if last_only:
            x = x[:, -1:]  # (B, 1, E)
        if self.jamo_head is not None:  # the whole distribution only when no targets say which ids matter
            if targets is not None:
                return None, self.jamo_head.token_losses(x, targets).mean()
            return self.jamo_head.joint(x), None  # (B, T, V) log-probabilities
        logits = self.lm_head(x)  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
        return logits, loss

    def hidden(self, idx: Tensor, kv_cache: KVCache | None = None, start: int = 0) -> Tensor:
        """idx: (B, T) ids at positions start..start+T-1 -> the final norm's output (B, T, E), before the head."""
        T = idx.shape[1]
        if start + T > self.context_length:
            raise ValueError(f"sequence of {start + T} positions exceeds context_length {self.context_length}")
        x = self.embed(idx, start)
        for i, block in enumerate(self.blocks):
            x = block(x, None if kv_cache is None else kv_cache.layer(i), start)
        return self.ln_f(x)

    def token_losses(self, idx: Tensor, targets: Tensor) -> Tensor:
        """idx, targets: (B, T) -> each target's negative log-likelihood in nats (B, T), float32."""
        if self.jamo_head is not None:
            return self.jamo_head.token_losses(self.hidden(idx), targets)
        logits, _ = self(idx)
        return F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")

    def token_vectors(self, idx: Tensor) -> Tensor:
        """ids (...) -> their input vectors (..., E): the token's row, plus its jamo with model.embedding=jamo."""
        x = self.token_embedding(idx)
        return x if self.jamo_embedding is None else x + self.jamo_embedding(idx)

    def embed(self, idx: Tensor, start: int = 0) -> Tensor:
        """idx: (B, T) ids at positions start..start+T-1 -> the residual stream's input (B, T, E)."""
        x = self.token_vectors(idx)
        if self.position_embedding is not None:
            x = x + self.position_embedding(torch.arange(start, start + idx.shape[1], device=idx.device))
        return self.dropout(x)

    # -- generation ---------------------------------------------------------------------------------
    def window_start(self, length: int, shift: int) -> int:
        """First index of the window the model reads when the sequence holds `length` tokens.

        Positions stop at context_length, so a longer sequence is read through a window that jumps forward
        `shift` tokens at a time (holding between context_length - shift + 1 and context_length tokens).
        Cached and uncached generation use the same windows, hence give the same logits. shift=1 is the classic
        "crop to the last context_length tokens" at every step (a rotary model's default: its cache slides).
        """
        C = self.context_length
        return 0 if length <= C else shift * math.ceil((length - C) / shift)

    @property
    def window_shift(self) -> int:
        """The default `shift` of `window_start`. Rotary positions: 1, the KV cache slides (a ring) and never
        recomputes anything. Learned positions: a quarter of the context, so the model always reads at least
        three quarters of it while the cache is refilled only every context_length / 4 tokens."""
        return 1 if self.position_embedding is None else max(1, self.context_length // 4)

    def new_cache(self, batch_size: int, device: torch.device) -> KVCache:
        """An empty KV cache for generating `batch_size` sequences, in the dtype the forward will produce."""
        attn = self.blocks[0].attn
        autocasting = torch.is_autocast_enabled(device.type)
        dtype = torch.get_autocast_dtype(device.type) if autocasting else self.token_embedding.weight.dtype
        cache = KVCache(len(self.blocks), batch_size, attn.num_heads, self.context_length, attn.head_dim, device, dtype)
        if attn.attention == "fused":  # weights are frozen while generating: concatenate them once
            cache.qkv_weights = [b.attn.qkv_weight() for b in self.blocks]
        return cache

    @torch.inference_mode()
    def stream(
        self,
        idx: Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
        window_shift: int | None = None,
        grammar: TokenGrammar | None = None,
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """Yield (next ids (B, 1), their logits (B, V)) for each new token. idx: (B, T) prompt, T >= 1.

        The B rows are sampled independently, in one batch. Only the last context_length ids are kept, so
        max_new_tokens may be as large as one likes. With a `grammar`, ids it does not allow are masked
        (the logits yielded are the masked ones, those the token was drawn from), and a row left inside a
        character at max_new_tokens gets the few more tokens that finish it (rows finished already draw too:
        callers with several rows ignore those).
        """
        check_sampling_args(max_new_tokens, temperature, top_k, top_p)
        if idx.dim() != 2 or idx.shape[1] < 1:
            raise ValueError("idx must be (batch, length) with length >= 1")
        shift = window_shift or self.window_shift
        was_training = self.training
        self.eval()
        try:
            tokens = TokenWindow(idx, self.context_length)
            next_logits = self._logits_source(idx, use_cache, shift)
            # A cached step and its sampling are small ops on a few rows: on the CPU, intra-op threads would
            # only add a fork/join to each (and spin against other processes), so they run on one thread;
            # the caller's thread count is back before each token is yielded.
            threads = 1 if use_cache and idx.device.type == "cpu" else torch.get_num_threads()
            grammar = grammar.to(idx.device) if grammar is not None else None
            states = grammar.after(idx) if grammar is not None else None
            done = None  # past max_new_tokens: the rows that were between characters once (they stop there)
            length, end = idx.shape[1], idx.shape[1] + max_new_tokens
            while length < end or states is not None:
                if length >= end:
                    done = states == 0 if done is None else done | (states == 0)
                    if bool(done.all()):
                        break
                caller_threads = torch.get_num_threads()
                torch.set_num_threads(threads)
                try:
                    logits = next_logits(tokens, length)[:, -1].float()  # (B, V)
                    if grammar is not None:
                        logits = grammar.mask(logits, states)
                    nxt = sample_next(logits, temperature, top_k, top_p, generator)
                finally:
                    torch.set_num_threads(caller_threads)
                if grammar is not None:
                    states = grammar.after(nxt)
                tokens.append(nxt)
                length += 1
                yield nxt, logits
        finally:
            self.train(was_training)

    def _logits_source(self, idx: Tensor, use_cache: bool, shift: int) -> Callable[[TokenWindow, int], Tensor]:
        """A function (tokens, length) -> the logits (B, 1, V) that follow the sequence's first `length` ids."""
        if not use_cache:
            return lambda tokens, length: self(tokens.last(length - self.window_start(length, shift)),
                                               last_only=True)[0]
        cache = self.new_cache(idx.shape[0], idx.device)
        sliding = shift == 1 and self.position_embedding is None  # rotary keys stay valid as the window moves
        # The fused path, and every sliding cache, steps through DecodeStep; `heads` with learned positions
        # keeps the lecture's modules all the way.
        step = DecodeStep(self, cache) if sliding or self.attention == "fused" else None

        def logits(tokens: TokenWindow, length: int) -> Tensor:
            start = self.window_start(length, shift)
            if cache.position == 0 or (not sliding and start != cache.window_start):
                cache.reset(start)  # first step, or the window jumped: (re)fill it in one pass
                out = self(tokens.last(length - start), kv_cache=cache, start=0, last_only=True)[0]
                cache.advance(length - start)
                return out
            if step is not None:  # one new token since the last step
                return step(tokens.last(1), cache)
            out = self(tokens.last(1), kv_cache=cache, start=cache.position, last_only=True)[0]
            cache.advance(1)
            return out

        return logits

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
        """Sample `max_new_tokens` ids after the prompt idx (B, T) -> (B, T + max_new_tokens)."""
        new = [t for t, _ in self.stream(idx, max_new_tokens, temperature, top_k, top_p, use_cache, generator)]
        return torch.cat([idx, *new], dim=1)
