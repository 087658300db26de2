"""What `data.path` names: one text file, a folder of them, or a glob; and the one text stream they make.

Design choices (docs/en/your-text.md):
- Sorted path order, each real file once, and no walk follows a link to a folder: the same folder gives the same
  stream, and no layout of links makes the walk hang or read a folder twice.
- Each file's size, mtime and inode, recorded when hashed (the cache key), are compared once read: no stale tokens.
- Documents are joined by one blank line, so a file of documents split at its blank lines gives back its text.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from common.atomic_files import file_sha256
from common.errors import UserError
from data.text import iter_text_chunks

TEXT_SUFFIXES = (".txt", ".text", ".md")
GLOB_CHARS = "*?["
DOCUMENT_SEPARATOR = "\n\n"


@dataclass
class CorpusFiles:
    path: Path  # what data.path named (a file, a folder, or the glob as typed, ~ expanded)
    files: list[Path]
    home: Path = field(default=Path("."))  # where a `.cache/` beside the corpus goes
    stamps: dict[Path, tuple[int, int, int]] = field(default_factory=dict)  # file -> (size, mtime, inode) hashed

    @property
    def name(self) -> str:
        """A file-name-safe label for caches: the file's name, the folder's name, or the glob's folder + "glob"."""
        if _is_glob(self.path):
            return f"{self.home.name or 'root'}.glob"
        return self.path.name or "root"

    @property
    def single(self) -> bool:
        return len(self.files) == 1 and self.files[0] == self.path

    def relative(self, file: Path) -> str:
        try:
            return file.relative_to(self.home).as_posix()
        except ValueError:
            return str(file)

    def digest(self) -> str:
        """sha256 of the file itself, or of every file's relative path, size and content hash."""
        if self.single:
            return self._hashed(self.files[0])
        h = hashlib.sha256()
        for f in self.files:
            content = self._hashed(f)
            h.update(f"{self.relative(f)}\0{self.stamps[f][0]}\0{content}\n".encode("utf-8", "surrogateescape"))
        return h.hexdigest()

    def _hashed(self, f: Path) -> str:
        """The content hash of `f`, its stamp recorded; a file that changes while it is hashed is refused."""
        before = _stamp(f)
        try:
            content = file_sha256(f)
        except OSError as e:
            raise _unreadable(f, e) from None
        self.stamps[f] = _unchanged(f, before)
        return content

    def chunks(self) -> Iterator[str]:
        """The normalised text of every file, documents joined by a blank line."""
        return (chunk for _, chunk in self.document_chunks())

    def document_chunks(self) -> Iterator[tuple[int, str]]:
        """(index of the file, a chunk of its text): the stream of `chunks`, each chunk with the document it
        belongs to (the blank line between two documents belongs to the first)."""
        if self.single:
            for chunk in self._read(self.files[0]):
                yield 0, chunk
            return
        previous = None  # the last document that gave any text
        for index, f in enumerate(self.files):
            for text in self._document(f):
                if previous not in (None, index):
                    yield previous, DOCUMENT_SEPARATOR
                previous = index
                yield index, text
        if previous is not None:
            yield previous, "\n"

    def _document(self, f: Path) -> Iterator[str]:
        """The chunks of `f`, its trailing line breaks dropped (none for a file without text)."""
        held: list[str] = []  # the newest chunk with text, and any chunks of bare line breaks after it
        for chunk in self._read(f):
            if held and chunk.strip("\n"):  # more text follows: what is held is not the document's end
                yield "".join(held)
                held = []
            held.append(chunk)
        if last := "".join(held).rstrip("\n"):
            yield last

    def _read(self, f: Path) -> Iterator[str]:
        """The chunks of `f`; one UserError if it vanishes, or differs from what was hashed or first seen."""
        before = self.stamps.get(f) or _stamp(f)
        try:
            yield from iter_text_chunks(f)
        except OSError as e:
            raise _unreadable(f, e) from None
        _unchanged(f, before)


