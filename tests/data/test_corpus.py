import unicodedata

import numpy as np
import pytest
import torch

from common.errors import UserError
from data.corpus import EMBEDDED_CORPUS, load_corpus
from data.sampler import BatchSampler
from data.text import read_text


def test_encodings_and_normalisation_give_the_same_ids(tmp_path, small_corpus):
    text = small_corpus.read_text(encoding="utf-8")
    variants = {
        "utf8.txt": text.encode("utf-8"),
        "bom.txt": b"\xef\xbb\xbf" + text.encode("utf-8"),
        "cp949.txt": text.replace("\n", "\r\n").encode("cp949"),
        "nfd.txt": unicodedata.normalize("NFD", text).encode("utf-8"),
        "utf16.txt": text.encode("utf-16"),
    }
    results = []
    for name, data in variants.items():
        p = tmp_path / name
        p.write_bytes(data)
        assert read_text(p) == text
        c = load_corpus(p, cache_dir=tmp_path / "cache")
        results.append((c.tokenizer.chars, np.asarray(c.tokens).tolist()))
    assert all(r == results[0] for r in results)


def test_token_cache_is_reused_and_keyed_by_content(tmp_path, small_corpus):
    cache = tmp_path / "cache"
    a = load_corpus(small_corpus, cache_dir=cache)
    files = sorted(cache.iterdir())
    b = load_corpus(small_corpus, cache_dir=cache)
    assert sorted(cache.iterdir()) == files and isinstance(b.tokens, np.memmap)
    assert np.array_equal(a.tokens, b.tokens)
    small_corpus.write_text(small_corpus.read_text(encoding="utf-8") + "새 문장.\n", encoding="utf-8")
    c = load_corpus(small_corpus, cache_dir=cache)
    assert len(c.tokens) == len(a.tokens) + 6


def test_split_is_the_last_fraction(small_corpus, tmp_path):
    c = load_corpus(small_corpus, cache_dir=tmp_path)
    train, val = c.split(0.1)
    assert len(train) + len(val) == len(c.tokens)
    assert abs(len(val) - 0.1 * len(c.tokens)) <= 1
    assert np.array_equal(val, c.tokens[len(train) :])


def test_embedded_corpus_is_substantial():
    text = read_text(EMBEDDED_CORPUS)
    assert len(text) >= 30_000 and len(set(text)) > 800
    lines = [line for line in text.splitlines() if len(line) > 20]
    assert len(lines) == len(set(lines)), "no paragraph may be repeated"


def test_sampler_windows_are_shifted_and_reproducible():
    tokens = np.arange(1000, dtype=np.uint16)
    s1 = BatchSampler(tokens, context_length=16, batch_size=4, seed=3)
    s2 = BatchSampler(tokens, context_length=16, batch_size=4, seed=3)
    x, y = s1.next_batch()
    x2, y2 = s2.next_batch()
    assert x.shape == (4, 16) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1]) and torch.equal(y, x + 1)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    other_rank = BatchSampler(tokens, 16, 4, seed=3, rank=1).next_batch()[0]
    assert not torch.equal(other_rank, x)
    state = s1.state_dict()
    nxt = s1.next_batch()[0]
    s1.load_state_dict(state)
    assert torch.equal(s1.next_batch()[0], nxt)


def test_input_noise_swaps_inputs_for_corpus_ids_and_keeps_every_target():
    tokens = np.repeat(np.arange(100, 120, dtype=np.uint16), 50)[np.random.default_rng(0).permutation(1000)]
    clean = BatchSampler(tokens, context_length=32, batch_size=64, seed=5)
    noisy = BatchSampler(tokens, context_length=32, batch_size=64, seed=5, input_noise=0.3)
    (x, y), (xn, yn) = clean.next_batch(), noisy.next_batch()
    assert torch.equal(y, yn) and xn.shape == x.shape  # the same windows: the targets are untouched
    changed = (xn != x).float().mean().item()
    assert abs(changed - 0.3 * 19 / 20) < 0.04  # 30% swapped, a twentieth of them for the same id (20 equal ids)
    assert set(xn.unique().tolist()) <= set(range(100, 120))  # every swapped-in id is one the corpus holds
    state = noisy.state_dict()
    after = noisy.next_batch()
    noisy.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(noisy.next_batch(), after, strict=True))  # resumable
    with pytest.raises(ValueError, match="input_noise"):
        BatchSampler(tokens, 32, 4, input_noise=1.0)


def test_missing_and_empty_corpus_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="not found"):
        load_corpus(tmp_path / "nope.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(UserError, match="empty"):
        load_corpus(empty, cache_dir=tmp_path / "c")


def test_one_user_cache_folder(tmp_path, monkeypatch):
    """Token caches beside a read-only corpus and prepared corpora both go under common.atomic_files.user_cache_dir."""
    from common.atomic_files import user_cache_dir
    from data import corpus
    from data.prepare import fetching

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache_dir() == tmp_path / "xdg" / "kochar-gpt"
    assert fetching.default_cache_dir() == tmp_path / "xdg" / "kochar-gpt" / "corpora"
    text = tmp_path / "novel.txt"
    assert corpus.default_cache_dir(text.parent) == tmp_path / ".cache"
    monkeypatch.setattr(corpus.os, "access", lambda path, mode: False)  # a read-only folder, even for root
    assert corpus.default_cache_dir(text.parent) == tmp_path / "xdg" / "kochar-gpt"
