"""What every tokenizer shares: its vocabulary saved as human-readable JSON, and a fingerprint of it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TypeVar

from common.errors import UserError

T = TypeVar("T", bound="JsonVocabulary")


class JsonVocabulary:
    """Subclasses define `to_dict()` and `from_dict()`; saving, loading and fingerprints come from here."""

    def to_dict(self) -> dict:
        raise NotImplementedError

    @classmethod
    def from_dict(cls: type[T], d: dict) -> T:
        raise NotImplementedError

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False, indent=1) + "\n", encoding="utf-8")

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
