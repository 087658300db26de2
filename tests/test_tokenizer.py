import unicodedata

import numpy as np

from tokenizer import UNK_ID, KoreanCharTokenizer, tokenizer_from_dict

MIXED = "안녕하세요! 訓民正音은 1446년에 반포되었다. Hello, GPT-2 😀 ㅋㅋㅋ ㅠㅠ\n\t끝."


def test_round_trip_mixed_text():
    tok = KoreanCharTokenizer.from_text(MIXED)
    ids = tok.encode(MIXED)
    assert ids.dtype == np.int32 and len(ids) == len(MIXED)
    assert tok.decode(ids) == MIXED
    assert tok.decode(ids.tolist()) == MIXED
    assert tok.vocab_size == len(set(MIXED)) + 1


def test_vocabulary_is_sorted_characters_plus_unk():
    tok = KoreanCharTokenizer.from_text("다나가 가나")
    assert tok.chars == sorted(set("다나가 가나"))
    assert tok.encode("가")[0] == 1 + tok.chars.index("가")
    assert UNK_ID == 0


def test_nfd_input_gives_nfc_ids():
    nfc = "한글 자모와 음절"
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfd != nfc
    tok = KoreanCharTokenizer.from_text(nfd)
    assert tok.chars == sorted(set(nfc))
    assert (tok.encode(nfd) == tok.encode(nfc)).all()


def test_unknown_characters_are_counted_not_raised():
    tok = KoreanCharTokenizer.from_text("가나다")
    ids = tok.encode("가😀나😀라")
    assert ids.tolist()[1] == UNK_ID and (ids == UNK_ID).sum() == 3
    assert tok.unknown_chars("가😀나😀라") == {"😀": 2, "라": 1}
    assert tok.decode(ids) == "가\ufffd나\ufffd\ufffd"


def test_save_load_json_round_trip(tmp_path):
    tok = KoreanCharTokenizer.from_text(MIXED)
    path = tmp_path / "vocab.json"
    tok.save(path)
    assert "안" in path.read_text(encoding="utf-8")  # human-readable, not \\u escapes
    again = KoreanCharTokenizer.load(path)
    assert again.chars == tok.chars
    assert (again.encode(MIXED) == tok.encode(MIXED)).all()
    assert tokenizer_from_dict(tok.to_dict()).chars == tok.chars
    assert again.fingerprint() == tok.fingerprint()


def test_stream_decoder_emits_each_character():
    tok = KoreanCharTokenizer.from_text(MIXED)
    dec = tok.stream_decoder()
    assert "".join(dec.feed(int(i)) for i in tok.encode(MIXED)) + dec.flush() == MIXED


def test_encodes_the_shared_corpus(shared_corpus):
    text = unicodedata.normalize("NFC", shared_corpus.read_text(encoding="utf-8"))
    tok = KoreanCharTokenizer.from_text(text)
    ids = tok.encode(text)
    assert len(ids) == len(text) and not (ids == UNK_ID).any()
    assert tok.decode(ids) == text


def test_prenormalized_encoding_matches_for_nfc_text():
    tok = KoreanCharTokenizer.from_text(MIXED)
    long = MIXED * 3000  # spans several encode slices
    assert (tok.encode(long, normalized=True) == tok.encode(long)).all()
    assert tok.decode(tok.encode(long, normalized=True)) == long
