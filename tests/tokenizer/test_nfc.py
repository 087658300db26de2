"""The NFC shortcut: a text the quick check calls safe must really be NFC, and encode must equal NFC + lookup."""

import random
import unicodedata

import numpy as np

from tokenizer.char import KoreanCharTokenizer, code_points, nfc_unsafe_code_points

ALL = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]


def test_every_character_that_changes_under_nfc_is_unsafe():
    unsafe = set(nfc_unsafe_code_points().tolist())
    for cp in ALL:
        c = chr(cp)
        if unicodedata.combining(c) or unicodedata.normalize("NFC", c) != c:
            assert cp in unsafe, hex(cp)


def test_safe_characters_never_compose_with_the_character_before():
    # Every safe character after a starter that could begin a composition (Latin, Greek, Cyrillic, Indic,
    # Hangul LV syllable, initial jamo) leaves the pair NFC.
    unsafe = set(nfc_unsafe_code_points().tolist())
    starters = "AaEeOoUu\u0391\u0415\u0413\u0b47\u0dd9\u1100\uac00\u3131"
    for cp in ALL:
        if cp in unsafe:
            continue
        c = chr(cp)
        for s in starters:
            assert unicodedata.is_normalized("NFC", s + c), (s, hex(cp))


def may_need_nfc(text: str) -> bool:
    return bool(np.isin(code_points(text), nfc_unsafe_code_points()).any())


def test_hangul_parts_that_compose_are_unsafe():
    assert may_need_nfc(unicodedata.normalize("NFD", "한국어"))
    assert may_need_nfc("가\u11a8")  # syllable + final consonant composes to 각
    assert not may_need_nfc("한국어 문장입니다. ㅋㅋㅠㅠ abc 漢字 123")
    assert not may_need_nfc("")


def test_encode_equals_nfc_then_lookup_on_mixed_text():
    vocab = "가각나다한국어eé\u0301\u1100\u1161\u11a8ÅAa "
    tok = KoreanCharTokenizer.from_text(vocab)
    pieces = [
        "한국어",
        unicodedata.normalize("NFD", "한국어"),
        "e\u0301",
        "é",
        "\u212b",
        "A\u030a",
        "\u1100\u1161",
        "\u1100\u1161\u11a8",
        "가\u11a8",
        "\u11a8",
        "\u0301",
        "xyz",
        " ",
    ]
    rng = random.Random(0)
    for _ in range(500):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        expected = tok.encode(unicodedata.normalize("NFC", text), normalized=True)
        assert (tok.encode(text) == expected).all(), repr(text)
