"""DataConfig: which text to train on, how it is split and tokenised (the `data:` config group's schema)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from common.errors import ConfigError
from tokenizer import TOKENIZER_KINDS


@dataclass
class DataConfig:
    path: str | None = None  # a UTF-8 / CP949 text file; None = the corpus embedded in this project
    val_fraction: float = 0.1  # the last 10% of the tokens are the validation split
    cache_dir: str | None = None  # where token caches go; None = .cache/ beside the corpus (or the user cache)
    tokenizer: str = "char"  # char (one token per character) | jamo (a syllable = initial, medial, final)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.val_fraction) and 0.0 < self.val_fraction < 1.0):
            raise ConfigError(f"data.val_fraction={self.val_fraction} is invalid: it must be in (0, 1)")
        if self.tokenizer not in TOKENIZER_KINDS:
            raise ConfigError(f"data.tokenizer={self.tokenizer} is invalid: use one of {', '.join(TOKENIZER_KINDS)}")
