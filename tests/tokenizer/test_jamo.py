"""The jamo tokenizer: exact round trips, unambiguous parts, readable decoding of any ids, streaming."""

import json
import random
import unicodedata

import numpy as np
import pytest

from common.errors import UserError
from data.corpus import load_corpus
from data.text import read_text
from tokenizer import UNK_ID, KoreanCharTokenizer, KoreanJamoTokenizer, build_tokenizer, tokenizer_from_dict
from tokenizer.jamo import NUM_PARTS, PART_NAMES

ALL_SYLLABLES = "".join(chr(c) for c in range(0xAC00, 0xD7A4))
MIXED = "ㅋㅋㅋ 진짜? ㅠㅠ 漢字와 English, 숫자 1234와 😀 이모지! ᄀᆞ (옛한글)\n둘째 줄: 값=3.5%"


@pytest.fixture(scope="module")
def tok() -> KoreanJamoTokenizer:
    return KoreanJamoTokenizer.from_text(ALL_SYLLABLES + MIXED + "ㄱㅏ 世界")


def test_every_syllable_round_trips_as_three_tokens(tok):
    assert len(ALL_SYLLABLES) == 11172
    ids = tok.encode(ALL_SYLLABLES)
    assert len(ids) == 3 * 11172 and ids.dtype == np.int32
    assert tok.decode(ids) == ALL_SYLLABLES
    assert UNK_ID not in ids


def test_parts_match_unicode_decomposition(tok):
    for syllable in ("가", "각", "뷁", "힣", "읽"):
        names = [tok.tokens[i - 1] for i in tok.encode(syllable)]
        nfd = unicodedata.normalize("NFD", syllable)
        assert names[0] == f"<L {nfd[0]}>" and names[1] == f"<V {nfd[1]}>"
        assert names[2] == (f"<T {nfd[2]}>" if len(nfd) == 3 else "<T none>")


def test_compatibility_jamo_and_mixed_text_round_trip(tok):
    for text in (MIXED, "ㅋㅋ", "ㅠㅠ", "ㅋ가ㅏ", "ㄱㅏ", "", "\n\n", ALL_SYLLABLES[::97] + MIXED):
        assert tok.decode(tok.encode(text)) == text
    # ㅋㅋ is two standalone characters, never syllable parts
    ids = tok.encode("ㅋㅋ")
    assert len(ids) == 2 and [tok.tokens[i - 1] for i in ids] == ["ㅋ", "ㅋ"]
    # archaic conjoining jamo that NFC leaves alone are characters too, distinct from the parts of 가
    archaic = tok.encode("ᄀᆞ")
    assert set(archaic.tolist()).isdisjoint(tok.encode("가").tolist())


def test_encoding_is_nfc(tok):
    nfd = unicodedata.normalize("NFD", "한국어 문장")
    assert tok.encode(nfd).tolist() == tok.encode("한국어 문장").tolist()


def test_vocabulary_is_unk_plus_sorted_corpus_tokens():
    tok = KoreanJamoTokenizer.from_text("가 a")
    assert tok.tokens == [" ", "a", "<L ᄀ>", "<V ᅡ>", "<T none>"]
    assert tok.vocab_size == 6
    assert tok.encode("가").tolist() == [3, 4, 5]


def test_unseen_parts_and_characters_are_unknown():
    tok = KoreanJamoTokenizer.from_text("가나다 라")
    # a syllable never seen whose parts were all seen is not unknown: that is the point of jamo
    assert tok.unknown_chars("나가라") == {}
    assert tok.encode("락")[2] == UNK_ID  # final ㄱ never seen
    assert tok.unknown_chars("락 x 락") == {"락": 2, "x": 1}
    assert tok.decode(tok.encode("x")) == "\ufffd"


def test_any_id_sequence_decodes_to_readable_text(tok):
    names = {n: i + 1 for i, n in enumerate(tok.tokens)}
    seq = [
        names["<V ᅡ>"],
        names["<L ᄀ>"],
        names[","],
        names["<L ᄂ>"],
        names["<V ᅡ>"],
        names["<V ᅡ>"],
        names["<T ᆨ>"],
        names["<T none>"],
    ]
    # orphan medial -> ㅏ; initial before a comma -> ㄱ; initial + medial without a final -> open 나;
    # a medial that follows a complete syllable -> ㅏ; orphan final -> ㄱ; orphan "no final" -> nothing
    assert tok.decode(seq) == "ㅏㄱ,나ㅏㄱ"
    rng = np.random.default_rng(0)
    for _ in range(200):
        text = tok.decode(rng.integers(0, tok.vocab_size, size=30))
        assert all(not 0x1100 <= ord(c) <= 0x11FF or c in "ᄀᆞ" for c in text)  # parts never leak out raw


