"""Held-out text for benchmarks: split a corpus file into a training file and text no run trains on.

Design choices:
- The held-out part is the corpus's tail, cut at a document boundary: a blank line where the file has them, else a
  line (nsmc_dev.txt is grouped by film, so its tail is about films the training part never mentions).
- Both parts are written once into the caller's folder, named by the corpus's hash and fraction: reused till it changes.
"""

from __future__ import annotations

from itertools import accumulate
from pathlib import Path

from common.atomic_files import atomic_write, file_sha256
from common.errors import UserError


def tail_boundary(lines: list[str], fraction: float) -> int:
    """Index of the first held-out line: about `fraction` of the characters, at the nearest document boundary."""
    target = sum(map(len, lines)) * (1 - fraction)
    cut = next(i for i, seen in enumerate(accumulate(map(len, lines), initial=0)) if seen >= target)
    blanks = [i + 1 for i, line in enumerate(lines) if not line.strip() and i + 1 < len(lines)]
    if blanks:
        cut = min(blanks, key=lambda b: abs(b - cut))
    return max(1, min(cut, len(lines) - 1))


def corpus_fingerprint(corpus: str | Path) -> str:
    """The first 12 hex digits of the corpus file's SHA-256: what the ladder's rows record, and its splits' names."""
    return file_sha256(Path(corpus).expanduser())[:12]


def split_heldout(corpus: str | Path, out_dir: str | Path, fraction: float = 0.05) -> tuple[Path, Path]:
    """(training file, held-out file) for `corpus`, written under `out_dir` on first use."""
    from data.text import read_text

    corpus = Path(corpus).expanduser()
    out = Path(out_dir) / f"{corpus.stem}-{corpus_fingerprint(corpus)}-{fraction:g}"
    train, heldout = out / "train.txt", out / "heldout.txt"
    if train.is_file() and heldout.is_file():
        return train, heldout
    lines = read_text(corpus).splitlines(keepends=True)  # train.py's checks: encoding, bad bytes, pipes
    if len([line for line in lines if line.strip()]) < 2:
        raise UserError(f"the corpus {corpus} has fewer than two lines of text: nothing can be held out of it")
    out.mkdir(parents=True, exist_ok=True)
    cut = tail_boundary(lines, fraction)
    atomic_write(train, ("".join(lines[:cut]).rstrip("\n") + "\n").encode("utf-8"))
    atomic_write(heldout, "".join(lines[cut:]).encode("utf-8"))
    return train, heldout
