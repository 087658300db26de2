"""A model or a batch that cannot fit is refused before it is allocated, in one line that says what would fit.

Design choices:
- A CPU that runs out does not raise: the out-of-memory killer ends the process (and, on a shared machine,
  others). Hence checks before the allocation: the model's from its settings, before it is built; one step's,
  before the first step and before auto dropout's timed steps.
- What the device has: MemAvailable (or a cgroup's limit, v2 or v1, where lower) on the CPU,
  `torch.cuda.mem_get_info` on a GPU.
- The estimate errs low (only what PyTorch must hold), so what fits is never refused; an allocator that does raise
  is turned into the same line, which names a batch that fits with `MARGIN` to spare and the
  `train.grad_accum_steps` that keeps the effective batch, or the settings that make the model smaller.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from common.errors import UserError, close_bars
from model.config import ModelConfig
from model.counts import matrix_parameters

if TYPE_CHECKING:
    from training.settings.config import TrainConfig

GiB = 1 << 30
MARGIN = 3  # a step holds up to ~2.5x the estimate (caches, workspaces, temporaries): a suggested batch leaves room
BLOCK_SAVED = 16  # numbers per token and embedding channel each block keeps for its backward (x, qkv, MLP: ~17)
_OOM_WORDS = ("out of memory", "can't allocate memory", "defaultcpuallocator")
CGROUP_ROOT, PROC_CGROUP = Path("/sys/fs/cgroup"), Path("/proc/self/cgroup")
CGROUP_FILES = (  # controller in /proc/self/cgroup, folder under CGROUP_ROOT, (limit, usage, page cache in memory.stat)
    ("", "", ("memory.max", "memory.current", "file")),  # v2: one hierarchy, its line "0::/path"
    ("memory", "memory", ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_cache")),  # v1
)
V1_UNLIMITED = 1 << 62  # v1 says "no limit" with the largest page-aligned number (9223372036854771712), not "max"


@dataclass(frozen=True)
class StepMemory:
    fixed: int  # bytes whatever the batch: gradients, optimizer state, autocast's weight copies
    per_sequence: int  # bytes of activations per sequence of one micro-batch

    def total(self, batch_size: int) -> int:
        return self.fixed + batch_size * self.per_sequence

    def largest_batch(self, available: int) -> int:
        """The batch to suggest for `available` bytes: the largest whose step fits with `MARGIN` times the estimate,
        or 1 where only the estimate itself fits a sequence (0: not even that)."""
        safe = (available - MARGIN * self.fixed) // max(1, MARGIN * self.per_sequence)
        return max(0, safe, 1 if self.total(1) <= available else 0)


def activation_bytes(c: ModelConfig, context: int, compute_bytes: int, attention_weights: bool) -> int:
    """Bytes of activations one sequence of `context` tokens keeps for the backward pass (a lower bound)."""
    per_token = c.num_blocks * BLOCK_SAVED * c.embedding_size * compute_bytes
    if attention_weights:  # softmax weights (T x T per head), kept by the lecture's heads and SDPA's math path
        per_token += c.num_blocks * c.num_heads * context * compute_bytes
    if c.head == "jamo":  # three small stages, and each syllable's 28 final rows gathered (model/hangul/jamo_head.py)
        per_token += (28 * c.embedding_size) * compute_bytes + 8 * (19 + 399 + 21 + 28)
    else:  # the logits, then their float32 copy and log-softmax in the loss
        per_token += c.vocab_size * (compute_bytes + 8)
    return context * per_token


def estimate(
    model: nn.Module, t: TrainConfig, device: torch.device, dtype: torch.dtype, optimizer_loaded: bool = False
) -> StepMemory:
    """One step's memory still to be allocated once the model is built (see the module docstring);
    `optimizer_loaded`: a resume has loaded the optimizer's state already."""
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return step_memory(model.config, params, t, device, dtype, optimizer_loaded)


def step_memory(
    c: ModelConfig,
    params: int,
    t: TrainConfig,
    device: torch.device,
    dtype: torch.dtype,
    optimizer_loaded: bool = False,
) -> StepMemory:
    """`estimate` for a model of `params` trainable parameters with the settings `c`."""
    low = dtype != torch.float32
    compute_bytes = 2 if low else 4
    states = 0 if optimizer_loaded else (1 if t.optimizer == "muon" else 2)  # Muon: one momentum for matrices
    fixed = params * 4 * (1 + states) + (params * 2 if low else 0)
    materialised = c.attention == "heads" or (device.type == "cpu" and (low or bool(c.dropout)))
    return StepMemory(fixed, activation_bytes(c, c.context_length, compute_bytes, materialised))


