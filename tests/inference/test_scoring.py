"""evaluate.py and inference/scoring.py: every token scored once, fair bits per character, jamo end to end."""

import contextlib
import io
import json
import math
import re
import signal
import threading
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from common.errors import UserError
from inference.scoring import encode_for_scoring, score_tokens, window_plan
from tests.helpers import cli, start, tiny_model
from tokenizer import KoreanCharTokenizer, KoreanJamoTokenizer

TINY = ["model=tiny", "train.batch_size=8", "train.eval_steps=2", "train.eval_interval=20", "train.sample_chars=0"]
# Our own sentences (not from any corpus), with two characters no vocabulary here has seen.
HELD_OUT = "어제는 바람이 많이 불었다. 창문을 닫고 차를 한 잔 마셨다.\n내일은 시장에 가서 사과를 사야겠다 ☃ ✈\n" * 20


def _nullctx():
    return contextlib.nullcontext()


@pytest.mark.parametrize("n,c,s", [(2, 8, 8), (9, 8, 8), (41, 8, 8), (50, 8, 3), (50, 8, 1), (100, 16, 5), (7, 16, 4)])
def test_window_plan_scores_every_target_once_with_full_windows(n, c, s):
    starts, offsets = window_plan(n, c, s)
    length = min(c, n - 1)
    targets = []
    for i, (b, off) in enumerate(zip(starts.tolist(), offsets.tolist(), strict=True)):
        assert 0 <= b and b + length <= n - 1  # every window is full and inside the text
        if i:
            assert off >= min(c - s, length - 1) or b + length == n - 1  # left context of new targets
        targets += [b + j + 1 for j in range(off, length)]
    assert targets == list(range(1, n))


def test_window_plan_rejects_bad_stride():
    with pytest.raises(UserError, match="stride=0"):
        window_plan(100, 8, 0)
    with pytest.raises(UserError, match="stride=9"):
        window_plan(100, 8, 9)


@pytest.fixture(scope="module")
def model():
    return tiny_model(vocab_size=20, context_length=8, embedding_size=16, head_size=16, num_heads=2)


def test_non_overlapping_score_equals_the_models_own_loss(model):
    ids = np.random.default_rng(0).integers(0, 20, size=8 * 5 + 1).astype(np.int32)
    score = score_tokens(model, ids, np.ones(len(ids), bool), 8, 8, 2, torch.device("cpu"), _nullctx, False)
    x = torch.tensor(ids[:-1], dtype=torch.long).view(5, 8)
    y = torch.tensor(ids[1:], dtype=torch.long).view(5, 8)
    with torch.no_grad():
        _, loss = model(x, y)
    assert score.tokens == 40
    assert score.loss == pytest.approx(loss.item(), rel=1e-5)


def test_stride_one_gives_each_target_its_full_left_context(model):
    ids = np.random.default_rng(1).integers(0, 20, size=30).astype(np.int32)
    score = score_tokens(model, ids, np.ones(len(ids), bool), 8, 1, 4, torch.device("cpu"), _nullctx, False)
    total = 0.0
    with torch.no_grad():
        for t in range(1, len(ids)):
            ctx = torch.tensor(ids[max(0, t - 8) : t], dtype=torch.long)[None]
            logits, _ = model(ctx)
            total += F.cross_entropy(logits[0, -1:], torch.tensor([int(ids[t])])).item()
    assert score.tokens == 29
    assert score.nats == pytest.approx(total, rel=1e-5)


def test_batch_size_does_not_change_the_score(model):
    ids = np.random.default_rng(2).integers(0, 20, size=77).astype(np.int32)
    mask = np.random.default_rng(3).random(77) < 0.8
    a = score_tokens(model, ids, mask, 8, 3, 1, torch.device("cpu"), _nullctx, False)
    b = score_tokens(model, ids, mask, 8, 3, 64, torch.device("cpu"), _nullctx, False)
    assert a.tokens == b.tokens == int(mask[1:].sum())
    assert a.nats == pytest.approx(b.nats, rel=1e-6)


def test_unknown_characters_and_the_first_character_are_not_scored():
    jamo = KoreanJamoTokenizer.from_text("가나다 ")
    text = encode_for_scoring(jamo, ["가☃나 ", "다"])
    # 가 (context only) ☃ (unknown) 나 " " 다 -> 3 characters, 7 tokens scored
    assert text.scored.tolist() == [False] * 3 + [False] + [True] * 3 + [True] + [True] * 3
    assert (text.num_chars, text.num_unknown, dict(text.unknown)) == (3, 1, {"☃": 1})
    char = KoreanCharTokenizer.from_text("가나다 ")
    text = encode_for_scoring(char, ["가☃나 ", "다"])
    assert text.scored.tolist() == [False, False, True, True, True] and text.num_chars == 3


# -- end to end through the real command lines ------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    out = {}
    for kind in ("char", "jamo"):
        run = root / kind
        r = cli("train.py", *TINY, f"data.tokenizer={kind}", "train.max_steps=20", f"hydra.run.dir={run}")
        assert r.returncode == 0, r.stderr
        out[kind] = run
    held = root / "held_out.txt"
    held.write_text(HELD_OUT, encoding="utf-8")
    out["held"] = held
    return out


