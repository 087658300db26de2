"""Generation: the token loop around a model, beside it rather than inside it (`stream`, `generate` calls it).

Design choices:
- A sequence longer than context_length is read through a window (`window_start`): with learned positions it jumps
  a quarter of the context at a time (`default_window_shift`), so the cache is refilled once a quarter; rotary keys
  stay valid, so their cache slides. Cached and uncached generation read the same windows: the same logits.
- With the cache, a window is filled in one forward pass, then each token is one `DecodeStep` (model/decode.py) or
  model/static_decode.py's static step (`decoder`); on the CPU, on one thread (`OneThread`): small ops on few rows.
- Only the last context_length ids are kept (`TokenWindow`), so max_new_tokens may be as large as one likes.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from torch import Tensor, nn

from model.decode import DecodeStep, OneThread
from model.kv_cache import KVCache, TokenWindow
from model.sampling import Sampler, TokenGrammar, check_sampling_args
from model.static_decode import acquire, release


def window_start(model: nn.Module, length: int, shift: int) -> int:
    """First index of the window the model reads when the sequence holds `length` tokens; the window jumps
    forward `shift` tokens at a time, holding between context_length - shift + 1 and context_length tokens."""
    C = model.context_length
    return 0 if length <= C else shift * math.ceil((length - C) / shift)


def default_window_shift(model: nn.Module) -> int:
    """The default `shift` of `window_start`: 1 with rotary positions (the cache slides), a quarter of the context
    with learned ones."""
    return 1 if model.position_embedding is None else max(1, model.context_length // 4)


# How a cached token is computed: `eager` is DecodeStep then the `Sampler`; `static` the static step (sampling
# included) run op by op; `graph` the static step and every later refill replayed as CUDA graphs (`static`, after one
# line saying why, where capture fails); `compiled` the same with inductor's kernels under the graphs; `auto` is graph
# on CUDA and eager elsewhere (on the CPU and MPS a step's cost is arithmetic and Python, which a graph keeps).
# Every caller (generate.py, the playground, bench.py, training's samples) comes through `stream`.
DECODERS = ("eager", "static", "graph", "compiled", "auto")


def new_cache(model: nn.Module, batch_size: int, device: torch.device) -> KVCache:
    """An empty KV cache for generating `batch_size` sequences, in the dtype the forward will produce."""
    return KVCache(model, batch_size, device, cache_dtype(model, device))


def cache_dtype(model: nn.Module, device: torch.device) -> torch.dtype:
    """The dtype the forward produces keys in: the autocast dtype under autocast, else the weights'."""
    autocasting = torch.is_autocast_enabled(device.type)
    return torch.get_autocast_dtype(device.type) if autocasting else model.token_embedding.weight.dtype


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
    decoder: str = "auto",
) -> Iterator[tuple[Tensor, Tensor]]:
    """Yield (next ids (B, 1), their logits (B, V)) for each new token. idx: (B, T) prompt, T >= 1.

    The B rows are sampled independently, in one batch. With a `grammar`, ids it does not allow are masked (the
    logits yielded are the masked ones, those the token was drawn from), and a row left inside a character at
    max_new_tokens gets the few more tokens that finish it (rows finished already draw too: callers with several
    rows ignore those). `decoder` (cached generation only): one of DECODERS.
    """
    check_sampling_args(max_new_tokens, temperature, top_k, top_p)
    if decoder not in DECODERS:
        raise ValueError(f"decoder must be one of {', '.join(DECODERS)}, got {decoder!r}")
    if idx.dim() != 2 or idx.shape[1] < 1:
        raise ValueError("idx must be (batch, length) with length >= 1")
    shift = window_shift or default_window_shift(model)
    if decoder == "auto":
        decoder = "graph" if idx.device.type == "cuda" else "eager"
    was_training = model.training
    model.eval()
    draw = None
    try:
        tokens = TokenWindow(idx, model.context_length)
        one_thread = OneThread(use_cache and idx.device.type == "cpu")
        grammar = grammar.to(idx.device) if grammar is not None else None
        states = grammar.after(idx) if grammar is not None else None
        sampling = (temperature, top_k, top_p, grammar)  # the settings `Sampler.set` takes
        if use_cache and decoder != "eager":
            draw = _StaticSource(model, idx, shift, sampling, generator, decoder)
        else:
            draw = _EagerSource(model, idx, use_cache, shift, sampling, generator)
        done = None  # past max_new_tokens: the rows that were between characters once (they stop there)
        length, end = idx.shape[1], idx.shape[1] + max_new_tokens
        while length < end or states is not None:
            if length >= end:
                done = states == 0 if done is None else done | (states == 0)
                if bool(done.all()):
                    break
            with one_thread:
                nxt, logits = draw(tokens, length)
            if grammar is not None:
                states = grammar.after(nxt)
            tokens.append(nxt)
            length += 1
            yield nxt, logits
    finally:
        if draw is not None:
            draw.close()
        model.train(was_training)


