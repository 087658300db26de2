"""Settings that cannot act in the run as configured, refused in one line that names the key.

Design choices:
- A lever that silently does nothing is worse than an error for someone comparing runs: a setting given a value of
  its own (neither the schema's default nor the recipe's) while another makes it idle is refused before any work,
  naming both keys and the ways on. `recipe=modern train.optimizer=adamw` runs; a Muon rate typed under AdamW does
  not. The `auto_*` decays and the model's shape switches are not levers of this kind.
- A new run is checked when its config is composed (so the ladder's check of every variant finds these too), the
  context length again once train.init_from fixed the architecture; a resumed run checks only the keys it typed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import MISSING, dataclass, fields
from typing import Any

from common.errors import ConfigError
from training.settings.resume import CONFIGS, shown_value, typed_command_line, value_of


@dataclass(frozen=True)
class Idle:
    key: str  # the setting that would do nothing
    acts: Callable[[Any], bool]  # whether the job as configured lets it act
    other: str  # the key that decides whether it acts
    needs: str  # what that key must be for it to act
    off: tuple = ()  # the key's values that ask for nothing (no warmup, no samples): never idle


def _under(other: str, needs: str, acts: Callable[[Any], bool]) -> Callable[..., Idle]:
    """The rule of a family of keys that act only where `acts` (the job): `rule(key, *off)`."""
    return lambda key, *off: Idle(key, acts, other, needs, off)


_muon = _under("train.optimizer", "train.optimizer=muon", lambda j: j.train.optimizer == "muon")
_scheduled = _under("train.lr_schedule", "train.lr_schedule=cosine", lambda j: j.train.lr_schedule != "constant")
_snapshot = _under(
    "train.snapshot_interval", "train.snapshot_interval above 0", lambda j: j.train.snapshot_interval > 0
)
MUON_KEYS = ("muon_lr", "muon_momentum", "muon_weight_decay", "muon_weight_decay_schedule", "auto_muon_weight_decay")
RULES = (
    *(_muon(f"train.{k}") for k in MUON_KEYS),
    Idle("train.ema_half_life", lambda j: j.train.average == "ema", "train.average", "train.average=ema"),
    Idle("train.swa_start", lambda j: j.train.average == "swa", "train.average", "train.average=swa"),
    Idle("train.average_every", lambda j: j.train.average != "none", "train.average", "train.average=ema or swa"),
    Idle("train.mtp_fade", lambda j: bool(j.train.mtp_weights), "train.mtp_weights", "train.mtp_weights=[...]"),
    _scheduled("train.min_lr"),
    _scheduled("train.lr_decay_steps"),
    _scheduled("train.warmup_steps", 0),
    _snapshot("train.sample_prompts", []),
    _snapshot("train.sample_tokens", 0),
    _snapshot("train.attention_tokens", 0),
    Idle("train.auto_dropout_after", lambda j: j.model.dropout is None, "model.dropout", "model.dropout=null (auto)"),
    Idle("train.init_weights", lambda j: bool(j.train.init_from), "train.init_from", "train.init_from=<run>"),
    Idle("train.max_epochs", lambda j: j.train.max_steps is None, "train.max_steps", "train.max_steps=null"),
    Idle("data.val_fraction", lambda j: j.data.val_files is None, "data.val_files", "data.val_files=null"),
)


def _default(job: Any, key: str) -> Any:
    section, _, name = key.partition(".")
    field = next(f for f in fields(getattr(job, section)) if f.name == name)
    return field.default_factory() if field.default is MISSING else field.default


@functools.cache
def _recipe_values(recipe: str) -> dict[str, Any]:
    """{dotted key: value} of the train and data keys configs/recipe/<recipe>.yaml sets itself."""
    from omegaconf import OmegaConf

    path = CONFIGS / "recipe" / f"{recipe}.yaml"
    spec = OmegaConf.to_container(OmegaConf.load(path)) if path.is_file() else {}
    return {f"{group}.{k}": v for group in ("train", "data") for k, v in (spec.get(group) or {}).items()}


def _chosen(job: Any, key: str) -> bool:
    """Whether `key` holds a value of the user's own: neither the schema's default nor the recipe's."""
    value = value_of(job, key)
    recipe = _recipe_values(str(getattr(job, "recipe", "") or ""))
    return value != _default(job, key) and (key not in recipe or value != recipe[key])


