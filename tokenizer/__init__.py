"""Tokenizers: text <-> ids, knowing nothing of models or files but their own JSON; callers pick a kind by name."""

from __future__ import annotations

from collections.abc import Iterable

from common.errors import UserError
from tokenizer.base import UNK_TOKEN as UNK_TOKEN
from tokenizer.base import StreamDecoder as StreamDecoder
from tokenizer.base import Tokenizer
from tokenizer.char import UNK_ID as UNK_ID
from tokenizer.char import KoreanCharTokenizer
from tokenizer.jamo import KoreanHangulTokenizer, KoreanJamoTokenizer

_CLASSES = {cls.kind: cls for cls in (KoreanCharTokenizer, KoreanJamoTokenizer, KoreanHangulTokenizer)}
TOKENIZER_KINDS = tuple(_CLASSES)


def build_tokenizer(kind: str, chunks: Iterable[str]) -> Tokenizer:
    """A `kind` tokenizer whose vocabulary is everything in `chunks` (a corpus read piece by piece)."""
    if kind not in TOKENIZER_KINDS:
        raise UserError(f"unknown tokenizer kind {kind!r}; set data.tokenizer to one of: {', '.join(TOKENIZER_KINDS)}")
    return _CLASSES[kind].from_chunks(chunks)


def tokenizer_from_dict(d: dict) -> Tokenizer:
    """Rebuild a tokenizer saved with `to_dict()`, whatever its kind (`char` unless it says otherwise)."""
    kind = d.get("kind") if isinstance(d, dict) else None
    return next((cls for cls in _CLASSES.values() if cls.kind == kind), KoreanCharTokenizer).from_dict(d)
