"""What every tokenizer is and shares: the `Tokenizer` protocol, and its vocabulary saved as JSON.

Design choices:
- `Tokenizer` is a `typing.Protocol`, not a base class: code that only uses tokenizers (training,
  generation, evaluation, the token cache) depends on what a tokenizer can do, and a new kind needs no
  import of ours to qualify. It is `runtime_checkable` so tests can assert that each kind conforms.
- The vocabulary is stored as human-readable JSON (`to_dict()`), written atomically so a crash never leaves
  half a vocabulary beside a checkpoint, and fingerprinted (a hash of that JSON) to key token caches.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

from common.atomic_files import atomic_write
from common.errors import UserError

T = TypeVar("T", bound="JsonVocabulary")


class StreamDecoder(Protocol):
    """Turns ids into text one at a time; everything `feed` and `flush` return, joined, is `decode(ids)`."""

    def feed(self, token_id: int) -> str: ...

    def flush(self) -> str: ...


@runtime_checkable
class Tokenizer(Protocol):
    """Text <-> ids. Id 0 is always `<unk>`; ids run from 0 to `vocab_size - 1`.

    Every kind also has the classmethods `from_dict(d)` (the inverse of `to_dict()`, raising a `UserError`
    for a dict that is not its vocabulary) and `load(path)` (the inverse of `save(path)`);
    `tokenizer.tokenizer_from_dict` picks the kind from the dict.
    """

    kind: str  # "char" or "jamo": the value of data.tokenizer that builds it

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str, normalized: bool = False) -> np.ndarray:
        """The ids of `text` (int32); `normalized=True` promises the text is NFC already."""
        ...

    def decode(self, ids: Iterable[int] | np.ndarray) -> str: ...

    def unknown_chars(self, text: str) -> Counter[str]:
        """Characters of `text` that encode (at least partly) to `<unk>`, with their counts."""
        ...

    def token_counts(self, text: str) -> np.ndarray:
        """How many tokens each character of NFC `text` becomes."""
        ...

    def stream_decoder(self) -> StreamDecoder: ...

    def extended(self, chunks: Iterable[str]) -> Tokenizer:
        """This vocabulary plus the tokens of `chunks` it lacks, at the next ids (every old id keeps its
        meaning): how a run fine-tuned on new text (`train.init_from`) gets the characters it never saw."""
        ...

    def to_dict(self) -> dict: ...

    def save(self, path: str | Path) -> None: ...

    def fingerprint(self) -> str:
        """A short hash of the vocabulary: equal fingerprints, equal ids for every text."""
        ...


class JsonVocabulary:
    """Subclasses define `to_dict()` and `from_dict()`; saving, loading and fingerprints come from here."""

    def to_dict(self) -> dict:
        raise NotImplementedError

    @classmethod
    def from_dict(cls: type[T], d: dict) -> T:
        raise NotImplementedError

    def save(self, path: str | Path) -> None:
        atomic_write(path, json.dumps(self.to_dict(), ensure_ascii=False, indent=1) + "\n")

    @classmethod
    def load(cls: type[T], path: str | Path) -> T:
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"cannot read tokenizer vocabulary {path}: {e}") from None
        return cls.from_dict(d)

    def fingerprint(self) -> str:
        """A short hash of the vocabulary, used to key token caches."""
        return hashlib.sha256(json.dumps(self.to_dict(), ensure_ascii=False).encode()).hexdigest()[:16]
