"""Telling, without normalising, that a text is NFC already.

`unicodedata.normalize` walks the whole text even when nothing changes, as costly on Korean as the encoding. By
Unicode's quick-check rule, text whose characters all have combining class 0 and NFC_Quick_Check=Yes is NFC: the
others are computed once from `unicodedata` (its Unicode version) and marked in the encoder's lookup table.
"""

from __future__ import annotations

import functools
import itertools
import unicodedata

import numpy as np

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
