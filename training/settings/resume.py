"""What a resumed run takes from its checkpoint, and what from this command line.

Design choices:
- Only what the user typed is an override (train.py records Hydra's `overrides.task`; `model=tiny` or
  `experiment=<name>` type every key their file sets); every other setting is the checkpoint's.
- Settings that fix the shapes, the tokenizer, the validation split or the random streams cannot change: another
  value typed is refused in one line naming the key, the checkpoint's value and the ways on. The rest is applied,
  and `summary` lists what differs in one line; a Python caller without a command line gets its job as given.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

from common.errors import UserError
from training.runner.plan import compile_setting

# Settings a checkpoint cannot honour a change of: every model.* key but these two (they leave the parameters
# as they are; the rest decide shapes or how the weights were made), and these. model.* values are read from
# the weights' own settings.
MODEL_CHANGEABLE = ("model.dropout", "model.attention")
# train.optimizer and train.syllable_rows: the optimizer's state is per optimizer and per parameter shape;
# train.average: an average of one kind cannot go on as another
FIXED_OTHER = (
    "data.tokenizer",
    "data.val_fraction",
    "data.val_files",
    "seed",
    "train.optimizer",
    "train.syllable_rows",
    "train.average",
)
# What a checkpoint written before a key existed was trained with: it resumes with that value, and typing
# another is refused as for any fixed key. (Before train.syllable_rows, every syllable row was trained.)
BEFORE_THE_KEY = {"train.syllable_rows": "all", "train.average": "none"}


def is_fixed(key: str) -> bool:
    return key in FIXED_OTHER or key.startswith("model.") and key not in MODEL_CHANGEABLE


NEVER_INHERITED = ("train.resume", "train.overwrite", "device")  # about this start, not about the run
GROUPS = ("model", "data", "train")
CONFIGS = Path(__file__).resolve().parents[2] / "configs"

_command_line: list[str] | None = None


def record_command_line(overrides: Iterable[str]) -> None:
    """Called by train.py with what the user typed (Hydra's `overrides.task`)."""
    global _command_line
    _command_line = [str(o) for o in overrides]


def typed_command_line() -> set[str] | None:
    """The keys typed on train.py's command line, or None when no command line was recorded (a Python caller)."""
    return None if _command_line is None else typed_keys(_command_line)


def typed_keys(overrides: Iterable[str]) -> set[str]:
    """Dotted keys (or whole groups: `model`) the overrides set; a global group (`experiment=`, `recipe=`) adds
    every key its file, and the files it builds on, set."""
    keys: set[str] = set()
    for override in overrides:
        key, _, value = override.lstrip("+~").partition("=")
        key = key.split("@")[0]
        if key and "." not in key and key not in GROUPS and (CONFIGS / key).is_dir():
            keys |= _group_keys(key, value)
        elif key:
            keys.add(key)
    return keys


def _group_keys(group: str, name: str, depth: int = 0) -> set[str]:
    from omegaconf import OmegaConf

    try:
        spec = OmegaConf.to_container(OmegaConf.load(CONFIGS / group / f"{name}.yaml"))
    except Exception:  # noqa: BLE001 - an unreadable file: assume it may set anything
        return set(GROUPS) | {"seed"}
    keys: set[str] = set()
    for entry in spec.get("defaults", []):
        if isinstance(entry, dict):  # `override /model: tiny` sets the whole model group
            keys |= {str(k).split("/")[-1] for k in entry}
        elif isinstance(entry, str) and entry != "_self_" and depth < 10:  # another file of this group
            keys |= _group_keys(group, entry, depth + 1)
    for section in GROUPS:
        keys |= {f"{section}.{k}" for k in (spec.get(section) or {})}
    return keys | ({"seed"} if "seed" in spec else set())


def _is_typed(key: str, typed: set[str] | None) -> bool:
    return typed is None or key in typed or key.split(".")[0] in typed


def _stored(ckpt, key: str) -> Any:
    """The checkpoint's value of a dotted key (shape keys from the weights' settings; BEFORE_THE_KEY for a
    checkpoint written before the key existed); KeyError if unknown."""
    section, _, name = key.rpartition(".")
    if section == "model" and hasattr(ckpt.model_config, name):
        return getattr(ckpt.model_config, name)
    node = ckpt.config.get(section) if section else ckpt.config
    if not isinstance(node, dict) or name not in node:
        if key in BEFORE_THE_KEY:
            return BEFORE_THE_KEY[key]
        raise KeyError(key)
    return compile_setting(node[name]) if key == "train.compile" else node[name]  # a boolean before auto existed


def value_of(job, key: str) -> Any:
    """The value of a dotted key (`train.lr`, `seed`) in a TrainJob."""
    section, _, name = key.rpartition(".")
    return getattr(getattr(job, section) if section else job, name)


def shown_value(value: Any) -> str:
    """A value as YAML spells it: null, true, false, or the value itself."""
    return "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def _all_keys(job) -> list[str]:
    return [f"{g}.{f.name}" for g in GROUPS for f in fields(getattr(job, g))] + ["seed"]


def apply_checkpoint_settings(job, ckpt, overrides: Iterable[str] | None = None) -> list[str]:
    """Give `job` the checkpoint's settings for every key not typed; refuse a typed change the checkpoint
    cannot honour. Returns the applied overrides that differ from the checkpoint (`key=new (was old)`)."""
    source = _command_line if overrides is None else list(overrides)
    typed = None if source is None else typed_keys(source)
    changed = []
    for key in _all_keys(job):
        if key in NEVER_INHERITED:
            continue
        try:
            old = _stored(ckpt, key)
        except KeyError:  # an older checkpoint without this setting: the command line's value stands
            continue
        if not _is_typed(key, typed) or typed is None and is_fixed(key):
            section, _, name = key.rpartition(".")
            setattr(getattr(job, section) if section else job, name, old)
            continue
        new = value_of(job, key)
        if new is None and key == "model.vocab_size" or new == old:
            continue
        if is_fixed(key):
            raise UserError(
                f"{key}={shown_value(new)} cannot change when resuming: {ckpt.path} was trained with "
                f"{key}={shown_value(old)}; drop the override to continue that run, or start a new run "
                "(without train.resume) to train with it"
            )
        changed.append((_position(key, source), f"{key}={shown_value(new)} (was {old})"))
    job.model = replace(job.model, vocab_size=ckpt.model_config.vocab_size)
    checked_settings(job, ckpt)
    return [text for _, text in sorted(changed, key=lambda c: c[0])]  # in the order they were typed


def checked_settings(job, ckpt) -> None:
    """`job` with its checkpoint's settings, typed and checked as Hydra checks a command line (types, then every
    range): a value in a shape the code never writes (a hand-edited checkpoint) is one UserError naming the key,
    before any work, never an error once training has run."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    schema = OmegaConf.structured(type(job))  # the job's own class: training/settings/config.py's TrainJob
    try:
        checked = OmegaConf.to_object(OmegaConf.merge(schema, asdict(job)))
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", "") or next((k for k in _all_keys(job) if not _merges(schema, job, k)), "config")
        reason = str(e).strip().splitlines()[0]
        raise UserError(
            f"checkpoint {ckpt.path} records an unusable {key} ({reason}); give {key} on the command line, or "
            "start a new run (without train.resume)"
        ) from None
    except UserError as e:
        raise UserError(f"checkpoint {ckpt.path} cannot be resumed with these settings: {e}") from None
    for f in fields(job):
        setattr(job, f.name, getattr(checked, f.name))


def _merges(schema, job, key: str) -> bool:
    """Whether the value of `key` alone merges into the schema (a merge error that names no key: find the key)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    section, _, name = key.rpartition(".")
    try:
        OmegaConf.merge(schema, {section: {name: value_of(job, key)}} if section else {name: value_of(job, key)})
    except OmegaConfBaseException:
        return False
    return True


def _position(key: str, source: list[str] | None) -> int:
    keys = list(typed_keys([o]) for o in source or [])
    return next((i for i, k in enumerate(keys) if key in k or key.split(".")[0] in k), len(keys))


def summary(ckpt, changed: list[str]) -> str:
    """The one line printed when a resumed run starts (and what of the checkpoint's records it could not use)."""
    line = f"resuming {ckpt.path} at step {ckpt.step}"
    line += f"; from this command line: {', '.join(changed)}" if changed else " with the checkpoint's settings"
    if getattr(ckpt, "ignored", ()):
        line += f"; its {' and '.join(ckpt.ignored)}, in a shape this version never writes, is ignored"
    return line
