"""KoreanCharTokenizer: one id per Unicode character (after NFC), plus `<unk>`.

Design choices:
- Id 0 is `<unk>` (decoded as U+FFFD, so text stays printable), then the characters in code point order: the same
  text always gives the same vocabulary, whatever order it was read in.
- Encoding is one numpy gather over code points: no per-character Python loop on the hot path.
- NFC is told without normalising (`unicodedata.normalize` walks the whole text even when nothing changes, as costly
  on Korean as the encoding): by Unicode's quick-check rule, text whose characters all have combining class 0 and
  NFC_Quick_Check=Yes is NFC; the others are computed once from `unicodedata` and marked in the lookup table.
"""

from __future__ import annotations

import functools
import itertools
import unicodedata
from collections import Counter
from collections.abc import Iterable

import numpy as np

from common.errors import UserError
from tokenizer.base import JsonVocabulary, seen_codes, text_entries, vocabulary_format

UNK_ID = 0
UNK_DECODED = "\ufffd"
FORMAT = "kochar-gpt/char-tokenizer"
MAX_CODE_POINT = 0x10FFFF
ENCODE_SLICE = 1 << 15


def code_points(text: str) -> np.ndarray:
    """The code points of `text` as a uint32 array (no Python loop)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")


def text_from_code_points(cps: np.ndarray) -> str:
    return np.ascontiguousarray(cps, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")


class KoreanCharTokenizer(JsonVocabulary):
    kind = "char"
    format = FORMAT  # the vocabulary file's format name (subclasses with other id layouts name their own)
    described = "character"
    entries = "chars"
    _text_of = staticmethod(text_from_code_points)

    def __init__(self, chars: Iterable[str], added: Iterable[str] = ()):
        chars = sorted(set(chars))
        base = set(chars)
        self.added: list[str] = [c for c in dict.fromkeys(added) if c not in base]
        self._index(chars + self.added)  # characters added by fine-tuning keep the ids after the original ones

    def _index(self, chars: list[str]) -> None:
        """Build the lookup tables for `chars` in id order (id i + 1 is chars[i])."""
        for c in chars:
            if len(c) != 1:
                raise UserError(f"tokenizer vocabulary entry {c!r} is not a single character")
        self.chars: list[str] = chars
        self._cps = np.array([ord(c) for c in chars], dtype=np.uint32)
        # code point -> id (0 = unknown) over all of Unicode: np.zeros allocates pages lazily, so only those used cost
        self._table = np.zeros(MAX_CODE_POINT + 1, dtype=np.int32)
        self._table[self._cps] = np.arange(1, len(chars) + 1, dtype=np.int32)
        self._checked_table: np.ndarray | None = None  # built on the first encode that must check for NFC
        self._decode_codes = np.concatenate([[ord(UNK_DECODED)], self._cps]).astype(np.uint32)

    @classmethod
    def from_chunks(cls, chunks: Iterable[str]) -> KoreanCharTokenizer:
        return cls(map(chr, seen_codes(chunks, code_points)))

    def encode(self, text: str, normalized: bool = False) -> np.ndarray:
        if normalized:
            return self._lookup(text, self._table)
        # Most text is NFC already (but macOS file names and some pasted text): the checked table stores characters
        # that might need NFC (nfc_unsafe_code_points) as -1 - id: one lookup encodes and says if the NFC pass is due.
        ids = self._lookup(text, self._nfc_checked_table())
        if len(ids) and ids.min() < 0:
            ids = self._lookup(unicodedata.normalize("NFC", text), self._table)
        return ids

    def _nfc_checked_table(self) -> np.ndarray:
        if self._checked_table is None:
            table = self._table.copy()
            unsafe = nfc_unsafe_code_points()
            table[unsafe] = -1 - table[unsafe]
            self._checked_table = table
        return self._checked_table

    @staticmethod
    def _lookup(text: str, table: np.ndarray) -> np.ndarray:
        ids = np.empty(len(text), dtype=np.int32)
        # 32k-character slices: one 2 MB temporary per call page-faults for longer than the lookup itself takes
        for i in range(0, len(text), ENCODE_SLICE):
            cps = code_points(text[i : i + ENCODE_SLICE])
            table.take(cps, out=ids[i : i + len(cps)])
        return ids

    def unknown_chars(self, text: str) -> Counter[str]:
        text = unicodedata.normalize("NFC", text)
        cps = code_points(text)
        ids = self.encode(text, normalized=True)
        missing, counts = np.unique(cps[ids == UNK_ID], return_counts=True)
        return Counter({chr(int(c)): int(n) for c, n in zip(missing, counts, strict=True)})

    def token_counts(self, text: str) -> np.ndarray:
        """Always one here."""
        return np.ones(len(code_points(unicodedata.normalize("NFC", text))), dtype=np.int64)

    @classmethod
    def from_dict(cls, d: dict) -> KoreanCharTokenizer:
        d = vocabulary_format(d, cls.format, cls.described)
        return cls(text_entries(d, "chars", single=True), text_entries(d, "added", required=False, single=True))

    def extended(self, chunks: Iterable[str]) -> KoreanCharTokenizer:
        """New characters take the next ids in code point order."""
        seen = seen_codes(chunks, code_points)
        new = sorted(chr(c) for c in seen if not self._table[c])
        return self._grown(new, seen)

    def _grown(self, new: list[str], seen: set[int]) -> KoreanCharTokenizer:
        """This vocabulary plus `new`; `seen` (every code point of the new text) is for subclasses that record it."""
        return type(self)(self._original(), self.added + new)

    def stream_decoder(self) -> CharStreamDecoder:
        """Each id is one whole character."""
        return CharStreamDecoder(self)


class CharStreamDecoder:
    def __init__(self, tokenizer: KoreanCharTokenizer):
        self.tokenizer = tokenizer

    def feed(self, token_id: int) -> str:
        return self.tokenizer.decode([token_id])

    def flush(self) -> str:
        return ""


# Conjoining medials and finals compose with a syllable or initial before them (decomposition() omits Hangul).
HANGUL_COMPOSING = [*range(0x1161, 0x1176), *range(0x11A8, 0x11C3)]
# Combining marks and canonical decompositions live in planes 0-2 and 14 only (3: ideographs, 4-13 unassigned,
# 15-16 private use): scanning these keeps the first encode fast; tests/tokenizer/test_nfc.py checks all of Unicode.
SCANNED = (range(0xD800), range(0xE000, 0x30000), range(0xE0000, 0xF0000))


@functools.cache
def nfc_unsafe_code_points() -> np.ndarray:
    """Sorted code points that may make a text non-NFC (a superset of combining class != 0 or NFC_QC != Yes)."""
    unsafe: set[int] = set(HANGUL_COMPOSING)
    combining, decomposition, normalize = unicodedata.combining, unicodedata.decomposition, unicodedata.normalize
    for cp in itertools.chain(*SCANNED):
        c = chr(cp)
        if combining(c):
            unsafe.add(cp)
        d = decomposition(c)
        if d and not d.startswith("<"):  # canonical mapping: NFC may replace c, or compose its parts
            if normalize("NFC", c) != c:
                unsafe.add(cp)
            unsafe.update(int(part, 16) for part in d.split()[1:])  # can follow a starter and compose with it
    return np.array(sorted(unsafe), dtype=np.uint32)
