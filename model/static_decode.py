"""The one-token step with static shapes, sampling included: what a CUDA graph can capture once and replay.

A graph cannot take a new Python int per token, so `StaticDecode` runs `DecodeStep.forward_at` (model/decode.py)
with a `DevicePosition`: a device tensor the step advances itself; keys and values go to slot position %
context_length by `index_copy_`, and the query attends to the whole cache with unfilled slots masked. The sampled
id goes back into the step's input buffer, so consecutive replays need nothing from the host.

Design choices:
- Same logits as `DecodeStep`: only the attention's summation differs (a mask instead of a slice).
- Everything a replay touches is allocated once per (model, batch size, dtypes) and kept between generations
  (`acquire`), the KV cache zeroed (a masked slot must not hold a NaN that 0 * NaN lets through). `begin` copies the
  model's current weights into the same tensors, so a model trained since is sampled with its new weights.
- Random numbers come from the decoder's own generator (a graph stays bound to one), started at the caller's
  generator's state and handed back at the end: the caller's generator advances as eager sampling would advance it.
- A window's first refill (learned positions) reads the prompt and runs eagerly (`sample_refilled`); every later one
  reads the same number of ids, so it is a static function too (`refill`), replayed as a graph of its own.
- `compiled`: inductor compiles the forward of both before capture, fusing the step's small kernels.
- A decoder serves one generation at a time: a concurrent generation of the same model gets a decoder of its own.
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
from model.sampling import Sampler


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
        self.cache = KVCache(model, batch_size, device, dtype)
        for b in self.cache.buffers:
            b.zero_()
        self.step = DecodeStep(model, self.cache)
        self.vocab_size = model.config.vocab_size
        self.ids = torch.zeros(batch_size, 1, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.slots = torch.arange(model.context_length, device=device)
        self.logits = torch.zeros(batch_size, self.vocab_size, device=device)
        self.sampler = Sampler(self.vocab_size, device)
        self.generator = torch.Generator(device=device)
        self.graphs: dict[tuple, Step] = {}  # (the function, the sampling mode) -> its replay
        self.windows: dict[int, Tensor] = {}  # a refill's length -> the ids it reads
        self.source: torch.Generator | None = None
        self.busy = False
        self.forward = self.step.forward_at  # compiled by `compile_forward`
        self.uncapturable = False  # a capture failed: every function of this decoder runs eagerly

    def begin(self, model: nn.Module, sampling: tuple, generator: torch.Generator | None) -> None:
        """Ready for a new generation: the model's current weights, the settings `Sampler.set` takes (`sampling`), the
        caller's random state."""
        fresh = DecodeStep(model, self.cache)
        olds, news = _tensors(self.step), _tensors(fresh)
        if [(t.shape, t.dtype) for t in olds] != [(t.shape, t.dtype) for t in news]:
            self.step, self.graphs = fresh, {}  # a layer of the model was replaced: its graphs are captured anew
            self.forward = fresh.forward_at
        else:
            for old, new in zip(olds, news, strict=True):
                if old.data_ptr() != new.data_ptr():
                    old.copy_(new)  # into the tensors the graphs read
        self.cache.reset(0)
        if self.sampler.set(*sampling):
            self.graphs = {key: g for key, g in self.graphs.items() if not key[1].grammar}
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
        self._sample(self.forward(self.ids, at, self.cache.buffers, self.cache.dtype)[:, -1].float(), self.ids)
        self.pos.add_(1)

    def refill(self, model: nn.Module, length: int) -> Step:
        """The static refill of a window of `length` ids: `window(length)` holds them; the cache gets their keys and
        values from slot 0, the ids the next token, `pos` = length."""
        window = self.window(length)

        def refill() -> None:
            self._sample(model(window, kv_cache=self.cache, start=0, last_only=True)[0][:, -1].float(), window[:, -1:])
            self.pos.fill_(length)

        return refill

    def window(self, length: int) -> Tensor:
        if length not in self.windows:
            self.windows[length] = torch.zeros(self.ids.shape[0], length, dtype=torch.long, device=self.ids.device)
        return self.windows[length]

    def _sample(self, logits: Tensor, previous: Tensor) -> None:
        logits = self.sampler.mask(logits, previous)
        self.logits.copy_(logits)
        self.ids.copy_(self.sampler(logits, self.generator))

    def compile_forward(self) -> None:
        """Inductor's kernels for the step's forward, captured under the graph instead of the ops one by one."""
        if self.forward == self.step.forward_at:
            self.forward, self.graphs = torch.compile(self.step.forward_at, dynamic=False), {}

    def sample_refilled(self, logits: Tensor) -> Tensor:
        """Eagerly, the ids drawn from a refill's logits (B, V) (masked already), and the step's inputs set to
        follow them at the cache's position."""
        nxt = self.sampler(logits, self.generator)
        self.ids.copy_(nxt)
        self.pos.fill_(self.cache.position)
        return nxt

    def replay(self, fn: Step | None = None, key: object = "step", capture: Capture | None = None) -> Step:
        """`fn`'s (the step's, by default) replay in this sampling mode, captured on first use; `fn` itself where
        capture failed. `key` names the function among a decoder's graphs."""
        fn, key = fn or self.run, (key, self.sampler.mode)
        if self.uncapturable:
            return fn
        if key not in self.graphs:
            # what the warm-up runs write (the capture itself writes nothing), put back after
            written = (self.ids, self.pos, self.logits, *self.cache.buffers)
            saved, state = [t.clone() for t in written], self.generator.get_state()
            try:
                replay = captured(fn, "sampling", self.generator, capture)
            finally:
                for t, s in zip(written, saved, strict=True):
                    t.copy_(s)
                self.generator.set_state(state)
            if replay is None:  # not captured (said once): a generator the failed capture held is not reused,
                self.generator = torch.Generator(device=self.ids.device)  # nor graphs bound to it
                self.generator.set_state(state)
                self.graphs, self.uncapturable = {}, True
                return fn
            self.graphs[key] = replay
        return self.graphs[key]


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
