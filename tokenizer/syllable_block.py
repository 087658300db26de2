"""KoreanHangulTokenizer: one token per character, and every precomposed Hangul syllable always representable.

Ids: 0 is `<unk>`; 1 to 11,172 are the syllables U+AC00 to U+D7A3 in code-point order, whether or not the
corpus holds them (id = code point - 0xAC00 + 1, so a syllable's initial, medial and final follow from its id
by arithmetic: `syllable_parts`); then the corpus's other characters (Hanja, Latin, digits, punctuation,
whitespace, standalone jamo such as ㅋㅋ) in code-point order; then characters added by fine-tuning.

Design choices:
- It is the character tokenizer with a fixed syllable block in front (encoding, decoding, NFC handling, streaming
  and `extended()` are `char`'s), so a syllable never seen in training is still a token, not `<unk>`.
- The fixed block lets a model compose a syllable from its jamo (`model.embedding=jamo`): the model knows only ids,
  and the ids of syllables are the same for every corpus.
- It records which syllables its training text held (`seen_syllables`, saved as one string under "syllables_seen"),
  so evaluation can split its score into what a `char` model of the same corpus could score and what it could not.
  Fine-tuning adds the syllables of the new text, as `char` would add them to its vocabulary. A vocabulary saved
  before the record existed loads with `seen_syllables = None`.
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

    def _base_chars(self) -> list[str]:
        """The corpus's characters other than syllables (the syllables are always there)."""
        return self.chars[NUM_SYLLABLES: len(self.chars) - len(self.added)]

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
        grown.seen_syllables = None if self.seen_syllables is None else \
            self.seen_syllables | (frozenset(map(chr, seen)) & _SYLLABLE_SET)
        return grown
