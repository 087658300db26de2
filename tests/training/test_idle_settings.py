"""No lever silently ignored: a setting given a value of its own while another setting makes it do nothing is refused
in one line naming both keys, before any work (training/settings/idle.py); never the defaults or a recipe's values."""

from __future__ import annotations

import pytest

from common.errors import UserError
from tests.helpers import TINY, assert_one_line_error, cli, config_object, train_job
from training.trainer import train

IDLE = {  # overrides: the one line
    (
        "train.muon_weight_decay_schedule=dip",
    ): "train.muon_weight_decay_schedule=dip cannot act in this run: it acts only with train.optimizer=muon, and "
    "this run has train.optimizer=adamw; drop train.muon_weight_decay_schedule, or set train.optimizer=muon",
    ("train.muon_lr=0.05",): "train.muon_lr=0.05 cannot act in this run: it acts only with train.optimizer=muon",
    ("recipe=modern", "train.optimizer=adamw", "train.muon_lr=0.05"): "train.muon_lr=0.05 cannot act in this run",
    (
        "train.ema_half_life=50",
    ): "train.ema_half_life=50.0 cannot act in this run: it acts only with train.average=ema, and this run has "
    "train.average=none",
    (
        "train.average=ema",
        "train.swa_start=0.5",
    ): "train.swa_start=0.5 cannot act in this run: it acts only with train.average=swa, and this run has "
    "train.average=ema",
    ("train.average_every=4",): "train.average_every=4 cannot act in this run: it acts only with train.average=ema "
    "or swa, and this run has train.average=none",
    ("train.mtp_fade=0.25",): "train.mtp_fade=0.25 cannot act in this run: it acts only with train.mtp_weights=[...]",
    (
        "train.lr_schedule=constant",
        "train.min_lr=0.00001",
    ): "train.min_lr=1e-05 cannot act in this run: it acts only with train.lr_schedule=cosine, and this run has "
    "train.lr_schedule=constant",
    ("train.lr_schedule=constant", "train.lr_decay_steps=50"): "train.lr_decay_steps=50 cannot act in this run",
    (
        "train.max_steps=10",
        "train.max_epochs=2",
    ): "train.max_epochs=2.0 cannot act in this run: it acts only with train.max_steps=null, and this run has "
    "train.max_steps=10; drop train.max_epochs, or set train.max_steps=null",
    (
        "data.val_files=1",
        "data.val_fraction=0.2",
    ): "data.val_fraction=0.2 cannot act in this run: it acts only with data.val_files=null, and this run has "
    "data.val_files=1",
    ("train.init_weights=raw",): "train.init_weights=raw cannot act in this run",
    (
        "model.context_length=4",
        "train.mtp_weights=[0.5,0.5,0.5,0.5]",
    ): "train.mtp_weights has 4 entries, the last scoring the token 5 ahead, but a window of "
    "model.context_length=4 holds targets at most 4 ahead, so its last 1 would score nothing; give at most 3 "
    "entries (or a longer context)",
    ("train.mtp_weights=[0.5,0]",): "train.mtp_weights=[0.5, 0.0] ends in a 0 weight, which scores nothing",
    (
        "train.lr_schedule=constant",
        "train.warmup_steps=10",
    ): "train.warmup_steps=10 cannot act in this run: it acts only with train.lr_schedule=cosine, and this run has "
    "train.lr_schedule=constant; drop train.warmup_steps, or set train.lr_schedule=cosine",
    (
        "train.snapshot_interval=0",
        "train.sample_prompts=['하늘']",
    ): "train.sample_prompts=['하늘'] cannot act in this run: it acts only with train.snapshot_interval above 0, and "
    "this run has train.snapshot_interval=0",
    ("train.snapshot_interval=0", "train.sample_tokens=50"): "train.sample_tokens=50 cannot act in this run",
    ("train.snapshot_interval=0", "train.attention_tokens=16"): "train.attention_tokens=16 cannot act in this run",
    (
        "model.dropout=0.1",
        "train.auto_dropout_after=4",
    ): "train.auto_dropout_after=4.0 cannot act in this run: it acts only with model.dropout=null (auto), and this "
    "run has model.dropout=0.1",
    (
        "train.max_steps=10",
        "train.warmup_steps=10",
    ): "train.warmup_steps=10 does not end before the run does, at train.max_steps=10: the rate would never reach "
    "train.lr=0.002, nor decay to train.min_lr; give train.warmup_steps below 10, or a longer run",
}


