"""Turn a corpus file into token ids once, cached on disk as a memory-mapped array.

Design choices:
- The cache (see `data.token_cache`) is keyed by a hash of the corpus bytes and of the tokenizer
  vocabulary, so an edited file or another vocabulary never reads stale ids, and a second run starts
  without re-tokenising. Every cache file is checked when opened; a damaged one is rebuilt, never used.
- Ids are stored as uint16 (uint32 when the vocabulary needs it) and read through `np.memmap`, so a 1 GB
  corpus never sits in memory as Python objects.
- The cache lives in `.cache/` beside the corpus, or in the user's cache folder
  (`common.fsutil.user_cache_dir`) when the corpus's folder is read-only; `data.cache_dir` overrides both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import UserError
from common.fsutil import file_sha256, user_cache_dir
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

    def split(self, val_fraction: float) -> tuple[np.ndarray, np.ndarray]:
        """The first (1 - val_fraction) of the tokens for training, the last val_fraction for validation."""
        n_val = int(round(len(self.tokens) * val_fraction))
        n_train = len(self.tokens) - n_val
        return self.tokens[:n_train], self.tokens[n_train:]


def resolve_corpus_path(path: str | os.PathLike | None) -> Path:
    """`None` (the config default) means the corpus embedded in this project."""
    return EMBEDDED_CORPUS if path in (None, "", "default") else Path(path).expanduser()


def default_cache_dir(corpus_path: Path) -> Path:
    """`.cache/` beside the corpus when that folder is writable, else the user's cache folder."""
    beside = corpus_path.parent / ".cache"
    if os.access(corpus_path.parent, os.W_OK) or os.access(beside, os.W_OK):
        return beside
    return user_cache_dir()


def load_corpus(
    path: str | os.PathLike | None,
    tokenizer: Tokenizer | None = None,
    cache_dir: str | os.PathLike | None = None,
    tokenizer_kind: str = "char",
) -> Corpus:
    """Tokenise `path` (building a `tokenizer_kind` vocabulary from it unless `tokenizer` is given), using the cache."""
    if tokenizer is None and tokenizer_kind not in TOKENIZER_KINDS:
        raise UserError(f"data.tokenizer={tokenizer_kind} is invalid: use one of {', '.join(TOKENIZER_KINDS)}")
    path = resolve_corpus_path(path)
    detect_encoding(path)  # clear errors for missing, directory, binary or undecodable files
    digest = file_sha256(path)
    cache = Path(cache_dir).expanduser() if cache_dir else default_cache_dir(path)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the token cache folder {cache}: {e.strerror or e}; pass "
                        "data.cache_dir=<a writable folder>") from None
    if tokenizer is None:
        tokenizer = vocabulary(cache, path, digest, tokenizer_kind)
    cached = token_ids(cache, path, digest, tokenizer)
    if cached.num_chars == 0:
        raise UserError(f"corpus file is empty: {path}")
    return Corpus(path, tokenizer, cached.tokens, cached.num_chars, cached.num_unknown)
