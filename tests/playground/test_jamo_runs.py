"""Jamo runs in the playground and generate.py: sampling follows the spelling rules (a syllable is always
initial, medial, final or "no final"), so the text re-encodes to the tokens sampled, every event's `pos` is
its position in the re-encoded text, and an attention request for every sampled character answers. Checked
on a real jamo checkpoint trained for a few seconds, over long generations, and on an untrained one."""

import io
import warnings

import numpy as np
import pytest
import torch

from inference.checkpoint import Checkpoint, save_checkpoint
from inference.config import GenerateConfig
from inference.generation import stream_samples, token_grammar
from model import AttentionLanguageModel
from model.streaming import stream
from tests.helpers import KOREAN
from tests.playground.test_api import CPU, app_for, make_run
from tokenizer import KoreanCharTokenizer, KoreanJamoTokenizer

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

COMPATIBILITY_JAMO = range(0x3131, 0x318F)  # how a stray initial or medial would show


def train_jamo(folder, steps=150):
    """A tiny jamo model trained briefly on the tests' own text: it writes mostly syllables, not always."""
    tok = KoreanJamoTokenizer.from_text(KOREAN)
    data = torch.tensor(tok.encode(KOREAN * 4), dtype=torch.long)
    torch.manual_seed(0)
    m = AttentionLanguageModel(
        vocab_size=tok.vocab_size, context_length=48, embedding_size=48, head_size=48, num_heads=4, num_blocks=2
    )
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model gains nothing from more, and spinning threads slow a shared machine
    for _ in range(steps):
        starts = torch.randint(0, len(data) - 49, (16,))
        x = torch.stack([data[s : s + 48] for s in starts])
        y = torch.stack([data[s + 1 : s + 49] for s in starts])
        _, loss = m(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.set_num_threads(threads)
    folder.mkdir(parents=True)
    save_checkpoint(Checkpoint(m.config, m.state_dict(), tok.to_dict()), folder / "ckpt.pt")
    return m.eval(), tok


@pytest.fixture(scope="module")
def jamo(tmp_path_factory):
    root = tmp_path_factory.mktemp("jamo") / "runs"
    trained = train_jamo(root / "trained")
    untrained = make_run(root / "untrained", 2, KoreanJamoTokenizer)
    with TestClient(app_for(root, max_new_tokens_limit=5000)) as c:
        yield c, {"trained": trained, "untrained": untrained}


def assert_valid_spelling(tok, ids) -> None:
    """Every initial is followed by a medial, every medial by a final (or "no final"), nothing else."""
    state, allowed = tok.next_token_rules()
    s = 0
    for i in ids:
        assert allowed[s, i], f"token {tok.tokens[i - 1] if i else '<unk>'} not allowed in state {s}"
        s = state[i]
    assert s == 0, "the sample stops inside a syllable"


@pytest.mark.parametrize("run", ["trained", "untrained"])
@pytest.mark.parametrize(
    "settings",
    [
        {"temperature": 1.0},
        {"temperature": 1.6},
        {"temperature": 0.7, "top_k": 5},
        {"temperature": 1.2, "top_p": 0.9},
        {"temperature": 0},
    ],
)
def test_long_jamo_samples_are_valid_and_positions_match_the_text(jamo, run, settings):
    c, models = jamo
    _, tok = models[run]
    prompt = "봄이 오면"
    got = c.post(
        "/api/generate",
        json={"run": run, "prompt": prompt, "max_new_tokens": 1500, "seed": 3, "stream": False, **settings},
    ).json()
    completion = got["completion"]
    assert not [ch for ch in completion if ord(ch) in COMPATIBILITY_JAMO], "a stray jamo was written"
    whole = tok.encode(got["context"] + completion)
    assert len(whole) == got["prompt_tokens"] + got["new_tokens"] and 1500 <= got["new_tokens"] <= 1502
    assert_valid_spelling(tok, whole[got["prompt_tokens"] :].tolist())
    starts = np.cumsum(tok.token_counts(got["context"] + completion))[len(got["context"]) - 1 : -1]
    assert [e["pos"] for e in got["tokens"]] == starts.tolist()  # each event: its first token's index
    assert [e["n_tokens"] for e in got["tokens"]] == tok.token_counts(completion).tolist()


@pytest.mark.parametrize("run", ["trained", "untrained"])
def test_attention_answers_for_every_sampled_character(jamo, run):
    c, _ = jamo
    got = c.post(
        "/api/generate",
        json={"run": run, "prompt": "", "max_new_tokens": 300, "seed": 11, "temperature": 1.3, "stream": False},
    ).json()
    text = got["context"]
    for event in got["tokens"]:
        text += event["text"]
        for position in (event["pos"] - 1, event["pos"] + event["n_tokens"] - 1):  # the query before it, its last
            r = c.post("/api/attention", json={"run": run, "text": text, "position": position})
            assert r.status_code == 200, r.text
            assert r.json()["position"] == position


def test_generate_py_samples_are_valid_too(jamo):
    _, models = jamo
    for name in ("trained", "untrained"):
        model, tok = models[name]
        c = GenerateConfig(prompt="옛날", max_new_tokens=400, num_samples=5, temperature=1.4, seed=5)
        texts = stream_samples(model, tok, c, CPU, out=io.StringIO())
        assert len(texts) == 5
        for text in texts:
            assert not [ch for ch in text if ord(ch) in COMPATIBILITY_JAMO]
            assert tok.decode(tok.encode(text)) == text


def test_the_grammar_masks_logits_and_finishes_the_last_syllable():
    tok = KoreanJamoTokenizer.from_text(KOREAN)
    torch.manual_seed(1)
    m = AttentionLanguageModel(
        vocab_size=tok.vocab_size, context_length=16, embedding_size=16, head_size=16, num_heads=2, num_blocks=1
    ).eval()
    grammar = token_grammar(tok)
    idx = torch.tensor(np.stack([tok.encode("봄")] * 4), dtype=torch.long)
    for n in range(1, 8):  # every cut: after an initial, a medial, a final
        steps = list(stream(m, idx, n, 2.0, None, None, True, torch.Generator().manual_seed(n), grammar=grammar))
        assert n <= len(steps) <= n + 2
        for row in range(4):
            ids = [int(t[row, 0]) for t, _ in steps]
            for _, logits in steps:
                assert torch.isfinite(logits[row]).any()
        assert grammar.after(steps[-1][0]).eq(0).any()
    assert token_grammar(KoreanCharTokenizer.from_text("가나")) is None
    assert ids  # the last row's sample was looked at
