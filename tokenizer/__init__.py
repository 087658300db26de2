"""Tokenizers: text <-> ids. They know nothing of models or files other than their own JSON.

`Tokenizer` is the protocol every kind implements (see `tokenizer.base`); `build_tokenizer` and
`tokenizer_from_dict` pick the kind by name, so callers never branch on it.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

import numpy as np

from common.errors import UserError
from tokenizer.base import StreamDecoder, Tokenizer
from tokenizer.char import UNK_ID, UNK_TOKEN, KoreanCharTokenizer, code_points
from tokenizer.jamo import KoreanJamoTokenizer
from tokenizer.syllable_block import KoreanHangulTokenizer

__all__ = ["KoreanCharTokenizer", "KoreanHangulTokenizer", "KoreanJamoTokenizer", "TOKENIZER_KINDS", "Tokenizer",
           "UNK_ID", "UNK_TOKEN", "StreamDecoder", "build_tokenizer", "tokenizer_from_dict"]

TOKENIZER_KINDS = ("char", "jamo", "hangul")


def build_tokenizer(kind: str, chunks: Iterable[str]) -> Tokenizer:
    """A `kind` tokenizer whose vocabulary is everything in `chunks` (a corpus read piece by piece)."""
    if kind in ("char", "hangul"):
        seen: set[int] = set()
        for chunk in chunks:
            seen.update(np.unique(code_points(unicodedata.normalize("NFC", chunk))).tolist())
        return (KoreanCharTokenizer if kind == "char" else KoreanHangulTokenizer)(chr(c) for c in seen)
    if kind == "jamo":
        return KoreanJamoTokenizer.from_chunks(chunks)
    raise UserError(f"unknown tokenizer kind {kind!r}; set data.tokenizer to one of: {', '.join(TOKENIZER_KINDS)}")


def tokenizer_from_dict(d: dict) -> Tokenizer:
    """Rebuild a tokenizer saved with `to_dict()` (as stored in checkpoints), whatever its kind."""
    if isinstance(d, dict) and d.get("kind") == KoreanJamoTokenizer.kind:
        return KoreanJamoTokenizer.from_dict(d)
    if isinstance(d, dict) and d.get("kind") == KoreanHangulTokenizer.kind:
        return KoreanHangulTokenizer.from_dict(d)
    return KoreanCharTokenizer.from_dict(d)
