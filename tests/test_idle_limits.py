"""Settings that cannot act, the rest of them (issue 54), and a resume that keeps its checkpoint's precision.

- A warmup under a constant schedule or longer than the run, a snapshot's settings with snapshots off, and
  `train.auto_dropout_after` beside a model.dropout of the run's own are refused in one line, through the rules of
  training/settings/idle.py: only values the user chose, never the defaults or a recipe's.
- A resume with nothing left to train says so, exits 0, and leaves the run (its checkpoints, its .hydra record) as
  it was.
- A resume computes in its checkpoint's precision, whatever `auto` means where it resumes; a typed train.dtype that
  differs is applied and named (training/settings/precision.py)."""

from __future__ import annotations

import pytest

import training.settings.resume as settings
from common.atomic_files import file_sha256
from common.errors import UserError
from inference.checkpoint import load_checkpoint
from tests.helpers import TINY, cli, config_object, train_job
from training.trainer import train

REFUSED = {
    ("train.lr_schedule=constant", "train.warmup_steps=10"):
        "train.warmup_steps=10 cannot act in this run: it acts only with train.lr_schedule=cosine, and this run has "
        "train.lr_schedule=constant; drop train.warmup_steps, or set train.lr_schedule=cosine",
    ("train.snapshot_interval=0", "train.sample_prompts=['하늘']"):
        "train.sample_prompts=['하늘'] cannot act in this run: it acts only with train.snapshot_interval above 0, and "
        "this run has train.snapshot_interval=0",
    ("train.snapshot_interval=0", "train.sample_tokens=50"): "train.sample_tokens=50 cannot act in this run",
    ("train.snapshot_interval=0", "train.attention_tokens=16"): "train.attention_tokens=16 cannot act in this run",
    ("model.dropout=0.1", "train.auto_dropout_after=4"):
        "train.auto_dropout_after=4.0 cannot act in this run: it acts only with model.dropout=null (auto), and this "
        "run has model.dropout=0.1",
    ("train.max_steps=10", "train.warmup_steps=10"):
        "train.warmup_steps=10 does not end before the run does, at train.max_steps=10: the rate would never reach "
        "train.lr=0.002, nor decay to train.min_lr; give train.warmup_steps below 10, or a longer run",
}


@pytest.mark.parametrize("overrides", REFUSED, ids=lambda o: "+".join(o))
def test_a_setting_that_cannot_act_is_refused(overrides):
    with pytest.raises(UserError) as e:
        config_object("train", *overrides)
    assert str(e.value).startswith(REFUSED[overrides]), str(e.value)


@pytest.mark.parametrize("overrides", [
    ("train.lr_schedule=constant", "train.warmup_steps=0"),  # no warmup asked for
    ("train.snapshot_interval=0", "train.sample_tokens=0", "train.attention_tokens=0", "train.sample_prompts=[]"),
    ("train.snapshot_interval=0",), ("model.dropout=0.1",), ("train.max_steps=10",),  # the defaults stay quiet
    ("model=small", "train.auto_dropout_after=4"),  # auto dropout: it acts
    ("recipe=modern", "model.dropout=0.1"),  # the recipe's own auto_dropout_after and warmup are not the user's
    ("recipe=modern", "train.max_steps=10"), ("train.max_steps=10", "train.warmup_steps=9"), TINY])
def test_settings_that_act_or_were_not_chosen_are_accepted(overrides):
    config_object("train", *overrides)


def test_a_warmup_longer_than_the_passes_is_refused_once_they_are_steps(tmp_path, corpus):
    with pytest.raises(UserError, match=r"^train.warmup_steps=500 does not end before the run does, at step \d+ "
                                        r"\(train.max_epochs=1 passes over this training split\)"):
        train(train_job(tmp_path, f"data.path={corpus}", "train.max_epochs=1", "train.warmup_steps=500"),
              tmp_path / "run")
    assert not (tmp_path / "run" / "ckpt.pt").exists()


