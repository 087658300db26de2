"""Text files that are not what they claim end in one UserError line naming the file, the byte offset and the
likely cause (data.text), never in a traceback halfway through tokenising; good files of every supported
encoding, including characters cut by the reader's block edges, are still read."""

from __future__ import annotations

import codecs

import pytest

from common.errors import UserError
from data.corpus import load_corpus
from data.text import detect_encoding, read_text

KO = "밤새 내린 눈이 마당을 덮었다. 할머니는 아궁이에 불을 지피셨다.\n".encode()  # valid UTF-8, 3 bytes per syllable
BOM = codecs.BOM_UTF8
CP949 = "한글 문서입니다.\n".encode("cp949")
BLOCK = 1 << 20  # data.text reads this many bytes at a time


def _error(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(UserError) as info:
        detect_encoding(path)
    message = str(info.value)
    assert "\n" not in message and name in message, message
    with pytest.raises(UserError) as again:  # the same one line from the corpus loader, no traceback
        load_corpus(path, cache_dir=tmp_path / "cache")
    assert str(again.value) == message
    return message


BOM_THEN_BAD = {  # name: (bytes, offset of the first bad byte)
    "bom_ff.txt": (BOM + KO * 3 + b"\xff" + KO, len(BOM + KO * 3)),
    "bom_cp949.txt": (BOM + KO + "겨울 이야기".encode("cp949") + KO, len(BOM + KO)),
    "bom_cut.txt": (BOM + KO * 2 + "끝".encode()[:2], len(BOM + KO * 2)),
    "bom_late.txt": (BOM + KO * (BLOCK // len(KO) + 5) + b"\xc0\xaf", len(BOM + KO * (BLOCK // len(KO) + 5))),
}


@pytest.mark.parametrize("name", BOM_THEN_BAD)
def test_utf8_bom_then_invalid_bytes(tmp_path, name):
    data, offset = BOM_THEN_BAD[name]
    message = _error(tmp_path, name, data)
    assert f"not valid UTF-8 at byte {offset} (after a UTF-8 byte-order mark)" in message
    assert "damaged" in message or "cut short" in message


ODD_UTF16 = {
    "le_odd.txt": codecs.BOM_UTF16_LE + "가을 하늘".encode("utf-16-le") + b"\x00",
    "be_odd.txt": codecs.BOM_UTF16_BE + "가을 하늘이 높다".encode("utf-16-be")[:-1],
    "bom_plus_one.txt": codecs.BOM_UTF16_LE + b"A",
    "big_odd.txt": codecs.BOM_UTF16_LE + ("눈" * 700_000).encode("utf-16-le") + b"\xac",
}


@pytest.mark.parametrize("name", ODD_UTF16)
def test_utf16_with_an_odd_number_of_bytes(tmp_path, name):
    data = ODD_UTF16[name]
    message = _error(tmp_path, name, data)
    assert f"UTF-16 file with an odd number of bytes ({len(data):,})" in message and "cut short" in message


def test_utf16_unpaired_surrogate(tmp_path):
    good = codecs.BOM_UTF16_LE + "바람".encode("utf-16-le")
    message = _error(tmp_path, "surrogate.txt", good + b"\x00\xd8" + "비".encode("utf-16-le"))
    assert f"not valid UTF-16 at byte {len(good)}" in message


BAD_UTF8 = {
    "ff.txt": (KO * 4 + b"\xff" + KO * 4, len(KO * 4)),
    "cp949_line.txt": (KO * 4 + "옛날 옛적에".encode("cp949") + b"\n" + KO * 4, len(KO * 4)),
    "latin1.txt": (KO * 4 + "caf\xe9".encode("latin-1") + KO, len(KO * 4) + 3),
    "cut_short.txt": (KO * 4 + "끝".encode()[:1], len(KO * 4)),
    "past_first_block.txt": (KO * (BLOCK // len(KO) + 3) + b"\xed\xa0\x80" + KO, len(KO * (BLOCK // len(KO) + 3))),
}


@pytest.mark.parametrize("name", BAD_UTF8)
def test_invalid_bytes_in_an_otherwise_utf8_file(tmp_path, name):
    data, offset = BAD_UTF8[name]
    message = _error(tmp_path, name, data)
    assert f"not valid UTF-8 at byte {offset}:" in message
    assert ("cut short" if name == "cut_short.txt" else "damaged or mix encodings") in message


NUL = {
    "nul_first.txt": (b"\x00" + KO, 0),
    "nul_middle.txt": (KO * 2 + b"\x00" + KO, len(KO * 2)),
    "nul_after_bom.txt": (BOM + KO + b"ab\x00", len(BOM + KO) + 2),
    "nul_cp949.txt": (CP949 * 3 + b"\x00\x00", len(CP949 * 3)),
    "nul_late.txt": (KO * (BLOCK // len(KO) + 1) + b"\x00", len(KO * (BLOCK // len(KO) + 1))),
    "nul_utf16.txt": (codecs.BOM_UTF16_BE + "하나 둘".encode("utf-16-be") + b"\x00\x00", 2 + 8),
}


@pytest.mark.parametrize("name", NUL)
def test_nul_bytes_mean_a_binary_file(tmp_path, name):
    data, offset = NUL[name]
    message = _error(tmp_path, name, data)
    assert f"NUL byte at offset {offset}" in message and "binary file, not text" in message


def test_neither_utf8_nor_cp949_names_both_offsets(tmp_path):
    message = _error(tmp_path, "junk.txt", "정상".encode() + b"\xff\xfe\xff" * 50)
    assert "tried UTF-8, UTF-8 with BOM, UTF-16 with BOM, CP949" in message
    assert "not valid UTF-8 at byte 6, nor CP949 at byte 0" in message


def test_good_files_with_characters_across_block_edges_are_read(tmp_path):
    text = "a" * (BLOCK - 1) + "가나다\n"  # the first syllable straddles the first block edge
    cases = {
        "utf8.txt": (text.encode(), "utf-8"),
        "bom.txt": (BOM + ("a" * (BLOCK - 4) + "가나다\n").encode(), "utf-8-sig"),
        # after the BOM, the high surrogate of the emoji ends the first block: the pair spans two blocks
        "utf16.txt": (codecs.BOM_UTF16_LE + ("가" * (BLOCK // 2 - 2) + "😀끝\n").encode("utf-16-le"), "utf-16"),
        "cp949.txt": (("a" * (BLOCK - 1) + "한글\n").encode("cp949"), "cp949"),
    }
    for name, (data, codec) in cases.items():
        (tmp_path / name).write_bytes(data)
        assert detect_encoding(tmp_path / name) == codec, name
        assert read_text(tmp_path / name) == data.decode(codec).replace("\ufeff", ""), name


def test_a_real_cp949_corpus_is_not_called_damaged_utf8(tmp_path, shared_corpus):
    text = read_text(shared_corpus)[:200_000]
    data = text.encode("cp949", errors="ignore")
    (tmp_path / "cp949.txt").write_bytes(data)
    assert detect_encoding(tmp_path / "cp949.txt") == "cp949"
