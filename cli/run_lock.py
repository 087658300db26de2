"""One training per run folder: a lock that the operating system drops when its holder ends.

Design choices:
- `fcntl.flock` on `<run>/.train.lock`: the kernel drops it however its holder dies, so a stale file is taken over.
- `train.py` takes it before Hydra when the command line names the folder: a refused start writes nothing there."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from common.errors import UserError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

LOCK_NAME = ".train.lock"
_held: dict[str, list[int]] = {}  # lock path -> [fd, depth]


class RunLock:
    """Held from creation until `release()` (or the end of a `with` block)."""

    def __init__(self, run_dir: str | os.PathLike | None):
        other_rank = int(os.environ.get("RANK", "0")) > 0  # under torchrun rank 0 holds it for the run
        self.key = _acquire(Path(run_dir)) if run_dir is not None and fcntl is not None and not other_rank else None

    def release(self) -> None:
        key, self.key = self.key, None
        if key is None or key not in _held:
            return
        _held[key][1] -= 1
        if _held[key][1] == 0:
            fd = _held.pop(key)[0]
            Path(key).unlink(missing_ok=True)  # removed while still locked, so no one locks a doomed file
            os.close(fd)

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _holder(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 64).decode("ascii", "replace").strip()
    return text if text.isdigit() else ""


def _acquire(run_dir: Path) -> str:
    path = run_dir / LOCK_NAME
    key = str(path.absolute())
    if key in _held:
        _held[key][1] += 1
        return key
    run_dir.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(fd)
            os.close(fd)
            raise UserError(
                f"another training (process {holder or 'unknown'}) is using {run_dir}; wait for it to "
                "end or stop it, or train into another folder (hydra.run.dir=...)"
            ) from None
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # the file was removed by its last holder between our open and our lock: try again
    stale = _holder(fd)
    if stale and int(stale) != os.getpid():
        print(
            f"note: {run_dir} was locked by process {stale}, which is no longer running; took its lock over",
            file=sys.stderr,
            flush=True,
        )
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[key] = [fd, 1]
    return key


def folder_named(argv: list[str]) -> Path | None:
    """The existing run folder a train.py command line names (`hydra.run.dir`, `train.resume`'s folder), else None."""
    if any(a.startswith("-") for a in argv):
        return None  # flags (--help, -m) run no single training
    found = None
    for arg in argv:
        key, _, value = arg.partition("=")
        value = value.strip("'\"")
        if "${" in value or not value:
            continue
        p = Path(value).expanduser()
        if key == "hydra.run.dir" and p.is_dir():
            found = p
        elif key == "train.resume" and p.exists() and not any(a.startswith("hydra.run.dir=") for a in argv):
            found = p if p.is_dir() else p.parent
    return found
