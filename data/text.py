"""Read a text corpus as NFC Unicode whatever its encoding (docs/en/corpora.md).

Design choices:
- Without a BOM, UTF-8 if all of it decodes, else CP949; a NUL byte marks a binary file (or BOM-less UTF-16).
- The whole file is checked before use: a bad byte is one UserError naming the file, offset and likely cause.
- A file mostly valid UTF-8 around its first bad byte is damaged UTF-8, not CP949 (whose Korean is invalid UTF-8).
- Only a regular file is read: the text is read more than once, and a pipe without a writer would block for ever.
"""

from __future__ import annotations

import codecs
import stat
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from common.errors import UserError

TRIED = "UTF-8, UTF-8 with BOM, UTF-16 with BOM, CP949/EUC-KR"
_BLOCK = 1 << 20  # bytes decoded at a time: bounded memory whatever the file size (even, for UTF-16)
_MAX_CHAR_BYTES = 8  # a decode error this close to a block's end may be a character cut by the block edge


_NOT_REGULAR = {
    stat.S_IFIFO: "a named pipe or a process substitution such as <(...)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _check_file(path: Path) -> None:
    if not path.exists():
        raise UserError(f"corpus file not found: {path} (set data.path=<your .txt file>)")
    if path.is_dir():
        raise UserError(f"data.path is a directory, not a text file: {path}")
    mode = path.stat().st_mode
    if not stat.S_ISREG(mode):
        what = _NOT_REGULAR.get(stat.S_IFMT(mode), "not a regular file")
        raise UserError(
            f"{path} is {what}, not a regular file: a corpus is read more than once (checked, hashed, "
            "then tokenised), which a stream cannot be; save the text to a file first "
            "(command > corpus.txt)"
        )
    try:
        with path.open("rb") as f:
            f.read(1)
    except OSError as e:
        raise UserError(f"cannot read corpus file {path}: {e.strerror or e}") from None


def detect_encoding(path: str | Path) -> str:
    """Return the Python codec name to read `path` with, or raise a UserError naming the first bad byte."""
    path = Path(path)
    _check_file(path)
    with path.open("rb") as f:
        head = f.read(4)
    if head.startswith(codecs.BOM_UTF8):
        _raise_if_bad(path, _scan(path, "utf-8", len(codecs.BOM_UTF8)), "UTF-8", " (after a UTF-8 byte-order mark)")
        return "utf-8-sig"
    for bom, codec in ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")):
        if head.startswith(bom):
            _check_utf16(path, codec)
            return "utf-16"
    bad_utf8 = _scan(path, "utf-8")
    if bad_utf8 is None:
        if _looks_binary(path):
            raise UserError(f"{path} holds control characters, not text (tried {TRIED}); pass a text file")
        return "utf-8"
    if bad_utf8[1] == "NUL" or _mostly_utf8(path, bad_utf8[0]):
        _raise_if_bad(path, bad_utf8, "UTF-8", "")
    bad_cp949 = _scan(path, "cp949")
    if bad_cp949 is None:
        return "cp949"
    if bad_cp949[1] == "NUL":
        _raise_if_bad(path, bad_cp949, "CP949", "")
    raise UserError(
        f"{path} is not text in a supported encoding (tried {TRIED}): not valid UTF-8 at byte "
        f"{bad_utf8[0]}, nor CP949 at byte {bad_cp949[0]}; save it as UTF-8"
    )


def _scan(path: Path, codec: str, start: int = 0, unit: int = 1) -> tuple[int, str] | None:
    """(offset, reason) of the first byte from `start` that is not `codec` text or is NUL (reason "NUL"),
    or None when the whole file decodes. `unit` is the code unit size: 2 for UTF-16."""
    pos, carry = start, b""
    with path.open("rb") as f:
        f.seek(start)
        while True:
            block = f.read(_BLOCK)
            data = carry + block
            nul = _first_nul(data, unit)
            try:
                data.decode(codec)
                bad = None
            except UnicodeDecodeError as e:
                bad = e
            if nul >= 0 and (bad is None or nul < bad.start):
                return pos + nul, "NUL"
            if bad is None:
                carry, pos = b"", pos + len(data)
            elif block and bad.end == len(data) and len(data) - bad.start < _MAX_CHAR_BYTES:
                carry, pos = data[bad.start :], pos + bad.start  # a character cut by the block edge: read on
            else:
                return pos + bad.start, bad.reason
            if not block:
                return None


def _first_nul(data: bytes, unit: int) -> int:
    if unit == 1:
        return data.find(b"\x00")
    hits = np.flatnonzero(np.frombuffer(data, dtype=np.uint16, count=len(data) // 2) == 0)
    return int(hits[0]) * 2 if len(hits) else -1


def _check_utf16(path: Path, codec: str) -> None:
    size = path.stat().st_size
    if size % 2:
        raise UserError(
            f"{path} is a UTF-16 file with an odd number of bytes ({size:,}): it is cut short or "
            "damaged; copy it again or re-save it as UTF-8"
        )
    _raise_if_bad(path, _scan(path, codec, 2, unit=2), "UTF-16", " (in UTF-16 text)")


def _raise_if_bad(path: Path, bad: tuple[int, str] | None, encoding: str, where: str) -> None:
    if bad is None:
        return
    offset, reason = bad
    if reason == "NUL":
        raise UserError(
            f"{path} has a NUL byte at offset {offset}{where}: this looks like a binary file, not text "
            f"(tried {TRIED}); pass a text file"
        )
    if any(word in reason for word in ("end of data", "incomplete", "truncated")):
        cause = "the file ends in the middle of a character, so it is cut short"
    else:
        cause = "the file may be damaged or mix encodings"
    raise UserError(
        f"{path} is not valid {encoding} at byte {offset}{where}: {cause}; copy it again or re-save it as {encoding}"
    )


def _mostly_utf8(path: Path, offset: int) -> bool:
    """Whether the MiB on either side of the first bad byte holds more valid non-ASCII UTF-8 characters than
    invalid bytes: then the file is UTF-8 with damage, not another encoding."""
    start = max(0, offset - _BLOCK)
    with path.open("rb") as f:
        f.seek(start)
        data = f.read(offset - start + _BLOCK)
    text = data.decode("utf-8", errors="surrogateescape")  # each invalid byte becomes one U+DC80..U+DCFF
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    invalid = int(np.count_nonzero((cps >= 0xDC80) & (cps <= 0xDCFF)))
    return int(np.count_nonzero(cps >= 0x80)) - invalid > invalid


_NOT_CONTROL = bytes(b for b in range(256) if b >= 32 or b in (9, 10, 12, 13))


def _looks_binary(path: Path) -> bool:
    """Control characters other than tab/newline/CR/FF in the first MiB mean it is not prose."""
    with path.open("rb") as f:
        block = f.read(_BLOCK)
    bad = len(block.translate(None, _NOT_CONTROL))  # one pass: delete every byte that is not a control
    return bad > max(8, len(block) // 1000)


def normalize(text: str) -> str:
    """NFC and "\\n" line endings: the form every text takes before it meets a tokenizer."""
    return unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))


def iter_text_chunks(path: str | Path, chunk_chars: int = 1 << 22) -> Iterator[str]:
    """The normalised text of `path` in chunks of about `chunk_chars` ending at line breaks, so NFC stays exact."""
    path = Path(path)
    enc = detect_encoding(path)
    buf: list[str] = []
    size = 0
    with path.open("r", encoding=enc, newline="") as f:
        for line in f:
            buf.append(line)
            size += len(line)
            if size >= chunk_chars and line.endswith(("\n", "\r")):
                yield normalize("".join(buf))
                buf, size = [], 0
    if buf:
        yield normalize("".join(buf))


def read_text(path: str | Path) -> str:
    """The whole normalised text of `path` (for small files: prompts, tests, evaluation)."""
    return "".join(iter_text_chunks(path))
