"""Files written whole or not at all, and the user's cache folder.

Design choices:
- `atomic_write` is the project's one write-to-temp-then-rename: a hidden temp file in the target's folder (so the
  rename never crosses file systems) is fsynced, `os.replace`d over the target, and the folder fsynced so the
  rename survives a power cut: a crash or Ctrl-C leaves the old file or the new one, never half of one.
  `atomic_rename` is the same rename for a file written elsewhere in full (a download's `.part`); the two are the
  only places in the project that call `os.replace`.
- Temp files carry the writer's pid, so files left by a killed process can be told from a live writer's.
- `user_cache_dir` is the one answer to "where do derived files go when no folder was given".
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
    """Replace `path` with `data` (bytes, UTF-8 text, an iterable of byte chunks, or a function that writes
    to a binary file object) atomically."""
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
    """Give the complete file `src` the name `dst` (replacing any file there) in one step that a crash cannot
    leave half done; both must be in the same folder or at least on the same file system."""
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
        pid = tmp.name[len(path.name) + 2:-len(".tmp")]
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
    """`$XDG_CACHE_HOME/kochar-gpt/<parts>` (default `~/.cache/kochar-gpt/<parts>`): where derived files go
    when no folder was given and the one beside the input is read-only."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base.joinpath("kochar-gpt", *parts)
