"""The one-token step with static shapes, sampling included: what a CUDA graph can capture once and replay.

`DecodeStep` (model/decode.py) reads the position as a Python int: where to write the cache, how many slots to
attend to, which rotation. A captured graph cannot take a new int per token, so `StaticDecode` runs the very
same `DecodeStep.forward_at` with a `DevicePosition`: the position is a device tensor the step itself advances,
the keys and values are written with `index_copy_` at slot position % context_length, and the query attends to
the whole cache with the slots not yet filled masked. The sampled id goes back into the step's input buffer, so
consecutive replays need nothing from the host.

Design choices:
- Same logits as `DecodeStep`: only the attention's summation differs (a mask instead of a slice); the rotation
  comes from the step's own `Rotations`, at a device position.
- Everything a replay touches is allocated once per (model, batch size, dtypes) and kept between generations
  (`acquire`): the KV cache (zeroed, so a masked slot never holds a NaN that 0 * NaN would let through), the
  ids, the position, the logits, the sampler's settings and the weights `DecodeStep` gathers. Each generation
  gathers the weights again and copies them into the same tensors (`begin`): a model trained since the last
  generation is sampled with its new weights.
- Random numbers come from the decoder's own generator (a graph stays bound to one): each generation starts it
  at the caller's generator's state and hands the state back at the end, so the caller's generator advances as
  eager sampling would have advanced it.
- The refill of a window (learned positions) is a full forward pass and stays eager (`sample_refilled`).
- A decoder serves one generation at a time: a second generation of the same model running meanwhile (two
  playground clients) gets a decoder of its own.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

import torch
from torch import Tensor, nn

from model.cuda_graph import Capture, Step, captured
from model.decode import DecodeStep, Rotations, _BlockWeights, _Norm
from model.kv_cache import KVCache
from model.sampling import Sampler, SamplingMode, TokenGrammar


class DevicePosition:
    """`SlotPosition` (model/decode.py) with the position p in a (1,) long device tensor: nothing is read back."""

    def __init__(self, pos: Tensor, slots: Tensor):
        self.pos, self._rotation = pos, None
        self.slot = torch.remainder(pos, slots.shape[0])  # (1,)
        self.mask = (slots <= pos).view(1, 1, 1, -1)  # slots filled so far (all, once p >= context_length - 1)

    def row(self, table: Tensor) -> Tensor:
        return table.index_select(0, self.pos)  # (1, E)

    def rotation(self, rotations: Rotations) -> Tensor:
        if self._rotation is None:  # once per step, shared by the blocks
            self._rotation = rotations(self.pos)
        return self._rotation

    def write(self, kv: Tensor, new: Tensor) -> None:
        kv.index_copy_(3, self.slot, new.unsqueeze(3))

    def attend(self, sdpa: Callable, q: Tensor, kv: Tensor) -> Tensor:
        return sdpa(q.unsqueeze(2), kv[:, 0], kv[:, 1], self.mask)


class StaticDecode:
    """A cached generation's buffers and its one-token step (`run`), replayed as a CUDA graph where asked."""

    def __init__(self, model: nn.Module, batch_size: int, device: torch.device, dtype: torch.dtype):
        attn = model.blocks[0].attn
        C = model.context_length
        self.cache = KVCache(len(model.blocks), batch_size, attn.num_heads, C, attn.head_dim, device, dtype)
        for b in self.cache.buffers:
            b.zero_()
        self.step = DecodeStep(model, self.cache)
        self.vocab_size = model.config.vocab_size
        self.ids = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.slots = torch.arange(C, device=device)
        self.logits = torch.zeros(batch_size, self.vocab_size, device=device)
        self.sampler = Sampler(self.vocab_size, device)
        self.generator = torch.Generator(device=device)
        self.graphs: dict[SamplingMode, Step] = {}
        self.source: torch.Generator | None = None
        self.busy = False

    def begin(self, model: nn.Module, temperature: float, top_k: int | None, top_p: float | None,
              grammar: TokenGrammar | None, generator: torch.Generator | None) -> None:
        """Ready for a new generation: the model's current weights, these settings, the caller's random state."""
        fresh = DecodeStep(model, self.cache)
        olds, news = _tensors(self.step), _tensors(fresh)
        if [(t.shape, t.dtype) for t in olds] != [(t.shape, t.dtype) for t in news]:
            self.step, self.graphs = fresh, {}  # a layer of the model was replaced: its graphs are captured anew
        else:
            for old, new in zip(olds, news, strict=True):
                if old.data_ptr() != new.data_ptr():
                    old.copy_(new)  # into the tensors the graphs read
        self.cache.reset(0)
        if self.sampler.set(temperature, top_k, top_p, grammar):
            self.graphs = {mode: g for mode, g in self.graphs.items() if not mode.grammar}
        self.source = generator if generator is not None else _default_generator(self.ids.device)
        self.generator.set_state(self.source.get_state())

    def end(self) -> None:
        """The caller's generator takes the state this generation left."""
        if self.source is not None:
            self.source.set_state(self.generator.get_state())
            self.source = None

    def run(self) -> None:
        """One token: the step at `pos` on `ids`, its logits into `logits`, the sampled ids into `ids`, pos + 1."""
        at = DevicePosition(self.pos, self.slots)
        logits = self.step.forward_at(self.ids, at, self.cache.buffers, self.cache.dtype)[:, -1].float()
        logits = self.sampler.mask(logits, self.ids)
        self.logits.copy_(logits)
        self.ids.copy_(self.sampler(logits, self.generator))
        self.pos.add_(1)

    def sample_refilled(self, logits: Tensor) -> Tensor:
        """Eagerly, the ids drawn from a refill's logits (B, V) (masked already), and the step's inputs set to
        follow them at the cache's position."""
        nxt = self.sampler(logits, self.generator)
        self.ids.copy_(nxt)
        self.pos.fill_(self.cache.position)
        return nxt

    def replay(self, capture: Capture | None = None) -> Step:
        """This sampling mode's captured step (captured on first use; `run` itself where capture failed)."""
        mode = self.sampler.mode
        if mode not in self.graphs:
            # what the warm-up runs write (the capture itself writes nothing), put back after
            written = (self.ids, self.pos, self.logits, *self.cache.buffers)
            saved, state = [t.clone() for t in written], self.generator.get_state()
            try:
                self.graphs[mode] = captured(self.run, "sampling", self.generator, capture)
            finally:
                for t, s in zip(written, saved, strict=True):
                    t.copy_(s)
                self.generator.set_state(state)
            if self.graphs[mode] == self.run:  # not captured: a generator the failed capture held is not reused,
                self.generator = torch.Generator(device=self.ids.device)  # nor graphs bound to it
                self.generator.set_state(state)
                self.graphs = {mode: self.run}
        return self.graphs[mode]


