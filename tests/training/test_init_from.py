"""train.init_from: a new run from another run's weights, on text with characters the source never saw."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inference.checkpoint import load_checkpoint
from inference.loading import model_from_checkpoint
from model import AttentionLanguageModel
from tests.helpers import KOREAN, TINY, cli
from tokenizer import KoreanCharTokenizer, KoreanJamoTokenizer, tokenizer_from_dict
from training.init_from import grown_state

NEW_TEXT = "영화 정말 최고! ㅋㅋㅋ OK 굿굿 😀 다시 볼래요.\n" * 40  # Latin, jamo, an emoji: unseen


@pytest.mark.parametrize("cls", [KoreanCharTokenizer, KoreanJamoTokenizer])
def test_extended_tokenizer_keeps_every_old_id(cls):
    old = cls.from_text(KOREAN)
    new = old.extended([NEW_TEXT])
    assert new.vocab_size > old.vocab_size
    assert np.array_equal(new.encode(KOREAN), old.encode(KOREAN))  # known text: the same ids
    assert new.decode(new.encode(NEW_TEXT)) == NEW_TEXT  # the new text: no <unk> left
    again = tokenizer_from_dict(new.to_dict())
    assert again.fingerprint() == new.fingerprint() and np.array_equal(again.encode(NEW_TEXT), new.encode(NEW_TEXT))
    assert old.extended([KOREAN]).fingerprint() == old.fingerprint()  # nothing new: the same vocabulary
    assert new.extended(["★"]).vocab_size == new.vocab_size + 1  # a fine-tuned run can be fine-tuned again


@pytest.mark.parametrize("tied", [False, True])
def test_known_logits_are_unchanged_at_step_zero(tied):
    torch.manual_seed(0)
    source = AttentionLanguageModel(
        vocab_size=40, context_length=16, embedding_size=32, head_size=32, num_heads=4, num_blocks=2, tie_weights=tied
    ).eval()
    with torch.no_grad():  # a source that learned <unk> is rare, as training makes it
        source.lm_head.weight[0] = -source.lm_head.weight[1:].mean(0) * 20
    grown = AttentionLanguageModel(source.config.with_vocab(47)).eval()
    grown.load_state_dict(grown_state(source.state_dict(), 47, tied))
    idx = torch.randint(1, 40, (3, 16))
    old, _ = source(idx)
    new, _ = grown(idx)
    assert torch.equal(new[..., :40], old)  # every known character's logit, exactly
    drift = (new.log_softmax(-1)[..., :40] - old.log_softmax(-1)).abs().max()
    p_unk = old.softmax(-1)[..., 0].max()
    assert drift <= 7 * p_unk * 1.01 + 1e-6  # each new character is only as likely as <unk> was


@pytest.fixture(scope="module")
def source_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("init")
    (d / "ko.txt").write_text(KOREAN * 4, encoding="utf-8")
    (d / "new.txt").write_text(NEW_TEXT, encoding="utf-8")
    r = cli(
        "train.py",
        *TINY,
        f"data.path={d / 'ko.txt'}",
        f"hydra.run.dir={d / 'src'}",
        "train.max_steps=60",
        f"data.cache_dir={d / 'cache'}",
        "train.lr=3e-3",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return d


def _new_char_nll(model: AttentionLanguageModel, tokenizer, text: str, known: int) -> float:
    ids = torch.tensor(tokenizer.encode(text)[: model.context_length + 1].astype(np.int64))[None]
    logits, _ = model(ids[:, :-1])
    nll = torch.nn.functional.cross_entropy(logits[0], ids[0, 1:], reduction="none")
    return float(nll[ids[0, 1:] >= known].mean().detach())


@pytest.mark.slow
def test_fine_tuning_learns_the_new_characters_and_records_its_source(source_run):
    d = source_run
    r = cli(
        "train.py",
        *TINY,
        f"train.init_from={d / 'src'}",
        f"data.path={d / 'new.txt'}",
        f"hydra.run.dir={d / 'ft'}",
        "train.max_steps=40",
        "train.lr=3e-3",
        f"data.cache_dir={d / 'cache'}",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("init_from "))
    assert "character(s) it never saw were added" in line
    src, ft = load_checkpoint(d / "src" / "ckpt.pt"), load_checkpoint(d / "ft" / "ckpt.pt")
    assert ft.config["init_from"]["step"] == 60 and ft.config["init_from"]["added_tokens"] > 5
    assert ft.step == 40 and ft.model_config.num_blocks == src.model_config.num_blocks
    tok = tokenizer_from_dict(ft.tokenizer)
    start = AttentionLanguageModel(ft.model_config).eval()
    start.load_state_dict(grown_state(src.model, tok.vocab_size, False))
    known = tokenizer_from_dict(src.tokenizer).vocab_size
    before = _new_char_nll(start, tok, NEW_TEXT, known)
    after = _new_char_nll(model_from_checkpoint(ft).eval(), tok, NEW_TEXT, known)
    assert after < before - 1.0, (before, after)
    r = cli("train.py", f"train.resume={d / 'ft'}", "train.max_steps=45")  # a fine-tuned run resumes as any run
    assert r.returncode == 0, r.stderr[-2000:]
    resumed = load_checkpoint(d / "ft" / "ckpt.pt")
    assert resumed.step == 45 and resumed.config["init_from"] == ft.config["init_from"]


@pytest.mark.parametrize(
    "extra, why",
    [
        (
            ("model.num_blocks=3", "model.context_length=16"),
            "model.context_length=16 (the source has 32); model.num_blocks=3 (the source has 2)",
        ),
        (("data.tokenizer=jamo",), "data.tokenizer=jamo (the source has char)"),
        (("train.resume={d}/src",), "pass only one of them"),
    ],
)
def test_contradictions_are_one_line(source_run, extra, why):
    d = source_run
    r = cli(
        "train.py",
        *TINY,
        f"train.init_from={d / 'src'}",
        f"data.path={d / 'new.txt'}",
        f"hydra.run.dir={d / 'bad'}",
        *(x.format(d=d) for x in extra),
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and why in r.stderr, r.stderr