def test_a_resume_with_nothing_left_to_train_says_so_and_changes_nothing(tmp_path, corpus):
    """train.py: exit 0, one line, the checkpoints and the recorded settings (.hydra) byte for byte."""
    run = tmp_path / "run"
    common = (*TINY, f"data.path={corpus}", f"data.cache_dir={tmp_path / 'cache'}")
    r = cli("train.py", *common, "train.max_steps=3", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr
    files = [run / "ckpt.pt", run / "best.pt", *sorted((run / ".hydra").iterdir())]
    before = {p: p.read_bytes() for p in files}
    r = cli("train.py", *common, "train.max_steps=2", "train.lr=0.01", f"train.resume={run}")
    assert r.returncode == 0, r.stderr
    assert ("nothing to train: the checkpoint resumed is at step 3, and train.max_steps=2 ends the run there; it "
            "is evaluated as it stands (raise train.max_steps to train on)") in r.stdout.splitlines()
    assert f"run: {run}  step 3  val loss " in r.stdout
    assert {p: p.read_bytes() for p in files} == before


def test_a_resume_whose_time_budget_is_used_up_trains_nothing(tmp_path, corpus, capsys):
    run = tmp_path / "run"
    train(train_job(tmp_path, f"data.path={corpus}", "train.max_steps=3", "train.snapshot_interval=0"), run)
    before = file_sha256(run / "ckpt.pt")
    result = train(train_job(tmp_path, f"data.path={corpus}", "train.max_seconds=0.001", "train.snapshot_interval=0",
                             f"train.resume={run}"), run)
    assert (result.step, result.stopped) == (3, "max_seconds") and file_sha256(run / "ckpt.pt") == before
    assert "train.max_seconds=0.001, used up" in capsys.readouterr().out


def test_a_resume_keeps_its_checkpoints_precision(tmp_path, corpus, monkeypatch, capsys):
    """A float32 run resumed where `auto` means bf16 (this CPU pretends to have bf16 instructions) stays float32;
    a typed train.dtype is applied and named like any changed setting."""
    import common.device

    run, common_args = tmp_path / "run", (f"data.path={corpus}", "train.snapshot_interval=0")
    train(train_job(tmp_path, *common_args, "train.max_steps=2", "train.dtype=float32"), run)
    monkeypatch.delenv(common.device.CPU_BF16_ENV, raising=False)
    monkeypatch.setattr(common.device, "_cpu_flags_have_bf16", lambda: True)
    import torch

    def bf16_faster(model, optimizer_for, batches, autocast_fn) -> float:  # tokens/s, as timed on such a CPU
        return 2.0 if isinstance(autocast_fn(), torch.autocast) else 1.0

    monkeypatch.setattr("training.settings.precision.measured_tokens_per_sec", bf16_faster)
    capsys.readouterr()
    for steps, typed, dtype in ((4, (), "float32"), (6, ("train.dtype=bfloat16",), "bfloat16")):
        overrides = (*common_args, f"train.max_steps={steps}", f"train.resume={run}", *typed)
        monkeypatch.setattr(settings, "_command_line", list(overrides))  # as train.py records what was typed
        train(train_job(tmp_path, *overrides), run)
        out = capsys.readouterr().out
        assert load_checkpoint(run / "ckpt.pt").config["train"]["dtype"] == dtype
        assert ("precision: bfloat16 autocast on cpu (train.dtype=bfloat16)" in out) == bool(typed), out
        assert ("train.dtype=bfloat16 (was float32)" in out) == bool(typed), out
    fresh = train_job(tmp_path, *common_args, "train.max_steps=1")  # auto, recorded as what it resolved to
    monkeypatch.setattr(settings, "_command_line", None)
    train(fresh, tmp_path / "fresh")
    assert load_checkpoint(tmp_path / "fresh" / "ckpt.pt").config["train"]["dtype"] == "bfloat16"
