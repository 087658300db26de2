"""The token cache heals: every damaged cache file is rebuilt from the corpus with one warning naming it,
never used and never a traceback; the rebuilt corpus equals a fresh build (data/corpus.py)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

import data.corpus as token_cache  # the token cache lives in data/corpus.py
from common.errors import UserError
from data.corpus import load_corpus
from tokenizer import KoreanCharTokenizer, KoreanJamoTokenizer

TEXT = (
    "새벽 다섯 시, 골목 끝 빵집에 불이 켜졌다. 주인 아저씨는 밀가루를 체에 치며 라디오를 들었다.\n"
    '"오늘은 단팥빵을 두 판 더 굽자." 아주머니가 말했다. 창밖으로 첫차가 지나갔다.\n'
    "學校 가는 아이들이 유리창에 코를 대고 소보로빵을 구경했다. 8시 10분, 가게 문이 열렸다.\n"
) * 12


@pytest.fixture
def corpus(tmp_path) -> Path:
    p = tmp_path / "bakery.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p


def _cache_files(cache: Path) -> dict[str, Path]:
    files = {p.name: p for p in cache.iterdir()}
    return {
        "vocab": next(p for n, p in files.items() if n.endswith(".vocab.json")),
        "meta": next(p for n, p in files.items() if n.endswith(".json") and not n.endswith(".vocab.json")),
        "tokens": next(p for n, p in files.items() if n.endswith((".uint16", ".uint32"))),
    }


def _same(a, b) -> None:
    assert a.tokenizer.to_dict() == b.tokenizer.to_dict()
    assert np.array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    assert (a.num_chars, a.num_unknown) == (b.num_chars, b.num_unknown)


def _edit_json(path: Path, change) -> None:
    d = json.loads(path.read_text(encoding="utf-8"))
    change(d)
    path.write_text(json.dumps(d, ensure_ascii=False), encoding="utf-8")


def _resign(d: dict) -> None:
    """Give edited metadata a correct self-checksum, so that only the edit itself is wrong."""
    d.pop("sha256", None)
    d["sha256"] = token_cache._self_hash(d)


def _out_of_range(tokens: Path, vocab_size: int) -> None:
    ids = np.fromfile(tokens, dtype=np.uint16)
    ids[len(ids) // 2] = vocab_size + 3
    ids.tofile(tokens)


DAMAGE = {  # name: (which file, how)
    "meta_truncated": ("meta", lambda p, v: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])),
    "meta_malformed": ("meta", lambda p, v: p.write_text("{num_chars: 12,", encoding="utf-8")),
    "meta_not_utf8": ("meta", lambda p, v: p.write_bytes(b"\xff\xfe{}")),
    "meta_empty": ("meta", lambda p, v: p.write_bytes(b"")),
    "meta_wrong_version": ("meta", lambda p, v: _edit_json(p, lambda d: (d.update(version=1), _resign(d)))),
    "meta_old_format": ("meta", lambda p, v: p.write_text('{"num_chars": 5, "num_unknown": 0}', encoding="utf-8")),
    "meta_checksum": ("meta", lambda p, v: _edit_json(p, lambda d: d.update(num_chars=d["num_chars"] - 7))),
    "meta_resigned_count": ("meta", lambda p, v: _edit_json(p, lambda d: (d.update(num_tokens=10), _resign(d)))),
    "tokens_cut_short": ("tokens", lambda p, v: p.write_bytes(p.read_bytes()[:-2])),
    "tokens_half": ("tokens", lambda p, v: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])),
    "tokens_empty": ("tokens", lambda p, v: p.write_bytes(b"")),
    "tokens_out_of_range": ("tokens", _out_of_range),
    "tokens_zero_block": ("tokens", lambda p, v: p.write_bytes(b"\0" * 64 + p.read_bytes()[64:])),
    "vocab_truncated": ("vocab", lambda p, v: p.write_bytes(p.read_bytes()[:100])),
    "vocab_malformed": ("vocab", lambda p, v: p.write_text("[1, 2", encoding="utf-8")),
    "vocab_bit_flip": (
        "vocab",
        lambda p, v: p.write_text(p.read_text(encoding="utf-8").replace("빵", "방", 1), encoding="utf-8"),
    ),
    "vocab_old_format": (
        "vocab",
        lambda p, v: p.write_text(json.dumps(KoreanCharTokenizer.from_text(TEXT).to_dict()), encoding="utf-8"),
    ),
    "vocab_not_a_vocabulary": ("vocab", lambda p, v: _edit_json(p, lambda d: d.update(tokenizer={"chars": 3}))),
    "vocab_wrong_kind": (
        "vocab",
        lambda p, v: _edit_json(
            p,
            lambda d: d.update(
                tokenizer=KoreanJamoTokenizer.from_text(TEXT).to_dict(),
                fingerprint=KoreanJamoTokenizer.from_text(TEXT).fingerprint(),
            ),
        ),
    ),
}


@pytest.mark.parametrize("name", DAMAGE)
def test_a_damaged_cache_file_is_rebuilt_with_one_warning(tmp_path, corpus, name):
    which, damage = DAMAGE[name]
    fresh = load_corpus(corpus, cache_dir=tmp_path / "fresh")
    cache = tmp_path / "cache"
    load_corpus(corpus, cache_dir=cache)
    file = _cache_files(cache)[which]
    damage(file, fresh.tokenizer.vocab_size)
    with pytest.warns(UserWarning) as record:
        healed = load_corpus(corpus, cache_dir=cache)
    messages = [str(w.message) for w in record]
    assert len(messages) == 1 and f"token cache file {file} is damaged" in messages[0], messages
    assert "\n" not in messages[0] and f"rebuilding it from {corpus}" in messages[0]
    _same(healed, fresh)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # healed for good: the next load is silent
        _same(load_corpus(corpus, cache_dir=cache), fresh)


@pytest.mark.parametrize("kind", ["char", "jamo"])
def test_a_sound_cache_is_checked_without_tokenising_again(tmp_path, corpus, kind, monkeypatch):
    fresh = load_corpus(corpus, cache_dir=tmp_path / "cache", tokenizer_kind=kind)

    def forbidden(*args, **kwargs):
        raise AssertionError("the cache was rebuilt instead of read")

    monkeypatch.setattr(token_cache.CorpusFiles, "document_chunks", forbidden)
    monkeypatch.setattr(token_cache.CorpusFiles, "chunks", forbidden)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = load_corpus(corpus, cache_dir=tmp_path / "cache", tokenizer_kind=kind)
    _same(again, fresh)
    assert isinstance(again.tokens, np.memmap)


def test_a_damaged_jamo_cache_heals_too(tmp_path, corpus):
    fresh = load_corpus(corpus, cache_dir=tmp_path / "fresh", tokenizer_kind="jamo")
    cache = tmp_path / "cache"
    load_corpus(corpus, cache_dir=cache, tokenizer_kind="jamo")
    files = _cache_files(cache)
    _out_of_range(files["tokens"], fresh.tokenizer.vocab_size)
    with pytest.warns(UserWarning, match="is outside the vocabulary"):
        _same(load_corpus(corpus, cache_dir=cache, tokenizer_kind="jamo"), fresh)


def test_a_given_tokenizer_never_reads_ids_of_another_vocabulary(tmp_path, corpus):
    base = load_corpus(corpus, cache_dir=tmp_path / "cache")
    meta = _cache_files(tmp_path / "cache")["meta"]
    _edit_json(meta, lambda d: (d.update(vocab_size=d["vocab_size"] + 1), _resign(d)))
    with pytest.warns(UserWarning, match="vocab_size is"):
        _same(load_corpus(corpus, base.tokenizer, cache_dir=tmp_path / "cache"), base)


def _deny_writes(monkeypatch) -> None:
    def denied(path, data):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(token_cache, "atomic_write", denied)


def test_a_read_only_cache_folder_is_one_user_error(tmp_path, corpus, monkeypatch):
    cache = tmp_path / "readonly"
    cache.mkdir()
    _deny_writes(monkeypatch)  # simulated, so that it also runs as root
    with pytest.raises(UserError) as info:
        load_corpus(corpus, cache_dir=cache)
    message = str(info.value)
    assert message.startswith(f"cannot write the token cache in {cache}: Permission denied")
    assert "pass data.cache_dir=" in message and "\n" not in message


def test_a_complete_cache_in_a_read_only_folder_is_used(tmp_path, corpus, monkeypatch):
    fresh = load_corpus(corpus, cache_dir=tmp_path / "cache")
    _deny_writes(monkeypatch)
    _same(load_corpus(corpus, cache_dir=tmp_path / "cache"), fresh)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root can write a read-only folder")
def test_a_really_read_only_cache_folder(tmp_path, corpus):
    cache = tmp_path / "readonly"
    cache.mkdir()
    cache.chmod(0o555)
    try:
        with pytest.raises(UserError, match="pass data.cache_dir="):
            load_corpus(corpus, cache_dir=cache)
    finally:
        cache.chmod(0o755)
