"""Read a text corpus as NFC Unicode whatever its encoding or normalisation.

Accepted: UTF-8, UTF-8 with BOM, UTF-16 with BOM (Windows "Unicode"), CP949 / EUC-KR. Line endings are
normalised to "\\n" so a Windows file and its Unix twin give the same vocabulary and ids. Reading is done
in chunks that end at line boundaries, so a 1 GB file never sits in memory as one Python string.
"""

from __future__ import annotations

import codecs
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from common.errors import UserError

TRIED = "UTF-8, UTF-8 with BOM, UTF-16 with BOM, CP949/EUC-KR"
_SNIFF_BYTES = 1 << 20


def _check_file(path: Path) -> None:
    if not path.exists():
        raise UserError(f"corpus file not found: {path} (set data.path=<your .txt file>)")
    if path.is_dir():
        raise UserError(f"data.path is a directory, not a text file: {path}")
    try:
        with path.open("rb") as f:
            f.read(1)
    except OSError as e:
        raise UserError(f"cannot read corpus file {path}: {e.strerror or e}") from None


def detect_encoding(path: str | Path) -> str:
    """Return the Python codec name to read `path` with, or raise a UserError naming what was tried."""
    path = Path(path)
    _check_file(path)
    with path.open("rb") as f:
        head = f.read(4)
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    for enc in ("utf-8", "cp949"):
        if _decodes_whole_file(path, enc):
            if enc == "cp949" or not _looks_binary(path):
                return enc
            break
    raise UserError(f"{path} is not a text file in a supported encoding (tried {TRIED}); save it as UTF-8")


def _decodes_whole_file(path: Path, enc: str) -> bool:
    dec = codecs.getincrementaldecoder(enc)(errors="strict")
    with path.open("rb") as f:
        try:
            while block := f.read(_SNIFF_BYTES):
                if b"\x00" in block:
                    return False
                dec.decode(block)
            dec.decode(b"", final=True)
        except UnicodeDecodeError:
            return False
    return True


def _looks_binary(path: Path) -> bool:
    """Control characters other than tab/newline/CR/FF in the first MiB mean it is not prose."""
    with path.open("rb") as f:
        block = f.read(_SNIFF_BYTES)
    bad = sum(block.count(bytes([b])) for b in range(32) if b not in (9, 10, 12, 13))
    return bad > max(8, len(block) // 1000)


def normalize(text: str) -> str:
    """NFC and "\\n" line endings: the form every text takes before it meets a tokenizer."""
    return unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))


def iter_text_chunks(path: str | Path, chunk_chars: int = 1 << 22) -> Iterator[str]:
    """Yield the normalised text of `path` in chunks of about `chunk_chars` ending at line breaks.

    Splitting only at line breaks keeps NFC exact: no combining sequence spans two chunks.
    """
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
