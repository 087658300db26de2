"""benchmarks.hangul_stages: a model's loss split into the staged head's three choices."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from benchmarks.hangul_stages import stage_bits
from common.errors import UserError
from model import AttentionLanguageModel
from tests.helpers import KOREAN
from tokenizer import build_tokenizer

SMALL = dict(context_length=16, embedding_size=32, head_size=32, num_heads=2, num_blocks=1, dropout=0.0)


def _model(vocab: int, **kw) -> AttentionLanguageModel:
    torch.manual_seed(0)
    m = AttentionLanguageModel(vocab_size=vocab, **SMALL, **kw).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * 0.3)  # far from uniform, so a wrong marginal would show
    return m


def _windows(tok, text: str, L: int) -> torch.Tensor:
    ids = torch.from_numpy(tok.encode(text, normalized=True).astype("int64"))
    return torch.stack([ids[s : s + L + 1] for s in range(0, len(ids) - L - 1, L)])


def test_the_staged_heads_own_stages_are_what_it_reports():
    tok = build_tokenizer("hangul", [KOREAN])
    m = _model(tok.vocab_size, embedding="jamo", head="jamo")
    out = stage_bits(m, tok, KOREAN, set(KOREAN))
    w = _windows(tok, KOREAN, m.context_length)
    t = w[:, 1:]
    syl = (t >= 1) & (t <= 11172)
    with torch.no_grad():
        h = m.hidden(w[:, :-1])
        logits1, _ = m.lm_head._stage1(h)
        own = -F.log_softmax(logits1.double(), -1).gather(-1, ((t - 1) // 588).clamp(min=0)[..., None])[..., 0]
        total = m.token_losses(w[:, :-1], t).double()
    assert out["syllables"] == int(syl.sum()) and out["others"] == int((~syl).sum())
    assert out["bits_initial"] == pytest.approx(own[syl].mean().item() / math.log(2), abs=2e-4)
    assert out["bpc"] == pytest.approx(total.mean().item() / math.log(2), abs=2e-4)


def test_a_softmax_heads_stages_add_up_to_its_loss():
    tok = build_tokenizer("char", [KOREAN])
    m = _model(tok.vocab_size)
    out = stage_bits(m, tok, KOREAN, set(KOREAN) - {"봄"})  # an unseen character is left out of every number
    w = _windows(tok, KOREAN, m.context_length)
    t = w[:, 1:]
    keep = t != tok.encode("봄")[0]
    with torch.no_grad():
        total = m.token_losses(w[:, :-1], t).double()[keep]
    stages = out["bits_initial"] + out["bits_medial"] + out["bits_final"]
    assert out["syllables"] + out["others"] == int(keep.sum())
    assert (stages * out["syllables"] + out["bits_other"] * out["others"]) / int(keep.sum()) == pytest.approx(
        total.mean().item() / math.log(2), abs=1e-3
    )
    assert out["bpc"] == pytest.approx(total.mean().item() / math.log(2), abs=2e-4)
    assert min(out["bits_initial"], out["bits_medial"], out["bits_final"]) > 0


def test_a_tokenizer_that_spells_syllables_is_refused():
    tok = build_tokenizer("jamo", [KOREAN])
    with pytest.raises(UserError, match="one token per character"):
        stage_bits(_model(tok.vocab_size), tok, KOREAN, set(KOREAN))