def _tensors(step: DecodeStep) -> list[Tensor]:
    """Every tensor `step` reads, in a fixed order (its host-side rotation tables aside)."""
    out: list[Tensor] = []

    def walk(x: object) -> None:
        if isinstance(x, Tensor):
            out.append(x)
        elif isinstance(x, nn.Module):
            out.extend([*x.parameters(), *x.buffers()])
        elif isinstance(x, list):
            for item in x:
                walk(item)
        elif isinstance(x, (DecodeStep, _BlockWeights, _Norm)):
            for name, value in sorted(vars(x).items()):
                if name != "rotations":
                    walk(value)

    walk(step)
    return out


def _default_generator(device: torch.device) -> torch.Generator:
    if device.type == "cuda":
        return torch.cuda.default_generators[device.index if device.index is not None else torch.cuda.current_device()]
    return torch.default_generator


_POOLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {key: [StaticDecode]}
_POOL_LOCK = threading.Lock()


def acquire(model: nn.Module, batch_size: int, device: torch.device, dtype: torch.dtype) -> StaticDecode:
    """A decoder of `model` for `batch_size` rows and a cache of `dtype` that no generation is using."""
    key = (batch_size, str(device), dtype, model.token_embedding.weight.dtype, torch.is_autocast_enabled(device.type))
    with _POOL_LOCK:
        decoders = _POOLS.setdefault(model, {}).setdefault(key, [])
        for d in decoders:
            if not d.busy:
                d.busy = True
                return d
    d = StaticDecode(model, batch_size, device, dtype)
    d.busy = True
    with _POOL_LOCK:
        decoders.append(d)
    return d


def release(decoder: StaticDecode) -> None:
    decoder.end()
    decoder.busy = False
