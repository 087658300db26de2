"""KoreanHangulTokenizer: one token per character, and every precomposed Hangul syllable always representable.

Ids: 0 is `<unk>`; 1 to 11,172 are the syllables U+AC00 to U+D7A3 in code-point order, whether or not the
corpus holds them (id = code point - 0xAC00 + 1, so a syllable's initial, medial and final follow from its id
by arithmetic: `syllable_parts`); then the corpus's other characters (Hanja, Latin, digits, punctuation,
whitespace, standalone jamo such as ㅋㅋ) in code-point order; then characters added by fine-tuning.

Design choices:
- It is the character tokenizer with a fixed syllable block in front: encoding, decoding, NFC handling,
  streaming and `extended()` are the character tokenizer's, so NFC, CP949, BOM and NFD input give the same
  characters as for `char`, and a syllable never seen in training is still a token, not `<unk>`.
- The fixed block is what lets a model compose a syllable from its jamo (`model.embedding=jamo`): the model
  knows only ids, and the ids of syllables are the same for every corpus.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizer.char import KoreanCharTokenizer

FORMAT = "kochar-gpt/hangul-tokenizer"
SYLLABLE_FIRST, NUM_SYLLABLES = 0xAC00, 11172
SYLLABLES = [chr(SYLLABLE_FIRST + i) for i in range(NUM_SYLLABLES)]
_SYLLABLE_SET = frozenset(SYLLABLES)


class KoreanHangulTokenizer(KoreanCharTokenizer):
    """Id 0 is `<unk>`, ids 1..11172 the Hangul syllables, then the corpus's other characters."""

    kind = "hangul"
    format = FORMAT
    described = "Hangul"

    def __init__(self, chars: Iterable[str], added: Iterable[str] = ()):
        others = sorted(set(chars) - _SYLLABLE_SET)
        known = set(others) | _SYLLABLE_SET
        self.added: list[str] = [c for c in dict.fromkeys(added) if c not in known]
        self._index(SYLLABLES + others + self.added)

    def _base_chars(self) -> list[str]:
        """The corpus's characters other than syllables (the syllables are always there)."""
        return self.chars[NUM_SYLLABLES: len(self.chars) - len(self.added)]
