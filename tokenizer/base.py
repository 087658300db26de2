"""What every tokenizer is and shares: the `Tokenizer` protocol, and its vocabulary saved as JSON.

Design choices:
- A `typing.Protocol`, not a base class: users depend on what a tokenizer does, and a new kind imports nothing of
  ours to qualify (`runtime_checkable`, so tests can assert it).
- The vocabulary is readable JSON, written atomically, and its hash (`fingerprint`) keys the token caches.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

from common.atomic_files import atomic_write
from common.errors import UserError

T = TypeVar("T", bound="JsonVocabulary")
UNK_TOKEN = "<unk>"


class StreamDecoder(Protocol):
    """Turns ids into text one at a time; everything `feed` and `flush` return, joined, is `decode(ids)`."""

    def feed(self, token_id: int) -> str: ...

    def flush(self) -> str: ...


@runtime_checkable
class Tokenizer(Protocol):
    """Text <-> ids; id 0 is always `<unk>`. Every kind also has the classmethods `from_dict(d)` (the inverse of
    `to_dict()`; a UserError for a dict that is not its vocabulary) and `load(path)`."""

    kind: str  # the value of data.tokenizer that builds it

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str, normalized: bool = False) -> np.ndarray:
        """The ids of `text` (int32); `normalized=True` promises the text is NFC already."""

    def decode(self, ids: Iterable[int] | np.ndarray) -> str: ...

    def unknown_chars(self, text: str) -> Counter[str]:
        """Characters of `text` that encode (at least partly) to `<unk>`, with their counts."""

    def token_counts(self, text: str) -> np.ndarray:
        """How many tokens each character of NFC `text` becomes."""

    def stream_decoder(self) -> StreamDecoder: ...

    def extended(self, chunks: Iterable[str]) -> Tokenizer:
        """This vocabulary plus the tokens of `chunks` it lacks, at the next ids (every old id keeps its
        meaning): how a run fine-tuned on new text (`train.init_from`) gets the characters it never saw."""

    def to_dict(self) -> dict: ...

    def save(self, path: str | Path) -> None: ...

    def fingerprint(self) -> str:
        """A short hash of the vocabulary: equal fingerprints, equal ids for every text."""


def vocabulary_format(d: object, expected: str, described: str) -> dict:
    """`d` itself when it is a vocabulary of the format `expected`; else one UserError saying what it is."""
    if not isinstance(d, dict):
        raise UserError(f"not a kochar-gpt {described} tokenizer vocabulary (a JSON {type(d).__name__}, not an object)")
    if d.get("format") != expected:
        found = d.get("format")
        raise UserError(
            f"not a kochar-gpt {described} tokenizer vocabulary (tokenizer.format is "
            f"{str(found)[:60]!r}, not {expected})"
        )
    return d


def text_entries(d: dict, key: str, required: bool = True, single: bool = False) -> list[str]:
    """`d[key]` as a list of strings (one character each, with `single`); else one UserError naming the entry."""
    if key not in d and not required:
        return []
    value = d.get(key)
    if not isinstance(value, list):
        found = "missing" if key not in d else type(value).__name__
        raise UserError(f"tokenizer.{key} must be a JSON list of text, found {found}")
    for i, entry in enumerate(value):
        if not isinstance(entry, str) or single and len(entry) != 1:
            what = f"{type(entry).__name__} {str(entry)[:40]!r}" if not isinstance(entry, str) else repr(entry[:40])
            need = "a single character" if single else "text"
            raise UserError(f"tokenizer.{key}[{i}] must be {need}, found {what}")
    return value


def seen_codes(chunks: Iterable[str], codes_of: Callable[[str], np.ndarray]) -> set[int]:
    """Every code `codes_of` finds in the NFC text of `chunks` (a corpus read piece by piece)."""
    seen: set[int] = set()
    for chunk in chunks:
        seen.update(np.unique(codes_of(unicodedata.normalize("NFC", chunk))).tolist())
    return seen


class JsonVocabulary:
    """What kinds share; subclasses define `from_dict()`, `from_chunks()`, `format`, `entries` (the key of the list of
    what ids stand for, and the attribute holding it), `_decode_codes` (the code each id decodes to) and `_text_of`
    (the text of such codes)."""

    @classmethod
    def from_text(cls: type[T], text: str) -> T:
        return cls.from_chunks([text])

    @property
    def vocab_size(self) -> int:
        return len(self._decode_codes)

    def decode(self, ids: Iterable[int] | np.ndarray) -> str:
        arr = np.asarray(ids if not hasattr(ids, "tolist") else ids.tolist(), dtype=np.int64).reshape(-1)
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
            raise ValueError(f"token id out of range 0..{self.vocab_size - 1}")
        return self._text_of(self._decode_codes[arr])

    def _original(self) -> list[str]:
        """The entries the vocabulary was built from (not those added by fine-tuning)."""
        entries = getattr(self, self.entries)
        return entries[: len(entries) - len(self.added)]

    def to_dict(self) -> dict:
        d = {"format": self.format, "version": 1, "kind": self.kind, "unk": UNK_TOKEN, self.entries: self._original()}
        return {**d, "added": self.added} if self.added else d

    def save(self, path: str | Path) -> None:
        atomic_write(path, json.dumps(self.to_dict(), ensure_ascii=False, indent=1) + "\n")

    @classmethod
    def load(cls: type[T], path: str | Path) -> T:
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"cannot read tokenizer vocabulary {path}: {e}") from None
        try:
            return cls.from_dict(d)
        except UserError as e:
            raise UserError(f"{path}: {e}") from None

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), ensure_ascii=False).encode()).hexdigest()[:16]
