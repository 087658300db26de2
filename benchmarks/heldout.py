"""Held-out text for benchmarks: split a corpus file into a training file and text no run trains on.

Design choices:
- The held-out part is the corpus's tail, cut at a document boundary: a blank line where the file has them
  (the novels of koconovel_dev.txt), else a line (one review per line in nsmc_dev.txt, which is grouped by
  film, so its tail is about films the training part never mentions).
- Both parts are written once into a folder of the caller's (never into the project), named by the source's
  hash and the fraction, so repeated benchmark runs reuse them and a changed corpus gets new files.
- The corpus is read as train.py reads it (data/text.py: any supported encoding, as NFC, a bad byte one line naming
  its offset), and a text too short to leave both parts some lines is refused in one line.
"""

from __future__ import annotations

from pathlib import Path

from common import config_checks as checks
from common.atomic_files import atomic_write, file_sha256
from common.errors import UserError


def tail_boundary(lines: list[str], fraction: float) -> int:
    """Index of the first held-out line: about `fraction` of the characters, starting after a blank line if
    the text has blank lines (a document boundary), else at a line."""
    total = sum(len(line) for line in lines)
    target = total * (1 - fraction)
    seen, cut = 0, len(lines)
    for i, line in enumerate(lines):
        if seen >= target:
            cut = i
            break
        seen += len(line)
    blanks = [i + 1 for i, line in enumerate(lines) if not line.strip() and i + 1 < len(lines)]
    if blanks:
        cut = min(blanks, key=lambda b: abs(b - cut))
    return max(1, min(cut, len(lines) - 1))


def corpus_fingerprint(corpus: str | Path) -> str:
    """The first 12 hex digits of the corpus file's SHA-256: what the ladder's rows record, and its splits' names."""
    return file_sha256(Path(corpus).expanduser())[:12]


def check_fraction(fraction: float) -> None:
    """`--heldout` as train.py checks data.val_fraction: a finite number in (0, 1)."""
    checks.number_in("--heldout", fraction, 0, 1, low_open=True, high_open=True)


def split_heldout(corpus: str | Path, out_dir: str | Path, fraction: float = 0.05) -> tuple[Path, Path]:
    """(training file, held-out file) for `corpus`, written under `out_dir` on first use."""
    from data.text import read_text

    check_fraction(fraction)
    corpus = Path(corpus).expanduser()
    key = f"{corpus.stem}-{corpus_fingerprint(corpus)}-{fraction:g}"
    out = Path(out_dir) / key
    train, heldout = out / "train.txt", out / "heldout.txt"
    if train.is_file() and heldout.is_file():
        return train, heldout
    lines = read_text(corpus).splitlines(keepends=True)  # train.py's checks: encoding, bad bytes, pipes
    if len([line for line in lines if line.strip()]) < 2:
        raise UserError(f"the corpus {corpus} has fewer than two lines of text: nothing can be held out of it")
    out.mkdir(parents=True, exist_ok=True)
    cut = tail_boundary(lines, fraction)
    head = "".join(lines[:cut]).rstrip("\n") + "\n"
    atomic_write(train, head.encode("utf-8"))
    atomic_write(heldout, "".join(lines[cut:]).encode("utf-8"))
    return train, heldout