def refuse_idle_settings(job: Any, only: Iterable[str] | None = None, context: bool = True) -> None:
    """One ConfigError for the first setting of `job` (among `only`, when given) that cannot act; `context`: also
    check the MTP targets against model.context_length (False while train.init_from may still change it)."""
    keys = None if only is None else set(only)
    for rule in RULES:
        if keys is not None and rule.key not in keys and rule.key.split(".")[0] not in keys:
            continue
        value, other = shown_value(value_of(job, rule.key)), shown_value(value_of(job, rule.other))
        if _chosen(job, rule.key) and not rule.acts(job) and value_of(job, rule.key) not in rule.off:
            raise ConfigError(
                f"{rule.key}={value} cannot act in this run: it acts only with {rule.needs}, and this "
                f"run has {rule.other}={other}; drop {rule.key}, or set {rule.needs}"
            )
    if keys is None or "train.mtp_weights" in keys or "train" in keys:
        refuse_idle_targets(job.train.mtp_weights, job.model.context_length if context else None)
    if keys is None or "train.warmup_steps" in keys or "train" in keys:
        refuse_long_warmup(job, None, job.train.max_steps)


def refuse_idle_targets(weights: list[float], context_length: int | None) -> None:
    """train.mtp_weights must end in a weight that scores something, within the context: entry i (from 0) scores
    the token i + 2 ahead, which a window of context_length tokens holds only for i + 2 <= context_length."""
    if weights and weights[-1] == 0:
        raise ConfigError(
            f"train.mtp_weights={list(weights)} ends in a 0 weight, which scores nothing (a 0 only "
            "skips a target before a weighted one); drop the trailing zeros"
        )
    if context_length is not None and len(weights) >= context_length:
        raise ConfigError(
            f"train.mtp_weights has {len(weights)} entries, the last scoring the token "
            f"{len(weights) + 1} ahead, but a window of model.context_length={context_length} holds "
            f"targets at most {context_length} ahead, so its last {len(weights) - context_length + 1} "
            f"would score nothing; give at most {context_length - 1} entries (or a longer context)"
        )


def refuse_long_warmup(job: Any, resumed: Any, max_steps: int | None) -> None:
    """A train.warmup_steps of the user's own that does not end before the run does: the rate would never reach
    train.lr, nor decay. Checked when the config is composed (a typed train.max_steps) and again at setup, once
    train.max_epochs has become steps; a resumed run checks it only when its command line types it."""
    t = job.train
    if (
        max_steps is None
        or t.lr_schedule == "constant"
        or t.warmup_steps < max_steps
        or not _chosen(job, "train.warmup_steps")
    ):
        return
    if resumed is not None and "train.warmup_steps" not in (typed_command_line() or ()):
        return
    epochs = (
        f"train.max_epochs={t.max_epochs:g} passes"
        if t.max_epochs is not None
        else "the default passes (train.max_epochs=null)"
    )
    limit = (
        f"train.max_steps={max_steps}"
        if t.max_steps is not None
        else f"step {max_steps} ({epochs} over this training split)"
    )
    raise ConfigError(
        f"train.warmup_steps={t.warmup_steps} does not end before the run does, at {limit}: the "
        f"rate would never reach train.lr={t.lr:g}, nor decay to train.min_lr; give train.warmup_steps "
        f"below {max_steps}, or a longer run"
    )


def refuse_idle_at_start(job: Any, resumed: Any) -> None:
    """At setup, once every setting is final and before the corpus is read: a resumed run's typed keys (its others
    are its checkpoint's), or a train.init_from run's MTP targets against the context the source fixed."""
    if resumed is not None:
        refuse_idle_settings(job, only=typed_command_line() or ())
    elif job.train.init_from:
        refuse_idle_targets(job.train.mtp_weights, job.model.context_length)