@pytest.mark.parametrize("overrides", IDLE, ids=lambda o: "+".join(o))
def test_a_setting_that_cannot_act_is_refused_naming_its_key(overrides):
    with pytest.raises(UserError) as e:
        config_object("train", *overrides)
    assert str(e.value).startswith(IDLE[overrides]), str(e.value)


@pytest.mark.parametrize(
    "overrides",
    [
        ("recipe=modern",),
        ("recipe=modern", "model.dropout=0.0"),
        ("train.average=swa", "train.swa_start=0.5"),
        ("recipe=modern", "train.optimizer=adamw"),  # the recipe's own Muon rates are not the user's levers
        ("train.optimizer=muon", "train.muon_weight_decay_schedule=dip"),
        ("model.context_length=4", "train.mtp_weights=[0.5,0,0.25]"),
        ("data.val_files=1",),
        ("train.max_seconds=60", "train.max_epochs=2"),
        ("train.lr_schedule=constant",),
        ("train.lr_schedule=constant", "train.warmup_steps=0"),  # no warmup asked for
        ("train.snapshot_interval=0", "train.sample_tokens=0", "train.attention_tokens=0", "train.sample_prompts=[]"),
        ("train.snapshot_interval=0",),
        ("model.dropout=0.1",),
        ("train.max_steps=10",),  # the defaults stay quiet
        ("model=small", "train.auto_dropout_after=4"),  # auto dropout: it acts
        ("recipe=modern", "model.dropout=0.1"),  # the recipe's own auto_dropout_after and warmup are not the user's
        ("recipe=modern", "train.max_steps=10"),
        ("train.max_steps=10", "train.warmup_steps=9"),
        TINY,
    ],
)
def test_settings_that_act_or_were_not_chosen_are_accepted(overrides):
    config_object("train", *overrides)


def test_train_py_refuses_before_making_the_run_folder(tmp_path):
    run = tmp_path / "run"
    r = cli("train.py", *TINY, "train.muon_weight_decay_schedule=dip", f"hydra.run.dir={run}")
    assert assert_one_line_error(r) == f"error: {IDLE[('train.muon_weight_decay_schedule=dip',)]}"
    assert not run.exists()


def test_a_resumed_run_checks_what_it_types_against_its_checkpoint(tmp_path, corpus, monkeypatch):
    import training.settings.resume as settings
    from training.trainer import train

    common = (f"data.path={corpus}", "train.eval_interval=2")
    train(train_job(tmp_path, *common, "train.max_steps=2"), tmp_path / "run")
    resumed = (*common, "train.max_steps=3", f"train.resume={tmp_path / 'run'}", "train.muon_lr=0.05")
    monkeypatch.setattr(settings, "_command_line", list(resumed))  # as train.py records what was typed
    with pytest.raises(
        UserError,
        match="train.muon_lr=0.05 cannot act in this run: it acts only with "
        "train.optimizer=muon, and this run has train.optimizer=adamw",
    ):
        train(train_job(tmp_path, *resumed), tmp_path / "run")


def test_train_init_from_checks_the_targets_against_the_source_context(tmp_path, corpus):
    from training.trainer import train

    train(train_job(tmp_path, f"data.path={corpus}", "model.context_length=4", "train.max_steps=1"), tmp_path / "src")
    with pytest.raises(UserError, match="model.context_length=4 holds targets at most 4 ahead"):
        train(
            train_job(
                tmp_path,
                f"data.path={corpus}",
                f"train.init_from={tmp_path / 'src'}",
                "train.mtp_weights=[0.5,0.5,0.5,0.5]",
            ),
            tmp_path / "new",
        )
    assert not (tmp_path / "new").exists()


def test_a_warmup_longer_than_the_passes_is_refused_once_they_are_steps(tmp_path, corpus):
    with pytest.raises(
        UserError,
        match=r"^train.warmup_steps=500 does not end before the run does, at step \d+ "
        r"\(train.max_epochs=1 passes over this training split\)",
    ):
        train(
            train_job(tmp_path, f"data.path={corpus}", "train.max_epochs=1", "train.warmup_steps=500"), tmp_path / "run"
        )
    assert not (tmp_path / "run" / "ckpt.pt").exists()
