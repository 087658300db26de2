import unicodedata

import numpy as np
import pytest

from tokenizer import UNK_ID, KoreanCharTokenizer, KoreanJamoTokenizer, Tokenizer, build_tokenizer, tokenizer_from_dict

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


@pytest.mark.parametrize("cls", [KoreanCharTokenizer, KoreanJamoTokenizer])
def test_every_kind_implements_the_tokenizer_protocol(cls, tmp_path):
    tok: Tokenizer = cls.from_text(MIXED)  # a static check too: mypy/pyright flag a kind that does not conform
    assert isinstance(tok, Tokenizer)
    assert isinstance(build_tokenizer(tok.kind, [MIXED]), Tokenizer)
    assert not isinstance(object(), Tokenizer) and not isinstance(tok.to_dict(), Tokenizer)
    tok.save(tmp_path / "v.json")
    again = cls.load(tmp_path / "v.json")
    assert again.fingerprint() == tok.fingerprint() == cls.from_dict(tok.to_dict()).fingerprint()
    assert [p.name for p in tmp_path.iterdir()] == ["v.json"]  # saved atomically: no temp file left
    decoder = tok.stream_decoder()
    ids = tok.encode(MIXED)
    assert "".join(decoder.feed(int(i)) for i in ids) + decoder.flush() == tok.decode(ids) == MIXED


class _ByteTokenizer:
    """A kind defined outside the package: it qualifies by what it can do, not by inheritance."""

    kind = "byte"
    vocab_size = 257

    def encode(self, text, normalized=False):
        return np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int32) + 1

    def decode(self, ids):
        return bytes(int(i) - 1 for i in ids).decode()

    def unknown_chars(self, text):
        return {}

    def token_counts(self, text):
        return np.array([len(c.encode()) for c in text])

    def stream_decoder(self):
        raise NotImplementedError

    def extended(self, chunks):
        return self

    def to_dict(self):
        return {"kind": self.kind}

    def save(self, path):
        pass

    def fingerprint(self):
        return "byte"


def test_the_protocol_is_structural():
    assert isinstance(_ByteTokenizer(), Tokenizer)
    incomplete = type("Incomplete", (), {k: v for k, v in vars(_ByteTokenizer).items() if k != "fingerprint"})
    assert not isinstance(incomplete(), Tokenizer)
