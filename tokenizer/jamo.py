"""The Hangul-aware tokenizers. KoreanJamoTokenizer: every precomposed Hangul syllable becomes three tokens, initial,
medial and final. KoreanHangulTokenizer: one token per character, and every precomposed syllable always representable.

Design choices (docs/en/tokenizers.md):
- "No final" is a token of its own, so decoding never guesses where a syllable ends; other characters are one each.
- Syllable parts have codes above U+10FFFF, never confused with a character, not even a jamo NFC left uncomposed.
- Any sampled sequence decodes readably: an initial and a medial make an open syllable, a stray part shows as its
  compatibility jamo (ㄱ, ㅏ), a stray "no final" as nothing.
- `hangul` is `char` with all 11,172 syllables first (ids 1.., in code-point order), in the corpus or not: an unseen
  syllable is a token, not `<unk>`, and its id is the same for every corpus, so a model can compose it from its jamo.
- `seen_syllables` records the training text's syllables, so evaluation can split its score into what a `char`
  model could score and what it could not; a vocabulary saved before the record loads with None.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable

import numpy as np

from common.errors import UserError
from tokenizer.base import JsonVocabulary, seen_codes, text_entries, vocabulary_format
from tokenizer.char import UNK_DECODED, UNK_ID, KoreanCharTokenizer, code_points, text_from_code_points

FORMAT = "kochar-gpt/jamo-tokenizer"

SYLLABLE_FIRST, SYLLABLE_LAST = 0xAC00, 0xD7A3
NUM_SYLLABLES = SYLLABLE_LAST - SYLLABLE_FIRST + 1
SYLLABLES = [chr(SYLLABLE_FIRST + i) for i in range(NUM_SYLLABLES)]
_SYLLABLE_SET = frozenset(SYLLABLES)
HANGUL_FORMAT = "kochar-gpt/hangul-tokenizer"
SEEN_KEY = "syllables_seen"
NUM_INITIALS, NUM_MEDIALS, NUM_FINALS = 19, 21, 28  # NUM_FINALS counts "no final" as final 0

# Token codes: a character's code point, or PART_BASE + k for syllable part k.
PART_BASE = 0x110000
INITIAL_BASE = PART_BASE
MEDIAL_BASE = INITIAL_BASE + NUM_INITIALS
FINAL_BASE = MEDIAL_BASE + NUM_MEDIALS
NUM_PARTS = NUM_INITIALS + NUM_MEDIALS + NUM_FINALS

_CONJOINING_L, _CONJOINING_V, _CONJOINING_T = 0x1100, 0x1161, 0x11A7  # final 1 is U+11A8


def _part_tables() -> tuple[list[str], np.ndarray]:
    """(name of each part token, the compatibility jamo each part shows as when it stands alone)."""
    names, shown = [], []
    for base, count, kind, prefix in (
        (_CONJOINING_L, NUM_INITIALS, "L", "HANGUL CHOSEONG "),
        (_CONJOINING_V, NUM_MEDIALS, "V", "HANGUL JUNGSEONG "),
        (_CONJOINING_T, NUM_FINALS, "T", "HANGUL JONGSEONG "),
    ):
        for k in range(count):
            if kind == "T" and k == 0:
                names.append("<T none>")
                shown.append(-1)  # an orphan "no final" has nothing to show
                continue
            jamo = chr(base + k)
            names.append(f"<{kind} {jamo}>")
            # ᄀ (HANGUL CHOSEONG KIYEOK) and ᆨ (HANGUL JONGSEONG KIYEOK) both show as ㄱ (HANGUL LETTER KIYEOK)
            letter = "HANGUL LETTER " + unicodedata.name(jamo).removeprefix(prefix)
            shown.append(ord(unicodedata.lookup(letter)))
    return names, np.array(shown, dtype=np.int64)


PART_NAMES, _PART_SHOWN = _part_tables()
_PART_BY_NAME = {name: PART_BASE + k for k, name in enumerate(PART_NAMES)}


def jamo_codes(text: str) -> np.ndarray:
    """The token codes of NFC `text` (int64): syllables as initial, medial, final; other characters as is."""
    cps = code_points(text).astype(np.int64)
    syl = (cps >= SYLLABLE_FIRST) & (cps <= SYLLABLE_LAST)
    width = np.where(syl, 3, 1)
    start = np.cumsum(width) - width  # where each character's tokens begin
    codes = np.empty(int(width.sum()), dtype=np.int64)
    codes[start[~syl]] = cps[~syl]
    s = cps[syl] - SYLLABLE_FIRST
    at = start[syl]
    codes[at] = INITIAL_BASE + s // (NUM_MEDIALS * NUM_FINALS)
    codes[at + 1] = MEDIAL_BASE + (s // NUM_FINALS) % NUM_MEDIALS
    codes[at + 2] = FINAL_BASE + s % NUM_FINALS
    return codes


def text_from_jamo_codes(codes: np.ndarray) -> str:
    """Inverse of `jamo_codes`, and readable for any sequence of codes."""
    codes = np.asarray(codes, dtype=np.int64)
    n = len(codes)
    if n == 0:
        return ""
    is_l = (codes >= INITIAL_BASE) & (codes < MEDIAL_BASE)
    is_v = (codes >= MEDIAL_BASE) & (codes < FINAL_BASE)
    is_t = (codes >= FINAL_BASE) & (codes < PART_BASE + NUM_PARTS)
    nxt_v = np.zeros(n, dtype=bool)
    nxt_v[:-1] = is_v[1:]
    nxt2_t = np.zeros(n, dtype=bool)
    nxt2_t[:-2] = is_t[2:]
    # A syllable starts at each initial followed by a medial; starts never overlap, so all are found at once.
    open_start = is_l & nxt_v
    closed_start = open_start & nxt2_t
    out = codes.copy()  # characters stay themselves
    consumed = np.zeros(n, dtype=bool)
    consumed[np.flatnonzero(open_start) + 1] = True
    consumed[np.flatnonzero(closed_start) + 2] = True
    part = (codes >= PART_BASE) & ~consumed
    out[part] = _PART_SHOWN[codes[part] - PART_BASE]  # orphan parts (and starts, replaced below)
    starts = np.flatnonzero(open_start)
    final = np.zeros(len(starts), dtype=np.int64)
    closed = closed_start[starts]
    final[closed] = codes[starts[closed] + 2] - FINAL_BASE
    out[starts] = (
        SYLLABLE_FIRST
        + ((codes[starts] - INITIAL_BASE) * NUM_MEDIALS + codes[starts + 1] - MEDIAL_BASE) * NUM_FINALS
        + final
    )
    out[consumed] = -1
    return text_from_code_points(out[out >= 0])


def _token_code(name: str) -> int:
    if name in _PART_BY_NAME:
        return _PART_BY_NAME[name]
    if isinstance(name, str) and len(name) == 1:
        return ord(name)
    raise UserError(f"jamo tokenizer vocabulary entry {name!r} is neither a character nor a jamo part")


def _code_name(code: int) -> str:
    return PART_NAMES[code - PART_BASE] if code >= PART_BASE else chr(code)


class KoreanJamoTokenizer(JsonVocabulary):
    """Id 0 is `<unk>`; ids 1..N are the corpus tokens (characters, then syllable parts) in code order."""

    kind = "jamo"
    format = FORMAT
    entries = "tokens"
    _text_of = staticmethod(text_from_jamo_codes)

    def __init__(self, tokens: Iterable[str], added: Iterable[str] = ()):
        base = sorted({_token_code(name) for name in tokens})
        known = set(base)
        extra = [c for c in dict.fromkeys(_token_code(name) for name in added) if c not in known]
        self._codes = np.array(base + extra, dtype=np.int64)  # tokens added by fine-tuning come last
        self.tokens: list[str] = [_code_name(int(c)) for c in self._codes]
        self.added: list[str] = self.tokens[len(base) :]
        ids = np.arange(1, len(self._codes) + 1, dtype=np.int32)
        is_char = self._codes < PART_BASE
        chars = self._codes[is_char]
        self._char_table = np.zeros(int(chars.max()) + 1 if len(chars) else 1, dtype=np.int32)
        self._char_table[chars] = ids[is_char]
        self._part_table = np.zeros(NUM_PARTS, dtype=np.int32)
        self._part_table[self._codes[~is_char] - PART_BASE] = ids[~is_char]
        self._decode_codes = np.concatenate([[ord(UNK_DECODED)], self._codes]).astype(np.int64)

    @classmethod
    def from_chunks(cls, chunks: Iterable[str]) -> KoreanJamoTokenizer:
        return cls(_code_name(c) for c in seen_codes(chunks, jamo_codes))

    def encode(self, text: str, normalized: bool = False) -> np.ndarray:
        return self._ids(jamo_codes(text if normalized else unicodedata.normalize("NFC", text)))

    def _ids(self, codes: np.ndarray) -> np.ndarray:
        ids = np.zeros(len(codes), dtype=np.int32)
        part = codes >= PART_BASE
        ids[part] = self._part_table[codes[part] - PART_BASE]
        char = ~part & (codes < len(self._char_table))
        ids[char] = self._char_table[codes[char]]
        return ids

    def token_counts(self, text: str) -> np.ndarray:
        """3 for a syllable, else 1."""
        cps = code_points(unicodedata.normalize("NFC", text))
        return np.where((cps >= SYLLABLE_FIRST) & (cps <= SYLLABLE_LAST), 3, 1)

    def unknown_chars(self, text: str) -> Counter[str]:
        text = unicodedata.normalize("NFC", text)
        cps = code_points(text)
        counts = self.token_counts(text)
        unk_tokens = (self.encode(text) == UNK_ID).astype(np.int64)
        per_char = np.add.reduceat(unk_tokens, np.cumsum(counts) - counts) if len(cps) else unk_tokens
        missing, n = np.unique(cps[per_char > 0], return_counts=True)
        return Counter({chr(int(c)): int(k) for c, k in zip(missing, n, strict=True)})

    @classmethod
    def from_dict(cls, d: dict) -> KoreanJamoTokenizer:
        d = vocabulary_format(d, FORMAT, "jamo")
        tokens, added = text_entries(d, "tokens"), text_entries(d, "added", required=False)
        for key, names in (("tokens", tokens), ("added", added)):
            for i, name in enumerate(names):
                if len(name) != 1 and name not in _PART_BY_NAME:
                    raise UserError(
                        f"tokenizer.{key}[{i}] must be a character or a jamo part such as '<L ᄀ>', found {name[:40]!r}"
                    )
        return cls(tokens, added)

    def extended(self, chunks: Iterable[str]) -> KoreanJamoTokenizer:
        """New tokens (characters, or syllable parts never seen) take the next ids."""
        seen = seen_codes(chunks, jamo_codes)
        known = set(self._codes.tolist())
        new = [_code_name(c) for c in sorted(seen - known)]
        return KoreanJamoTokenizer(self._original(), self.added + new)

    def next_token_rules(self) -> tuple[np.ndarray, np.ndarray]:
        """The spelling rules sampling follows, so a model never writes half a syllable: (the state after each id,
        the ids allowed in each state (3, V)). State 0, between characters: anything but a medial or a final; 1,
        after an initial: a medial; 2, after a medial: a final or "no final"."""
        codes = self._decode_codes  # id 0 (<unk>) decodes to a character: state 0
        is_l = (codes >= INITIAL_BASE) & (codes < MEDIAL_BASE)
        is_v = (codes >= MEDIAL_BASE) & (codes < FINAL_BASE)
        is_t = (codes >= FINAL_BASE) & (codes < PART_BASE + NUM_PARTS)
        state = np.where(is_l, 1, np.where(is_v, 2, 0)).astype(np.int64)
        allowed = np.stack([~(is_v | is_t), is_v, is_t])
        allowed[~allowed.any(axis=1)] = True  # a vocabulary with initials but no medials: no rule to follow
        return state, allowed

    def stream_decoder(self) -> JamoStreamDecoder:
        """Each syllable is printed once it is complete."""
        return JamoStreamDecoder(self)


class JamoStreamDecoder:
    """Holds back an initial (and its medial) until the syllable is complete."""

    def __init__(self, tokenizer: KoreanJamoTokenizer):
        self._codes = tokenizer._decode_codes
        self._pending: list[int] = []  # [] or [initial] or [initial, medial]

    def _release(self, extra: list[int]) -> str:
        out = text_from_jamo_codes(np.array(self._pending + extra, dtype=np.int64))
        self._pending = []
        return out

    def feed(self, token_id: int) -> str:
        code = int(self._codes[token_id])
        if INITIAL_BASE <= code < MEDIAL_BASE:
            out = self._release([])
            self._pending = [code]
            return out
        if MEDIAL_BASE <= code < FINAL_BASE and len(self._pending) == 1:
            self._pending.append(code)
            return ""
        return self._release([code])

    def flush(self) -> str:
        return self._release([])


class KoreanHangulTokenizer(KoreanCharTokenizer):
    kind = "hangul"
    format = HANGUL_FORMAT
    described = "Hangul"

    def __init__(self, chars: Iterable[str], added: Iterable[str] = ()):
        chars = set(chars)
        others = sorted(chars - _SYLLABLE_SET)
        self.seen_syllables: frozenset[str] | None = frozenset(chars & _SYLLABLE_SET)
        known = set(others) | _SYLLABLE_SET
        self.added: list[str] = [c for c in dict.fromkeys(added) if c not in known]
        self._index(SYLLABLES + others + self.added)

    def _original(self) -> list[str]:
        """The corpus's characters other than syllables (the syllables are always there)."""
        return self.chars[NUM_SYLLABLES : len(self.chars) - len(self.added)]

    def char_vocabulary(self) -> frozenset[str] | None:
        """Every character a `char` tokenizer of the same text would hold, or None if the record is missing."""
        if self.seen_syllables is None:
            return None
        return frozenset(self.chars[NUM_SYLLABLES:]) | self.seen_syllables

    def to_dict(self) -> dict:
        d = super().to_dict()
        if self.seen_syllables is not None:
            d[SEEN_KEY] = "".join(sorted(self.seen_syllables))
        return d

    @classmethod
    def from_dict(cls, d: dict) -> KoreanHangulTokenizer:
        tok = super().from_dict(d)
        seen = d.get(SEEN_KEY)
        if seen is not None and not isinstance(seen, str):
            raise UserError(f"tokenizer.{SEEN_KEY} must be text, found {type(seen).__name__}")
        tok.seen_syllables = None if seen is None else frozenset(seen) & _SYLLABLE_SET
        return tok

    def _grown(self, new: list[str], seen: set[int]) -> KoreanHangulTokenizer:
        grown = super()._grown(new, seen)
        grown.seen_syllables = (
            None if self.seen_syllables is None else self.seen_syllables | (frozenset(map(chr, seen)) & _SYLLABLE_SET)
        )
        return grown
