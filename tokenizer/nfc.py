"""Telling, without normalising, that a text is NFC already.

`unicodedata.normalize("NFC", text)` walks the whole text even when nothing changes, and on Korean text
that walk costs as much as the encoding lookup itself. By Unicode's quick-check rule, a text whose
characters all have canonical combining class 0 and NFC_Quick_Check=Yes is NFC. The characters outside
that set - combining marks, characters NFC replaces, and characters that can compose with the one before
them (conjoining jungseong/jongseong jamo, some Indic vowel signs) - are computed here once from
`unicodedata`, so they follow the Unicode version of the running Python. Encoders look code points up in a
table anyway: marking these code points in that table makes "is this text NFC?" one comparison per character.
"""

from __future__ import annotations

import functools
import itertools
import unicodedata

import numpy as np

# Conjoining medial vowels and final consonants compose algorithmically with a preceding Hangul syllable or
# initial consonant; unicodedata.decomposition() does not list Hangul syllables, so they are added by hand.
HANGUL_COMPOSING = [*range(0x1161, 0x1176), *range(0x11A8, 0x11C3)]
# Combining marks and canonical decompositions live in planes 0-2 and 14 only: plane 3 holds ideographs,
# planes 4-13 are unassigned, 15-16 are private use (whose properties Unicode never changes). Scanning just
# these keeps the first encode fast; tests/tokenizer/test_nfc.py scans all of Unicode to check the claim.
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

