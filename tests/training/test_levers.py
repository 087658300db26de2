"""The training levers of the data-limited records, off by default: later targets through the same head
(train.mtp_weights, fading out) and a schedule for Muon's weight decay (train.muon_weight_decay_schedule)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from common.errors import UserError
from tests.helpers import config_object, tiny_model, train_job
from training.step import compute_loss, mtp_weights_at, multi_token_loss, muon_decay_scale
from training.trainer import train

V = 50


def test_multi_token_loss_adds_the_later_targets_through_the_same_logits():
    m = tiny_model()
    x, y = torch.randint(0, V, (2, 16)), torch.randint(0, V, (2, 16))
    total, next_token = multi_token_loss(m, x, y, [0.5, 0.25])
    torch.testing.assert_close(next_token, compute_loss(m, x, y))
    logits = m(x)[0]
    expected = (
        next_token
        + 0.5 * F.cross_entropy(logits[:, :-1].reshape(-1, V), y[:, 1:].reshape(-1))
        + 0.25 * F.cross_entropy(logits[:, :-2].reshape(-1, V), y[:, 2:].reshape(-1))
    )
    torch.testing.assert_close(total, expected)
    torch.testing.assert_close(multi_token_loss(m, x, y, [0.0])[0], next_token)


def test_the_extra_targets_fade_to_nothing_by_mtp_fade():
    t = config_object("train", "train.mtp_weights=[0.5,0.25]", "train.mtp_fade=0.5").train
    assert mtp_weights_at(t, 0.0) == [0.5, 0.25]
    assert mtp_weights_at(t, 0.25) == pytest.approx([0.25, 0.125])
    assert mtp_weights_at(t, 0.5) == [] and mtp_weights_at(t, 0.9) == []


def test_mtp_needs_the_softmax_heads_logits():
    with pytest.raises(UserError, match="train.mtp_weights scores later targets through the softmax head"):
        config_object("train", "train.mtp_weights=[0.5]", "data.tokenizer=hangul", "model.head=jamo")


def test_the_dip_schedule_holds_dips_and_rises():
    assert muon_decay_scale("constant", 0.7) == 1.0
    assert [muon_decay_scale("dip", p) for p in (0.0, 0.125, 0.5, 1.0)] == [1.0, 1.0, 0.125, 1.5625]
    assert muon_decay_scale("dip", 0.75) == pytest.approx((0.125 + 1.5625) / 2)


def test_a_run_with_the_levers_trains_and_applies_the_scheduled_decay(tmp_path):
    job = train_job(
        tmp_path,
        "recipe=modern",
        "model=tiny",
        "train.max_steps=8",
        "train.eval_interval=8",
        "train.mtp_weights=[0.5]",
        "train.muon_weight_decay=0.4",
        "train.muon_weight_decay_schedule=dip",
        "model.dropout=0.0",
    )
    from training import step as step_module

    seen = []
    real = step_module.set_muon_weight_decay
    step_module.set_muon_weight_decay = lambda opt, scale: (seen.append(scale), real(opt, scale))[1]
    try:
        result = train(job, tmp_path / "run")
    finally:
        step_module.set_muon_weight_decay = real
    assert result.step == 8 and result.val_loss < 10
    assert seen[0] == 1.0 and min(seen) < 1.0  # held at first, then dipping as the run goes on