def _stamp(f: Path) -> tuple[int, int, int]:
    try:
        st = f.stat()
    except OSError as e:
        raise _unreadable(f, e) from None
    return st.st_size, st.st_mtime_ns, st.st_ino


def _unchanged(f: Path, before: tuple[int, int, int]) -> tuple[int, int, int]:
    after = _stamp(f)
    if after != before:
        raise UserError(
            f"corpus file {f} changed while it was being read ({before[0]:,} bytes, then {after[0]:,}); "
            "run again once nothing writes to it"
        )
    return after


def _unreadable(f: Path, e: OSError) -> UserError:
    if isinstance(e, FileNotFoundError):
        return UserError(f"corpus file {f} was removed after data.path was scanned; run again")
    return UserError(f"cannot read corpus file {f}: {e.strerror or e}")


def _once(files: list[Path]) -> list[Path]:
    """`files` (sorted) without the later names of a file already listed: each real file is read once."""
    seen, out = set(), []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            out.append(f)
    return out


def _walk_text_files(folder: Path) -> tuple[list[Path], int]:
    """(text files under `folder`, count of other files), hidden entries and linked folders skipped."""
    found, others = [], 0
    for root, dirs, names in os.walk(folder, followlinks=False):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            if name.startswith("."):
                continue
            p = Path(root) / name
            if p.suffix.lower() in TEXT_SUFFIXES and p.is_file():
                found.append(p)
            else:
                others += 1
    return _once(sorted(found)), others


def _is_glob(path: Path) -> bool:
    return any(c in str(path) for c in GLOB_CHARS) and not path.exists()


def _glob_home(pattern: str) -> Path:
    parts = Path(pattern).parts
    fixed = [p for p in parts[: next(i for i, p in enumerate(parts) if any(c in p for c in GLOB_CHARS))]]
    return Path(*fixed) if fixed else Path(".")


def _glob(pattern: str) -> list[Path]:
    """What the pattern matches, sorted: pathlib's `**` never follows a link to a folder (glob.glob's does, and two
    links back to a parent hang it); hidden names only where the pattern names one, as the shell does."""
    home = _glob_home(pattern)
    rest = Path(pattern).parts[len(home.parts) :]
    if rest and rest[-1] == "**":  # glob.glob's `dir/**` is everything below dir
        rest = (*rest, "*")
    hidden = any(p.startswith(".") and p not in (".", "..") for p in rest)
    try:
        matches = sorted(home.glob("/".join(rest)))
    except (OSError, ValueError):
        return []
    return [m for m in matches if hidden or not any(p.startswith(".") for p in m.relative_to(home).parts)]


def corpus_files(path: str | os.PathLike) -> CorpusFiles:
    """The files `data.path` names, in order; every way it names nothing usable is one UserError."""
    p = Path(os.path.expanduser(str(path)))
    if p.is_symlink() and not p.exists():
        raise UserError(f"data.path={path} is a symbolic link to nothing (or a link loop); pass a file or folder")
    if p.is_dir():
        files, others = _walk_text_files(p)
        if not files:
            what = f"{others} file(s), none of them {'/'.join(TEXT_SUFFIXES)}" if others else "nothing"
            raise UserError(
                f"data.path={path} is a folder with no text files: it holds {what}; pass a folder of "
                f"{'/'.join(TEXT_SUFFIXES)} files, a file, or a glob such as '{p}/**/*.txt'"
            )
        return CorpusFiles(p, files, p)
    if _is_glob(p):
        matches = _glob(str(p))
        files = _once([m for m in matches if m.is_file()])
        if not files:
            raise UserError(f"data.path={path} matches no file ({len(matches)} folders matched); check the pattern")
        return CorpusFiles(p, files, _glob_home(str(p)))
    if not p.exists():  # never there: not a file that vanished after the scan
        raise UserError(f"corpus file not found: {path} (set data.path=<your .txt file>)")
    return CorpusFiles(p, [p], p.parent)