def _evaluate(*args):
    r = cli("evaluate.py", *args)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1, r.stdout
    return json.loads(lines[0])


@pytest.mark.slow
def test_evaluate_char_model_bpc_is_loss_over_ln2(runs):
    res = _evaluate(f"ckpt={runs['char']}", f"data.path={runs['held']}")
    assert res["tokenizer"] == "char" and res["context_length"] == 32 and res["stride"] == 32
    assert res["unknown_chars"] >= 40 and "☃" in res["unknown_examples"]  # 20 x ☃ and ✈, and unseen syllables
    assert res["chars"] == res["tokens"] == len(HELD_OUT) - 1 - res["unknown_chars"]
    assert res["bpc"] == pytest.approx(res["loss"] / math.log(2), rel=1e-12)
    assert 0 < res["loss"] < 10


@pytest.mark.slow
def test_evaluate_jamo_model_bpc_accounts_for_tokens_per_char(runs):
    res = _evaluate(f"ckpt={runs['jamo']}", f"data.path={runs['held']}", "batch_size=5")
    assert res["tokenizer"] == "jamo"
    assert res["unknown_chars"] == 40  # only ☃ and ✈: unseen syllables are spelled with seen jamo
    assert res["chars"] == len(HELD_OUT) - 1 - 40
    assert 2 < res["tokens_per_char"] == res["tokens"] / res["chars"] < 3
    assert res["bpc"] == pytest.approx(res["loss"] * res["tokens"] / res["chars"] / math.log(2), rel=1e-12)


@pytest.mark.slow
def test_evaluate_stride_scores_the_same_tokens_with_more_context(runs):
    a = _evaluate(f"ckpt={runs['char']}", f"data.path={runs['held']}", "progress=false")
    b = _evaluate(f"ckpt={runs['char']}", f"data.path={runs['held']}", "stride=8")
    assert b["stride"] == 8 and (a["chars"], a["tokens"]) == (b["chars"], b["tokens"])
    assert b["loss"] == pytest.approx(a["loss"], rel=0.1)  # barely trained: context hardly matters


@pytest.mark.slow
def test_evaluate_user_errors(runs, tmp_path):
    r = cli("evaluate.py", f"ckpt={runs['char']}")
    assert r.returncode == 2 and r.stderr.startswith("error: pass the text file")
    r = cli("evaluate.py", f"ckpt={runs['char']}", f"data.path={runs['held']}", "stride=33")
    assert r.returncode == 2 and "stride=33 is invalid" in r.stderr and "Traceback" not in r.stderr
    r = cli("evaluate.py", f"ckpt={runs['char']}", f"data.path={tmp_path / 'missing.txt'}")
    assert r.returncode == 2 and "not found" in r.stderr
    one = tmp_path / "one.txt"
    one.write_text("가", encoding="utf-8")
    r = cli("evaluate.py", f"ckpt={runs['char']}", f"data.path={one}")
    assert r.returncode == 2 and "nothing to score" in r.stderr


@pytest.mark.slow
def test_evaluate_interrupted_while_scoring_says_so_on_a_line_of_its_own_after_the_bar(runs, tmp_path):
    """The bar is closed before the line: `interrupted` does not share the bar's line, and no bar is drawn after it
    (one left open draws itself again as the process ends). Stderr is read as bytes: the bar redraws with \\r."""
    text = tmp_path / "long.txt"
    text.write_text(HELD_OUT * 10, encoding="utf-8")  # thousands of windows, one at a time: scoring takes seconds
    proc = start("evaluate.py", f"ckpt={runs['char']}", f"data.path={text}", "stride=1", "batch_size=1")
    err = bytearray()

    def read() -> None:
        while chunk := proc.stderr.buffer.read1():
            err.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while b"evaluate:" not in err and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)  # the bar is drawn: scoring has begun
        assert proc.wait(timeout=60) == 130, err.decode()
    finally:
        proc.kill()
        reader.join(10)
    shown = err.decode()
    assert "evaluate:" in shown and shown.endswith("\ninterrupted\n"), repr(shown[-300:])


@pytest.mark.slow
def test_jamo_model_trains_and_generate_streams_whole_syllables(runs):
    from inference.config import GenerateConfig
    from inference.generation import stream_samples
    from inference.loading import load_run

    g = cli("generate.py", f"ckpt={runs['jamo']}", "prompt=옛날에", "max_new_tokens=60", "seed=3")
    assert g.returncode == 0, g.stderr
    assert g.stdout.startswith("옛날에")
    assert not re.search("[\u1100-\u11ff]", g.stdout)  # no raw syllable parts reach the terminal

    class Recorder(io.StringIO):
        def __init__(self):
            super().__init__()
            self.pieces = []

        def write(self, s):
            self.pieces.append(s)
            return super().write(s)

    run = load_run(str(runs["jamo"]), torch.device("cpu"))
    model, tokenizer = run.model, run.tokenizer
    out = Recorder()
    settings = GenerateConfig(prompt="옛날에", max_new_tokens=60, seed=3)
    stream_samples(model, tokenizer, settings, torch.device("cpu"), out=out)
    assert out.getvalue() == g.stdout  # the same text, written piece by piece
    for piece in out.pieces[1:]:
        assert not re.search("[\u1100-\u11ff]", piece)