def test_stream_decoder_prints_whole_syllables_and_matches_decode(tok):
    ids = tok.encode("안녕, ㅋㅋ 世界").tolist()
    dec = tok.stream_decoder()
    pieces = [dec.feed(i) for i in ids] + [dec.flush()]
    assert "".join(pieces) == "안녕, ㅋㅋ 世界"
    assert pieces[:6] == ["", "", "안", "", "", "녕"]  # nothing until the syllable is complete
    rng = random.Random(1)
    parts = list(range(tok.vocab_size - NUM_PARTS, tok.vocab_size))
    for _ in range(500):
        seq = [rng.choice(parts) if rng.random() < 0.8 else rng.randrange(tok.vocab_size) for _ in range(12)]
        dec = tok.stream_decoder()
        assert "".join(dec.feed(i) for i in seq) + dec.flush() == tok.decode(seq)


def test_open_syllable_at_the_end_is_flushed(tok):
    ids = tok.encode("가").tolist()[:2]
    dec = tok.stream_decoder()
    assert [dec.feed(i) for i in ids] == ["", ""]
    assert dec.flush() == "가"


def test_persistence_and_dispatch(tmp_path, tok):
    path = tmp_path / "vocab.json"
    tok.save(path)
    d = json.loads(path.read_text(encoding="utf-8"))
    assert d["kind"] == "jamo" and d["format"] == "kochar-gpt/jamo-tokenizer"
    again = KoreanJamoTokenizer.load(path)
    assert again.tokens == tok.tokens and again.fingerprint() == tok.fingerprint()
    assert isinstance(tokenizer_from_dict(d), KoreanJamoTokenizer)
    char = KoreanCharTokenizer.from_text(MIXED)
    assert isinstance(tokenizer_from_dict(char.to_dict()), KoreanCharTokenizer)
    assert char.fingerprint() != KoreanJamoTokenizer.from_text(MIXED).fingerprint()
    with pytest.raises(UserError):
        KoreanJamoTokenizer.from_dict({"format": "kochar-gpt/jamo-tokenizer", "tokens": ["<L nope>"]})
    with pytest.raises(UserError):
        tokenizer_from_dict({"kind": "jamo"})


def test_build_tokenizer_kinds():
    chunks = ["가나\n", "다 ㅋ\n"]
    assert build_tokenizer("jamo", iter(chunks)).tokens == KoreanJamoTokenizer.from_text("".join(chunks)).tokens
    assert build_tokenizer("char", iter(chunks)).chars == sorted(set("".join(chunks)))
    with pytest.raises(UserError, match="data.tokenizer"):
        build_tokenizer("bpe", chunks)


def test_token_counts():
    tok = KoreanJamoTokenizer.from_text("가a")
    assert tok.token_counts("가a😀각").tolist() == [3, 1, 1, 3]
    assert KoreanCharTokenizer.from_text("가").token_counts("가a😀").tolist() == [1, 1, 1]


def test_load_corpus_jamo_counts_characters_not_tokens(small_corpus, tmp_path):
    cache = tmp_path / "cache"
    jamo = load_corpus(small_corpus, cache_dir=cache, tokenizer_kind="jamo")
    char = load_corpus(small_corpus, cache_dir=cache, tokenizer_kind="char")
    text = read_text(small_corpus)
    assert jamo.tokenizer.kind == "jamo" and char.tokenizer.kind == "char"
    assert jamo.num_chars == char.num_chars == len(text)
    assert len(jamo.tokens) == int(jamo.tokenizer.token_counts(text).sum()) > len(char.tokens)
    assert jamo.tokenizer.decode(np.asarray(jamo.tokens)) == text
    assert {p.name.split(".")[-3] for p in cache.glob("*.vocab.json")} == {"char", "jamo"}
    again = load_corpus(small_corpus, cache_dir=cache, tokenizer_kind="jamo")  # from the cache
    assert again.tokenizer.tokens == jamo.tokenizer.tokens and again.num_chars == jamo.num_chars
    with pytest.raises(UserError, match="data.tokenizer"):
        load_corpus(small_corpus, cache_dir=cache, tokenizer_kind="syllable")


def test_part_names_are_unique():
    assert len(set(PART_NAMES)) == NUM_PARTS == 68


def test_real_corpus_round_trip(shared_corpus):
    text = read_text(shared_corpus)
    tok = KoreanJamoTokenizer.from_text(text)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert UNK_ID not in ids
