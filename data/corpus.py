"""A corpus (data/corpus_files.py) as token ids, tokenised once into a token cache: its files, how each is checked
when opened, and how it is rebuilt (docs/en/corpora.md).

Design choices:
- uint16 ids (uint32 where the vocabulary needs it) through `np.memmap`: a 1 GB corpus never sits in memory.
- `data.val_files` holds out whole documents of a folder corpus (the cache records where each starts).
- Cache names carry the corpus hash and vocabulary fingerprint: an edited corpus or another vocabulary never meets
  stale ids.
- Every cache file is checked when opened, at the cost of a read, never a tokenisation (format, hashes, and the ids'
  count, largest value, `<unk>` count and sum): a damaged one is rebuilt with one warning, never used.
- Ids before metadata, each written atomically: metadata never describes missing ids, and DDP ranks building one
  cache at once write the same bytes. A read-only folder is an error only where something must be written.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from common.atomic_files import atomic_write, user_cache_dir
from common.errors import UserError
from data.corpus_files import CorpusFiles, corpus_files
from data.text import detect_encoding
from tokenizer import TOKENIZER_KINDS, Tokenizer, build_tokenizer, tokenizer_from_dict

EMBEDDED_CORPUS = Path(__file__).resolve().parent / "corpus" / "ko_default.txt"
VOCAB_FORMAT = "kochar-gpt/token-cache-vocabulary"
META_FORMAT = "kochar-gpt/token-cache"
VERSION = 2  # 1 was the unversioned cache: metadata with only num_chars and num_unknown
SCAN_BLOCK = 1 << 20  # ids per block of the checking pass: a few MiB of memory whatever the corpus size


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


class _Damaged(Exception):
    """Why a cache file cannot be used (the text of the one warning)."""


@dataclass
class CachedTokens:
    tokens: np.ndarray  # (N,) uint16/uint32, a read-only memmap (an empty array for an empty corpus)
    num_chars: int
    num_unknown: int
    doc_starts: list[int]  # the first token of each file's text (one entry per file of the corpus)


def _warn(file: Path, why: _Damaged, corpus: CorpusFiles) -> None:
    warnings.warn(f"token cache file {file} is damaged ({why}); rebuilding it from {corpus.path}", stacklevel=4)


def _write(file: Path, data) -> None:
    try:
        atomic_write(file, data)
    except OSError as e:
        raise UserError(
            f"cannot write the token cache in {file.parent}: {e.strerror or e}; pass data.cache_dir=<a writable folder>"
        ) from None


def _read_json(file: Path, fmt: str) -> dict:
    try:
        d = json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise _Damaged("not UTF-8 text") from None
    except ValueError as e:
        raise _Damaged(f"not valid JSON: {e}") from None
    except OSError as e:
        raise UserError(
            f"cannot read token cache file {file}: {e.strerror or e}; pass data.cache_dir=<another folder>"
        ) from None
    if not isinstance(d, dict) or d.get("format") != fmt:
        raise _Damaged(f"not a {fmt} file")
    if d.get("version") != VERSION:
        raise _Damaged(f"format version {d.get('version')!r}, this kochar-gpt reads version {VERSION}")
    return d


def vocabulary(cache: Path, corpus: CorpusFiles, digest: str, kind: str) -> Tokenizer:
    """The `kind` vocabulary of `corpus` (sha256 `digest`): from the cache when it is sound, else built."""
    file = cache / f"{corpus.name}.{digest[:16]}.{kind}.vocab.json"
    if file.exists():
        try:
            tokenizer = _load_vocabulary(file, digest, kind)
            # a hangul vocabulary cached before it recorded its syllables lacks evaluation's split: rebuilt quietly
            if getattr(tokenizer, "seen_syllables", ()) is not None:
                return tokenizer
        except _Damaged as why:
            _warn(file, why, corpus)
    tokenizer = build_tokenizer(kind, corpus.chunks())
    record = {
        "format": VOCAB_FORMAT,
        "version": VERSION,
        "corpus_sha256": digest,
        "fingerprint": tokenizer.fingerprint(),
        "tokenizer": tokenizer.to_dict(),
    }
    _write(file, json.dumps(record, ensure_ascii=False))
    return tokenizer


def _load_vocabulary(file: Path, digest: str, kind: str) -> Tokenizer:
    d = _read_json(file, VOCAB_FORMAT)
    if d.get("corpus_sha256") != digest:
        raise _Damaged("it was built from another corpus")
    saved = d.get("tokenizer")
    if not isinstance(saved, dict) or saved.get("kind") != kind:
        found = saved.get("kind") if isinstance(saved, dict) else None
        raise _Damaged(f"a {found!r} vocabulary where a {kind!r} one belongs")
    try:
        tokenizer = tokenizer_from_dict(saved)
    except (UserError, TypeError, ValueError) as e:
        raise _Damaged(f"unreadable vocabulary: {e}") from None
    if tokenizer.fingerprint() != d.get("fingerprint"):
        raise _Damaged("its content does not match its recorded fingerprint")
    return tokenizer


def token_ids(cache: Path, corpus: CorpusFiles, digest: str, tokenizer: Tokenizer) -> CachedTokens:
    """The ids of `corpus` under `tokenizer`: from the cache when every check passes, else tokenised again."""
    dtype = np.dtype(np.uint16 if tokenizer.vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32)
    stem = f"{corpus.name}.{digest[:16]}.{tokenizer.fingerprint()}"
    tokens_file, meta_file = cache / f"{stem}.{dtype.name}", cache / f"{stem}.json"
    expected = {
        "corpus_sha256": digest,
        "tokenizer_fingerprint": tokenizer.fingerprint(),
        "vocab_size": tokenizer.vocab_size,
        "dtype": dtype.name,
    }
    if tokens_file.exists() and meta_file.exists():
        try:
            meta = _load_meta(meta_file, expected)
        except _Damaged as why:
            _warn(meta_file, why, corpus)
        else:
            try:
                return _open_tokens(tokens_file, meta, dtype)
            except _Damaged as why:
                _warn(tokens_file, why, corpus)
    meta = _build(corpus, tokenizer, tokens_file, meta_file, expected)
    return _open_tokens(tokens_file, meta, dtype, check=False)


def _self_hash(body: dict) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _load_meta(file: Path, expected: dict) -> dict:
    d = _read_json(file, META_FORMAT)
    body = {k: v for k, v in d.items() if k != "sha256"}
    if d.get("sha256") != _self_hash(body):
        raise _Damaged("its content does not match its recorded sha256")
    for key, value in expected.items():
        if d.get(key) != value:
            raise _Damaged(f"{key} is {d.get(key)!r}, expected {value!r}")
    counts = [d.get(k) for k in ("num_tokens", "num_chars", "num_unknown", "max_id", "id_sum")]
    if not all(isinstance(n, int) and n >= 0 for n in counts) or d["num_tokens"] < d["num_chars"]:
        raise _Damaged("its counts are not consistent")
    starts = d.setdefault("doc_starts", [0])  # caches of one file written before folders were read lack it
    if not (
        isinstance(starts, list)
        and all(isinstance(n, int) and 0 <= n <= d["num_tokens"] for n in starts)
        and starts == sorted(starts)
    ):
        raise _Damaged("its document offsets are not consistent")
    if d["max_id"] >= d["vocab_size"]:
        raise _Damaged(f"largest id {d['max_id']} is outside the vocabulary of {d['vocab_size']}")
    return d


def _scan(ids: np.ndarray) -> tuple[int, int, int]:
    """(largest id, number of `<unk>` ids, sum of ids), one bounded block at a time."""
    max_id = unknown = total = 0
    for i in range(0, len(ids), SCAN_BLOCK):
        block = ids[i : i + SCAN_BLOCK]
        max_id = max(max_id, int(block.max()))
        unknown += int(np.count_nonzero(block == 0))
        total += int(block.sum(dtype=np.uint64))
    return max_id, unknown, total


def _open_tokens(file: Path, meta: dict, dtype: np.dtype, check: bool = True) -> CachedTokens:
    size, want = file.stat().st_size, meta["num_tokens"] * dtype.itemsize
    if size != want:
        raise _Damaged(f"{size:,} bytes where the metadata records {want:,}: it is cut short or overwritten")
    tokens = np.memmap(file, dtype=dtype, mode="r") if want else np.zeros(0, dtype=dtype)
    if check:
        max_id, unknown, total = _scan(tokens)
        if max_id >= meta["vocab_size"]:
            raise _Damaged(f"id {max_id} is outside the vocabulary of {meta['vocab_size']}")
        if (max_id, unknown, total) != (meta["max_id"], meta["num_unknown"], meta["id_sum"]):
            raise _Damaged("its ids differ from those the metadata records")
    return CachedTokens(tokens, meta["num_chars"], meta["num_unknown"], list(meta["doc_starts"]))


def _build(corpus: CorpusFiles, tokenizer: Tokenizer, tokens_file: Path, meta_file: Path, expected: dict) -> dict:
    dtype = np.dtype(expected["dtype"])  # token_ids chose it
    stats = {"num_tokens": 0, "num_chars": 0, "num_unknown": 0, "max_id": 0, "id_sum": 0}
    starts = [None] * len(corpus.files)

    def encoded() -> Iterator[bytes]:
        for doc, chunk in corpus.document_chunks():
            if starts[doc] is None:
                starts[doc] = stats["num_tokens"]
            ids = tokenizer.encode(chunk, normalized=True)  # the chunks are NFC already
            stats["num_chars"] += len(chunk)  # NFC chunks: one str item per character
            if len(ids):
                max_id, unknown, total = _scan(ids)
                stats["num_tokens"] += len(ids)
                stats["num_unknown"] += unknown
                stats["max_id"] = max(stats["max_id"], max_id)
                stats["id_sum"] += total
            yield ids.astype(dtype).tobytes()

    _write(tokens_file, encoded())
    for i in range(len(starts) - 1, -1, -1):  # a file without text starts where the next one does
        if starts[i] is None:
            starts[i] = starts[i + 1] if i + 1 < len(starts) else stats["num_tokens"]
    meta = {"format": META_FORMAT, "version": VERSION, **expected, **stats, "doc_starts": starts}
    meta["sha256"] = _self_hash(meta)
    _write(meta_file, json.dumps(meta, indent=1) + "\n")
    return meta
