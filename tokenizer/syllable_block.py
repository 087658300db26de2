"""KoreanHangulTokenizer: one token per character, and every precomposed Hangul syllable always representable.

Design choices:
- `char` with all 11,172 syllables first (ids 1.., in code-point order), in the corpus or not: an unseen syllable is
  a token, not `<unk>`, and its id is the same for every corpus, so a model can compose it from its jamo.
- `seen_syllables` records the training text's syllables, so evaluation can split its score into what a `char`
  model could score and what it could not; a vocabulary saved before the record loads with None.
"""

from __future__ import annotations

from collections.abc import Iterable

from common.errors import UserError
from tokenizer.char import KoreanCharTokenizer

FORMAT = "kochar-gpt/hangul-tokenizer"
SYLLABLE_FIRST, NUM_SYLLABLES = 0xAC00, 11172
SYLLABLES = [chr(SYLLABLE_FIRST + i) for i in range(NUM_SYLLABLES)]
_SYLLABLE_SET = frozenset(SYLLABLES)
SEEN_KEY = "syllables_seen"


class KoreanHangulTokenizer(KoreanCharTokenizer):
    kind = "hangul"
    format = FORMAT
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
