"""DataConfig: which text to train on, how it is split and tokenised (the `data:` config group's schema)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common import config_checks as checks
from common.errors import ConfigError
from tokenizer import TOKENIZER_KINDS


@dataclass
class DataConfig:
    path: str | None = None  # a text file, a folder of them or a glob; None = the corpus embedded in this project
    val_fraction: float = 0.1  # the last 10% of the tokens are the validation split
    val_files: Any = None  # None | a count | a list of file names: whole documents held out instead
    cache_dir: str | None = None  # where token caches go; None = .cache/ beside the corpus (or the user cache)
    tokenizer: str = "char"  # char (one token per character) | jamo (a syllable = initial, medial, final)

    def __post_init__(self) -> None:
        checks.number_in("data.val_fraction", self.val_fraction, 0, 1, low_open=True, high_open=True)
        if self.val_files is not None:
            self.val_files = checked_val_files(self.val_files)
        checks.one_of("data.tokenizer", self.tokenizer, TOKENIZER_KINDS)


def checked_val_files(value: Any) -> int | list[str]:
    """`data.val_files` as a positive count or a non-empty list of file names; anything else is one line."""
    from omegaconf import ListConfig

    if isinstance(value, ListConfig):
        value = list(value)
    if isinstance(value, bool) or not isinstance(value, int | list):
        raise ConfigError(
            f"data.val_files={value!r} is invalid: give a count of files (data.val_files=2) or a "
            "list of their names (data.val_files='[a.txt,b.txt]')"
        )
    if isinstance(value, int):
        if value < 1:
            raise ConfigError(f"data.val_files={value} is invalid: hold out at least one file")
        return value
    if not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"data.val_files={value!r} is invalid: a list of file names, at least one")
    return [str(v) for v in value]
