"""A corpus (data/corpus_files.py) as token ids, tokenised once and cached (data/token_cache.py; docs/en/corpora.md).

Design choices:
- uint16 ids (uint32 where the vocabulary needs it) through `np.memmap`: a 1 GB corpus never sits in memory.
- `data.val_files` holds out whole documents of a folder corpus (the cache records where each starts).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common.atomic_files import user_cache_dir
from common.errors import UserError
from data.corpus_files import corpus_files
from data.text import detect_encoding
from data.token_cache import token_ids, vocabulary
from tokenizer import TOKENIZER_KINDS, Tokenizer

EMBEDDED_CORPUS = Path(__file__).resolve().parent / "corpus" / "ko_default.txt"


@dataclass
class Corpus:
    path: Path
    tokenizer: Tokenizer
    tokens: np.ndarray  # (N,) uint16/uint32, usually a read-only memmap
    num_chars: int  # characters of the text (a jamo tokenizer makes more tokens than characters)
    num_unknown: int
    files: list[str] = field(default_factory=list)  # each document's path as data.path names it (folders, globs)
    doc_starts: list[int] = field(default_factory=lambda: [0])  # the first token of each document

    def split(self, val_fraction: float, val_files: int | list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The first (1 - val_fraction) of the tokens for training, the last val_fraction for validation; or,
        with `val_files`, whole documents held out: the last `val_files` of them, or those named."""
        if val_files is None:
            n_val = int(round(len(self.tokens) * val_fraction))
            n_train = len(self.tokens) - n_val
            return self.tokens[:n_train], self.tokens[n_train:]
        held = held_out_documents(self.files, val_files, self.path)
        spans = list(zip(self.doc_starts, self.doc_starts[1:] + [len(self.tokens)], strict=False))
        if held == list(range(len(self.files) - len(held), len(self.files))):  # a tail: no copy
            cut = self.doc_starts[held[0]]
            return self.tokens[:cut], self.tokens[cut:]
        train = [self.tokens[a:b] for i, (a, b) in enumerate(spans) if i not in held]
        return np.concatenate(train), np.concatenate([self.tokens[a:b] for a, b in (spans[i] for i in held)])


def held_out_documents(files: list[str], val_files: int | list[str], path: Path) -> list[int]:
    """Indices of the documents `data.val_files` holds out (sorted); every impossible request is one line."""
    if isinstance(val_files, int):
        if not 0 < val_files < len(files):
            raise UserError(
                f"data.val_files={val_files} is invalid: {path} holds {len(files)} file(s), so hold out "
                f"between 1 and {len(files) - 1} of them (or use data.val_fraction)"
            )
        return list(range(len(files) - val_files, len(files)))
    wanted = {str(Path(os.path.expanduser(str(v)))) for v in val_files}
    names = [{f, Path(f).name, str(path / f)} for f in files]  # each file as data.val_files may name it
    held = [i for i, known in enumerate(names) if known & wanted]
    missing = sorted(wanted - set().union(*names))
    if missing:
        raise UserError(f"data.val_files names {', '.join(missing[:3])}, not among the {len(files)} files of {path}")
    if not held or len(held) == len(files):
        raise UserError(f"data.val_files must hold out some but not all of the {len(files)} files of {path}")
    return held


def resolve_corpus_path(path: str | os.PathLike | None) -> Path:
    """`None` (the config default) means the corpus embedded in this project."""
    return EMBEDDED_CORPUS if path in (None, "", "default") else Path(path).expanduser()


def default_cache_dir(home: Path) -> Path:
    """`.cache/` in the corpus's folder (beside a file, inside a folder) where writable, else the user's cache."""
    beside = home / ".cache"
    return beside if os.access(home, os.W_OK) or os.access(beside, os.W_OK) else user_cache_dir()


def load_corpus(
    path: str | os.PathLike | None,
    tokenizer: Tokenizer | None = None,
    cache_dir: str | os.PathLike | None = None,
    tokenizer_kind: str = "char",
) -> Corpus:
    """Tokenise what `path` names through the cache; without `tokenizer`, in a `tokenizer_kind` vocabulary of it."""
    if tokenizer is None and tokenizer_kind not in TOKENIZER_KINDS:
        raise UserError(f"data.tokenizer={tokenizer_kind} is invalid: use one of {', '.join(TOKENIZER_KINDS)}")
    source = corpus_files(resolve_corpus_path(path))
    for f in source.files:
        detect_encoding(f)  # clear errors for missing, directory, binary or undecodable files
    digest = source.digest()
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir(source.home)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(
            f"cannot create the token cache folder {cache}: {e.strerror or e}; pass data.cache_dir=<a writable folder>"
        ) from None
    if tokenizer is None:
        tokenizer = vocabulary(cache, source, digest, tokenizer_kind)
    cached = token_ids(cache, source, digest, tokenizer)
    if cached.num_chars == 0:
        raise UserError(f"corpus {'file ' if source.single else ''}is empty: {source.path}")
    files = [source.relative(f) for f in source.files]
    return Corpus(source.path, tokenizer, cached.tokens, cached.num_chars, cached.num_unknown, files, cached.doc_starts)
