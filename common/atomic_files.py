"""Files written whole or not at all, and the user's cache folder.

Design choices:
- `atomic_write` and `atomic_rename` are the project's only `os.replace`: a temp file in the target's folder (never
  across file systems), fsynced, renamed, the folder fsynced: a crash or power cut leaves the old file or the new.
- Temp files carry the writer's pid, so a killed process's leftovers can be told from a live writer's.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import BinaryIO

Writer = Callable[[BinaryIO], None]


def atomic_write(path: str | os.PathLike, data: bytes | str | Iterable[bytes] | Writer) -> None:
    """Replace `path` with `data` (bytes, UTF-8 text, byte chunks, or a function writing a binary file) atomically."""
    path = Path(path)
    remove_stale_temps(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            if isinstance(data, str):
                f.write(data.encode("utf-8"))
            elif isinstance(data, (bytes, bytearray, memoryview)):
                f.write(data)
            elif callable(data):
                data(f)
            else:
                f.writelines(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_folder(path.parent)


def atomic_rename(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Give the complete file `src` the name `dst` in one step a crash cannot leave half done (one file system)."""
    os.replace(src, dst)
    _fsync_folder(Path(dst).parent)


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # some file systems cannot fsync a folder; the rename is still atomic
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def remove_stale_temps(path: Path) -> None:
    """Delete `.name.<pid>.tmp` files of `path` left by processes killed mid-write (a whole file's size each)."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 : -len(".tmp")]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)  # still running (another writer): leave its file alone
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, read in blocks (a corpus never sits in memory whole)."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        while block := f.read(1 << 24):
            h.update(block)
    return h.hexdigest()


def user_cache_dir(*parts: str) -> Path:
    """`$XDG_CACHE_HOME/kochar-gpt/<parts>` (default `~/.cache/...`): derived files with no writable folder given."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base.joinpath("kochar-gpt", *parts)
