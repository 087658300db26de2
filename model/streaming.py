"""Generation: the token loop around a model, beside it rather than inside it (`stream`, `generate` calls it).

Design choices:
- Positions stop at context_length, so a longer sequence is read through a window (`window_start`): the
  classic "crop to the last context_length tokens" at every step is `shift=1`. With learned positions the
  window instead jumps `context_length / 4` tokens at a time, so the model always reads at least
  three quarters of the context while the KV cache is refilled only every quarter (`default_window_shift`);
  rotary keys stay valid as the
  window moves, so their cache slides (a ring) and never recomputes anything. Cached and uncached generation use
  the same windows, hence give the same logits (tests/test_model.py).
- With the cache, a window is filled in one forward pass (the fused attention path writes the cache, whichever
  `model.attention` says: both own the same parameters), then each new token is one `DecodeStep` (model/decode.py).
- A cached step and its sampling are small ops on a few rows: on the CPU, intra-op threads would only add a
  fork/join to each (and spin against other processes), so they run on one thread; the caller's thread count is
  back before each token is yielded.
- Only the last context_length ids are kept (`TokenWindow`), so max_new_tokens may be as large as one likes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn

from model.decode import DecodeStep
from model.kv_cache import KVCache, TokenWindow
from model.sampling import TokenGrammar, check_sampling_args, sample_next


def window_start(model: nn.Module, length: int, shift: int) -> int:
    """First index of the window the model reads when the sequence holds `length` tokens; the window jumps
    forward `shift` tokens at a time, holding between context_length - shift + 1 and context_length tokens."""
    C = model.context_length
    return 0 if length <= C else shift * math.ceil((length - C) / shift)


def default_window_shift(model: nn.Module) -> int:
    """The default `shift` of `window_start`: 1 with rotary positions (the cache slides), a quarter of the context
    with learned ones."""
    return 1 if model.position_embedding is None else max(1, model.context_length // 4)


def new_cache(model: nn.Module, batch_size: int, device: torch.device) -> KVCache:
    """An empty KV cache for generating `batch_size` sequences, in the dtype the forward will produce."""
    attn = model.blocks[0].attn
    autocasting = torch.is_autocast_enabled(device.type)
    dtype = torch.get_autocast_dtype(device.type) if autocasting else model.token_embedding.weight.dtype
    cache = KVCache(len(model.blocks), batch_size, attn.num_heads, model.context_length, attn.head_dim, device, dtype)
    return cache


@torch.inference_mode()
def stream(
    model: nn.Module,
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

    The B rows are sampled independently, in one batch. With a `grammar`, ids it does not allow are masked (the
    logits yielded are the masked ones, those the token was drawn from), and a row left inside a character at
    max_new_tokens gets the few more tokens that finish it (rows finished already draw too: callers with several
    rows ignore those).
    """
    check_sampling_args(max_new_tokens, temperature, top_k, top_p)
    if idx.dim() != 2 or idx.shape[1] < 1:
        raise ValueError("idx must be (batch, length) with length >= 1")
    shift = window_shift or default_window_shift(model)
    was_training = model.training
    model.eval()
    try:
        tokens = TokenWindow(idx, model.context_length)
        next_logits = _logits_source(model, idx, use_cache, shift)
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
        model.train(was_training)


def _logits_source(model: nn.Module, idx: Tensor, use_cache: bool,
                   shift: int) -> Callable[[TokenWindow, int], Tensor]:
    """A function (tokens, length) -> the logits (B, 1, V) that follow the sequence's first `length` ids."""
    if not use_cache:
        return lambda tokens, length: model(tokens.last(length - window_start(model, length, shift)),
                                            last_only=True)[0]
    cache = new_cache(model, idx.shape[0], idx.device)
    sliding = shift == 1 and model.position_embedding is None  # rotary keys stay valid as the window moves
    step = DecodeStep(model, cache)

    def logits(tokens: TokenWindow, length: int) -> Tensor:
        start = window_start(model, length, shift)
        if cache.position == 0 or (not sliding and start != cache.window_start):
            cache.reset(start)  # first step, or the window jumped: (re)fill it in one pass
            out = model(tokens.last(length - start), kv_cache=cache, start=0, last_only=True)[0]
            cache.advance(length - start)
            return out
        return step(tokens.last(1), cache)  # one new token since the last step

    return logits
