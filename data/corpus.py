"""Turn a corpus file into token ids once, cached on disk as a memory-mapped array.

The cache file is keyed by a hash of the corpus bytes and of the tokenizer vocabulary, so an edited file
or another vocabulary never reads stale ids, and a second run starts without re-tokenising. Ids are
stored as uint16 (uint32 when the vocabulary needs it) and read through `np.memmap`, so a 1 GB corpus
never sits in memory as Python objects.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common.errors import UserError
from data.text import detect_encoding, iter_text_chunks
from tokenizer import TOKENIZER_KINDS, Tokenizer, build_tokenizer, tokenizer_from_dict

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


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 24):
            h.update(block)
    return h.hexdigest()


def default_cache_dir(corpus_path: Path) -> Path:
    """`.cache/` beside the corpus when that folder is writable, else the user's cache folder."""
    beside = corpus_path.parent / ".cache"
    if os.access(corpus_path.parent, os.W_OK) or os.access(beside, os.W_OK):
        return beside
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "kochar-gpt"


def _atomic_write_bytes(target: Path, chunks) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            for b in chunks:
                f.write(b)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


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
    cache = Path(cache_dir) if cache_dir else default_cache_dir(path)
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create token cache folder {cache}: {e.strerror or e}") from None

    if tokenizer is None:
        vocab_file = cache / f"{path.name}.{digest[:16]}.{tokenizer_kind}.vocab.json"
        if vocab_file.exists():
            tokenizer = tokenizer_from_dict(json.loads(vocab_file.read_text(encoding="utf-8")))
        else:
            tokenizer = build_tokenizer(tokenizer_kind, iter_text_chunks(path))
            payload = json.dumps(tokenizer.to_dict(), ensure_ascii=False).encode("utf-8")
            _atomic_write_bytes(vocab_file, [payload])

    dtype = np.uint16 if tokenizer.vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32
    stem = f"{path.name}.{digest[:16]}.{tokenizer.fingerprint()}"
    tokens_file = cache / f"{stem}.{np.dtype(dtype).name}"
    meta_file = cache / f"{stem}.json"
    if not (tokens_file.exists() and meta_file.exists()):
        stats = {"num_chars": 0, "num_unknown": 0}

        def encoded():
            for chunk in iter_text_chunks(path):
                ids = tokenizer.encode(chunk, normalized=True)  # iter_text_chunks gives NFC already
                stats["num_chars"] += len(chunk)  # chunks are NFC already: one str item per character
                stats["num_unknown"] += int((ids == 0).sum())
                yield ids.astype(dtype).tobytes()

        _atomic_write_bytes(tokens_file, encoded())
        _atomic_write_bytes(meta_file, [json.dumps(stats).encode()])
    stats = json.loads(meta_file.read_text())
    if stats["num_chars"] == 0:
        raise UserError(f"corpus file is empty: {path}")
    tokens = np.memmap(tokens_file, dtype=dtype, mode="r")
    return Corpus(path, tokenizer, tokens, stats["num_chars"], stats["num_unknown"])
