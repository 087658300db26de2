"""evaluate.py on a hangul model: syllables absent from the training text are scored apart (bpc_seen, bpc_unseen,
chars_unseen), the record of those syllables survives saving and fine-tuning, and old vocabularies still load."""

from __future__ import annotations

import contextlib
import json
import math

import pytest
import torch

from inference.scoring import evaluate_file
from model import AttentionLanguageModel
from tokenizer import KoreanCharTokenizer, build_tokenizer, tokenizer_from_dict

# Our own sentences (not from any corpus). 힣 and 똠 are syllables the training text lacks; ☃ nothing holds.
TRAIN = "바람이 불었다. 창문을 닫고 차를 마셨다.\n"
HELD_OUT = "바람이 불었다 힣. 창문을 닫고 똠 차를 마셨다 ☃\n" * 6


def _nullctx():
    return contextlib.nullcontext()


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer("hangul", [TRAIN])


def _score(tokenizer, path, embedding: str = "jamo", head: str = "jamo") -> dict:
    torch.manual_seed(0)
    model = AttentionLanguageModel(
        vocab_size=tokenizer.vocab_size,
        context_length=16,
        embedding_size=32,
        head_size=32,
        num_heads=2,
        num_blocks=1,
        embedding=embedding,
        head=head,
    ).eval()
    return evaluate_file(model, tokenizer, path, None, 4, torch.device("cpu"), _nullctx, False)


def test_the_training_syllables_are_recorded_and_saved(tokenizer):
    assert "바" in tokenizer.seen_syllables and "힣" not in tokenizer.seen_syllables
    assert tokenizer.char_vocabulary() == frozenset(KoreanCharTokenizer.from_text(TRAIN).chars)
    again = tokenizer_from_dict(tokenizer.to_dict())
    assert again.seen_syllables == tokenizer.seen_syllables and again.chars == tokenizer.chars


def test_fine_tuning_adds_the_syllables_of_the_new_text(tokenizer):
    grown = tokenizer.extended(["힣 ☃"])
    assert "힣" in grown.seen_syllables and "☃" in grown.char_vocabulary()
    assert grown.chars[: len(tokenizer.chars)] == tokenizer.chars


def test_an_old_vocabulary_without_the_record_loads_with_none(tokenizer, tmp_path):
    old = {k: v for k, v in tokenizer.to_dict().items() if k != "syllables_seen"}
    loaded = tokenizer_from_dict(old)
    assert loaded.seen_syllables is None and loaded.chars == tokenizer.chars
    assert loaded.extended(["힣"]).seen_syllables is None  # still unknown, not "none seen"
    path = tmp_path / "held.txt"
    path.write_text(HELD_OUT, encoding="utf-8")
    r = _score(loaded, path)
    assert r["bpc_seen"] is None and r["bpc_unseen"] is None and r["chars_unseen"] is None
    assert r["chars"] > 0 and r["bpc"] > 0


@pytest.mark.parametrize("embedding,head", [("jamo", "jamo"), ("token", "softmax")])
def test_unseen_syllables_are_scored_apart_and_the_parts_add_up(tokenizer, tmp_path, embedding, head):
    path = tmp_path / "held.txt"
    path.write_text(HELD_OUT, encoding="utf-8")
    r = _score(tokenizer, path, embedding, head)
    assert r["chars_unseen"] == 12 and r["unknown_chars"] == 6  # 힣 and 똠 six times each; ☃ is <unk>
    assert r["chars_seen"] + r["chars_unseen"] == r["chars"]
    total = r["bpc_seen"] * r["chars_seen"] + r["bpc_unseen"] * r["chars_unseen"]
    assert math.isclose(total, r["bpc"] * r["chars"], rel_tol=1e-9)
    assert r["bpc_unseen"] != pytest.approx(r["bpc_seen"])


def test_char_models_get_no_split(tmp_path):
    path = tmp_path / "held.txt"
    path.write_text(HELD_OUT, encoding="utf-8")
    r = _score(KoreanCharTokenizer.from_text(TRAIN), path, "token", "softmax")
    assert "bpc_seen" not in r and "chars_unseen" not in r and r["unknown_chars"] == 18


def test_a_cached_vocabulary_without_the_record_is_rebuilt_with_it(tmp_path):
    from data.corpus import load_corpus

    text = tmp_path / "train.txt"
    text.write_text(TRAIN * 3, encoding="utf-8")
    first = load_corpus(text, cache_dir=tmp_path / "cache", tokenizer_kind="hangul")
    assert "바" in first.tokenizer.seen_syllables
    (vocab,) = (tmp_path / "cache").glob("*.hangul.vocab.json")
    record = json.loads(vocab.read_text(encoding="utf-8"))
    del record["tokenizer"]["syllables_seen"]  # as written before the record existed
    record["fingerprint"] = tokenizer_from_dict(record["tokenizer"]).fingerprint()
    vocab.write_text(json.dumps(record, ensure_ascii=False), encoding="utf-8")
    again = load_corpus(text, cache_dir=tmp_path / "cache", tokenizer_kind="hangul")
    assert again.tokenizer.seen_syllables == first.tokenizer.seen_syllables