def _refilled(model: nn.Module, cache: KVCache, tokens: TokenWindow, length: int, shift: int) -> Tensor | None:
    """The logits (B, 1, V) of (re)filling `cache` with the window of the sequence's first `length` ids in one
    forward pass, where it needs it (the first token, or a window of learned positions that jumped); else None: the
    next token is one step."""
    start = window_start(model, length, shift)
    sliding = shift == 1 and model.position_embedding is None  # rotary keys stay valid as the window moves
    if cache.position and (sliding or start == cache.window_start):
        return None
    cache.reset(start)
    out = model(tokens.last(length - start), kv_cache=cache, start=0, last_only=True)[0]
    cache.advance(length - start)
    return out


class _EagerSource:
    """The window's logits (uncached, a refill or one `DecodeStep`), masked by the grammar, then the `Sampler`."""

    def __init__(
        self,
        model: nn.Module,
        idx: Tensor,
        use_cache: bool,
        shift: int,
        sampling: tuple,
        generator: torch.Generator | None,
    ):
        self.model, self.shift, self.generator = model, shift, generator
        self.sampler = Sampler(model.config.vocab_size, idx.device)
        self.sampler.set(*sampling)
        self.cache = new_cache(model, idx.shape[0], idx.device) if use_cache else None
        self.step = DecodeStep(model, self.cache) if use_cache else None

    def __call__(self, tokens: TokenWindow, length: int) -> tuple[Tensor, Tensor]:
        previous = tokens.last(1)
        if self.cache is None:
            out = self.model(tokens.last(length - window_start(self.model, length, self.shift)), last_only=True)[0]
        else:
            out = _refilled(self.model, self.cache, tokens, length, self.shift)
            if out is None:
                out = self.step(previous, self.cache)  # one new token since the last step
        logits = self.sampler.mask(out[:, -1].float(), previous)  # (B, V)
        return self.sampler(logits, self.generator), logits

    def close(self) -> None:
        pass


class _StaticSource:
    """Tokens from a `StaticDecode` of the model's pool: the prompt's window filled by one forward pass and sampled
    eagerly, every other token one `run` of the static step, every later refill one `refill` (both replayed as CUDA
    graphs but with `static`)."""

    def __init__(
        self,
        model: nn.Module,
        idx: Tensor,
        shift: int,
        sampling: tuple,
        generator: torch.Generator | None,
        decoder: str,
    ):
        self.model, self.shift, self.graph = model, shift, decoder != "static"
        self.decoder = acquire(model, idx.shape[0], idx.device, cache_dtype(model, idx.device))
        try:
            self.decoder.begin(model, sampling, generator)
            if decoder == "compiled":
                self.decoder.compile_forward()
        except BaseException:
            release(self.decoder)
            raise

    def __call__(self, tokens: TokenWindow, length: int) -> tuple[Tensor, Tensor]:
        d, start = self.decoder, window_start(self.model, length, self.shift)
        steady = d.cache.position and start != d.cache.window_start and self.model.position_embedding is not None
        if steady and length - start == self.model.context_length - self.shift + 1:  # the window jumped: refill it
            d.window(length - start).copy_(tokens.last(length - start))
            d.cache.reset(start)
            refill = d.refill(self.model, length - start)
            (d.replay(refill, ("refill", length - start)) if self.graph else refill)()
            d.cache.advance(length - start)
            return d.ids.clone(), d.logits.clone()
        out = _refilled(self.model, d.cache, tokens, length, self.shift)
        if out is not None:
            logits = d.sampler.mask(out[:, -1].float(), tokens.last(1))
            return d.sample_refilled(logits), logits
        (d.replay() if self.graph else d.run)()
        d.cache.advance(1)
        return d.ids.clone(), d.logits.clone()  # the step's buffers are overwritten by the next token

    def close(self) -> None:
        release(self.decoder)