def available_bytes(device: torch.device) -> int | None:
    """Bytes the device can still give (None where it does not say: MPS, an unreadable /proc)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    found = [n for n in (_meminfo_available(), _cgroup_room()) if n is not None]
    return min(found) if found else None


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    """The least room under a cgroup memory limit on this process (cgroup v2, or v1's memory controller), in its own
    cgroup or one above it: a limit less what its processes hold (their page cache counts as free: the kernel
    reclaims it)."""
    rooms = [room for folder, files in _cgroup_folders() if (room := _room_in(folder, *files)) is not None]
    return min(rooms) if rooms else None


def _cgroup_folders() -> Iterator[tuple[Path, tuple[str, str, str]]]:
    """Each cgroup folder whose limit binds this process, from its own (named in /proc/self/cgroup) up to the
    mount's top; just the top where its own is not there (a container that mounts its cgroup as the top)."""
    own = {}
    try:
        for line in PROC_CGROUP.read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            own.update(dict.fromkeys(controllers.split(","), path.lstrip("/")))
    except (OSError, ValueError):
        pass
    for controller, top, files in CGROUP_FILES:
        folder = CGROUP_ROOT / top / own.get(controller, "")
        folder = folder if ".." not in folder.parts and folder.is_dir() else CGROUP_ROOT / top
        while folder.is_relative_to(CGROUP_ROOT / top):
            yield folder, files
            folder = folder.parent


def _room_in(folder: Path, limit_file: str, used_file: str, cache_key: str) -> int | None:
    try:
        limit = (folder / limit_file).read_text().strip()
        if limit == "max" or int(limit) >= V1_UNLIMITED:
            return None
        stat = dict(line.split() for line in (folder / "memory.stat").read_text().splitlines())
        used = int((folder / used_file).read_text()) - int(stat.get(cache_key, 0))
        return max(0, int(limit) - used)
    except (OSError, ValueError):
        return None


def _gib(n: int) -> str:
    return f"{n / GiB:.1f} GiB"


def refusal(t: TrainConfig, device: torch.device, need: int | None, available: int | None, fits: int) -> UserError:
    """The one line: what did not fit (the estimate, or the allocator's error where `need` is None), the largest
    batch that fits, and the train.grad_accum_steps that keeps the effective batch."""
    effective = t.batch_size * t.grad_accum_steps
    where = "CPU" if device.type == "cpu" else str(device)
    if need is not None and available is not None:
        what = (
            f"train.batch_size={t.batch_size} does not fit in memory: one step needs about {_gib(need)} and the "
            f"{where} has {_gib(available)} available"
        )
    else:
        what = f"train.batch_size={t.batch_size} ran out of memory in a step (the {where}'s allocator refused it)"
    if fits < 1:
        return UserError(
            f"{what}, and a batch of 1 would not fit either: use a smaller model (model.embedding_size, "
            "model.num_blocks) or a shorter model.context_length"
        )
    accum = math.ceil(effective / fits)
    batch = math.ceil(effective / accum)
    largest = f"the largest batch that fits is about {fits}" if need is not None else "try half the batch"
    return UserError(
        f"{what}; {largest}: train.batch_size={batch} train.grad_accum_steps={accum} trains on "
        f"{batch * accum} sequences per step ({effective} asked for)"
    )


def refuse_unfit_batch(
    model: nn.Module, t: TrainConfig, device: torch.device, dtype: torch.dtype, optimizer_loaded: bool = False
) -> None:
    """One UserError when the estimate of one step exceeds what the device has (where it says)."""
    available = available_bytes(device)
    if available is None:
        return
    memory = estimate(model, t, device, dtype, optimizer_loaded)
    need = memory.total(t.batch_size)
    if need > available:
        raise refusal(t, device, need, available, memory.largest_batch(available))


def refuse_unfit_model(c: ModelConfig, t: TrainConfig, device: torch.device, dtype: torch.dtype) -> None:
    """Before the model is built: one UserError when its weights (and an average of them), their gradients and
    optimizer state and one sequence's step cannot fit in what the device has (where it says)."""
    available = available_bytes(device)
    if available is None:
        return
    params = matrix_parameters(c)
    weights = params * 4 * (2 if t.average != "none" else 1)
    need = weights + step_memory(c, params, t, device, dtype).total(1)
    if need > available:
        raise model_refusal(c, device, need, available)


def model_refusal(c: ModelConfig, device: torch.device, need: int | None, available: int | None) -> UserError:
    """The one line for a model too big to train here: what it needs (or that the allocator refused it), what there
    is, and the settings that make it smaller."""
    where = "CPU" if device.type == "cpu" else str(device)
    shape = (
        f"model.embedding_size={c.embedding_size} model.head_size={c.head_size} model.num_blocks={c.num_blocks} "
        f"model.context_length={c.context_length}"
    )
    what = (
        f"about {_gib(need)}, and the {where} has {_gib(available)} available"
        if need is not None and available is not None
        else f"more than the {where}'s allocator could give"
    )
    size = f"{matrix_parameters(c) / 1e6:,.0f} million parameters"
    return UserError(
        f"the model does not fit in memory: {shape} ({size}) needs, with its gradients, optimizer state "
        f"and one sequence's step, {what}; make it smaller: a lower model.embedding_size, "
        "model.head_size or model.num_blocks, a shorter model.context_length, or model=small"
    )


@contextmanager
def building_fits(c: ModelConfig, t: TrainConfig, device: torch.device, dtype: torch.dtype) -> Iterator[None]:
    """The model built inside: refused before it is allocated when it cannot fit, and an allocator's out-of-memory
    error while it is built turned into the same one line."""
    refuse_unfit_model(c, t, device, dtype)
    try:
        yield
    except RuntimeError as e:
        if not is_out_of_memory(e):
            raise
        raise model_refusal(c, device, None, None) from None


def is_out_of_memory(e: BaseException) -> bool:
    """The allocator's failure: torch.OutOfMemoryError, or a RuntimeError that says so (the CPU's allocator)."""
    return isinstance(e, torch.OutOfMemoryError) or (
        isinstance(e, RuntimeError) and any(w in str(e).lower() for w in _OOM_WORDS)
    )


@contextmanager
def fit_memory(
    model: nn.Module, t: TrainConfig, device: torch.device, dtype: torch.dtype, optimizer_loaded: bool = False
) -> Iterator[None]:
    """Steps inside: refused before they start when one cannot fit; an allocator's out-of-memory error inside
    becomes the same one line (half the batch, twice the accumulation: the estimate was too low to trust)."""
    try:
        refuse_unfit_batch(model, t, device, dtype, optimizer_loaded)
        yield
    except UserError:
        close_bars()
        raise
    except RuntimeError as e:  # torch.OutOfMemoryError is one
        if not is_out_of_memory(e):
            raise
        close_bars()
        raise refusal(t, device, None, None, t.batch_size // 2) from None
