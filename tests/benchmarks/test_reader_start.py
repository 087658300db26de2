"""benchmarks/reader_start.py: generate.py timed from launch to its first sampled character, per checkout, and
whether it imported torch._dynamo (a reader's start does not pay for it); its refusals."""

from __future__ import annotations

import pytest

from benchmarks.reader_start import measure, parse_args
from common.errors import UserError
from inference.checkpoint import Checkpoint, save_checkpoint
from tests.helpers import ROOT, tiny_model
from tokenizer import KoreanCharTokenizer


def test_a_reader_starts_without_torch_dynamo_and_is_timed(tmp_path):
    tok = KoreanCharTokenizer.from_text("가나다라마바사 아자차카타파하.\n")
    model = tiny_model(vocab_size=tok.vocab_size)
    run = tmp_path / "run"
    run.mkdir()
    save_checkpoint(Checkpoint(model.config, model.state_dict(), tok.to_dict(), 1.0), run / "ckpt.pt")
    result = measure({"root": ROOT}, run, 1)
    timed = result["root"]
    assert 0 < timed["first_char_s"] <= timed["exit_s"] and len(timed["first_char_all_s"]) == 1
    assert timed["imports_torch_dynamo"] is False


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--root", "/nonexistent/checkout"], "--root /nonexistent/checkout: no generate.py there"),
        (["--baseline", "/"], "--baseline /: no generate.py there"),
        (["--run", "/nonexistent/run"], "--run /nonexistent/run: no such run"),
        (["--repeat", "0"], "--repeat=0 is invalid: it must be a positive integer"),
    ],
)
def test_its_mistakes_are_one_line(args, needle):
    with pytest.raises(UserError, match=needle):
        parse_args(args)
