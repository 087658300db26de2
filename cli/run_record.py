"""The run's recorded settings (Hydra's `.hydra/` files in the run folder) put back when a start saved nothing.

Design choices:
- Hydra writes `.hydra/` before our code runs: a resume that saves nothing would leave its overrides as the settings
  of checkpoints it never wrote (docs/en/training.md), so `train.py` reads the record before Hydra starts.
- A `*.pt` with a new (inode, mtime, size) is a save: saves are atomic, renames keep identity, the lock bars others."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from common.atomic_files import atomic_write

RECORD = ".hydra"


def _checkpoints(folder: Path) -> set[tuple[int, int, int]]:
    found = set()
    for p in folder.glob("*.pt"):
        try:
            st = p.stat()
        except OSError:
            continue
        found.add((st.st_ino, st.st_mtime_ns, st.st_size))
    return found


class RecordedSettings:
    """The `.hydra/` files of `folder` as they are now, to put back with `restore_unless_saved`."""

    def __init__(self, folder: str | os.PathLike | None):
        self.folder = Path(folder) if folder is not None and os.environ.get("RANK", "0") == "0" else None
        record = self.folder / RECORD if self.folder is not None else None
        kept = record is not None and record.is_dir()
        self.files = {f.name: f.read_bytes() for f in record.iterdir() if f.is_file()} if kept else {}
        self.checkpoints = _checkpoints(self.folder) if kept else set()

    def restore_unless_saved(self) -> None:
        if not self.files or not _checkpoints(self.folder) <= self.checkpoints:
            return
        record = self.folder / RECORD
        try:
            record.mkdir(parents=True, exist_ok=True)
            for f in record.iterdir():
                if f.is_file() and f.name not in self.files:
                    f.unlink()
            for name, data in self.files.items():
                path = record / name
                if not path.is_file() or path.read_bytes() != data:
                    atomic_write(path, data)
        except OSError as e:  # the run's own outcome is what the user must see; this one line says what is left
            print(f"warning: could not put back {record} as it was ({e.strerror or e})", file=sys.stderr, flush=True)
