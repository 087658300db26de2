"""train.average: the weights' average is kept beside them, resumes exactly, is what validation, best.pt and every
reader use by default, and `weights=raw` picks the raw weights instead."""

from __future__ import annotations

import json

import pytest
import torch

from inference.checkpoint import load_checkpoint
from inference.loading import load_run
from tests.helpers import cli, scalar_tags, train_job
from training.trainer import train

COMMON = ("model.dropout=0.1", "train.eval_interval=3", "train.lr_decay_steps=12", "train.warmup_steps=2")


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("kind", ["ema", "swa"])
def test_a_resumed_run_averages_exactly_as_an_unbroken_one(tmp_path, kind):
    settings = (*COMMON, f"train.average={kind}", "train.ema_half_life=3" if kind == "ema" else "train.swa_start=0.25")
    full = train(train_job(tmp_path, *settings, "train.max_steps=12"), tmp_path / "full")
    train(train_job(tmp_path, *settings, "train.max_steps=6"), tmp_path / "half")
    resumed = train(train_job(tmp_path, *settings, "train.max_steps=12", f"train.resume={tmp_path / 'half'}"),
                    tmp_path / "half")
    a, b = load_checkpoint(tmp_path / "full" / "ckpt.pt"), load_checkpoint(tmp_path / "half" / "ckpt.pt")
    _same(a.model, b.model)
    _same(a.averaged, b.averaged)
    assert a.training.average_updates == b.training.average_updates == (12 if kind == "ema" else 9)
    assert resumed.val_loss == full.val_loss
    assert not all(torch.equal(a.model[k], a.averaged[k]) for k in a.model)  # an average, not a copy


def test_validation_scores_the_average_and_logs_the_raw_weights_beside_it(tmp_path):
    run = tmp_path / "run"
    train(train_job(tmp_path, *COMMON, "train.average=ema", "train.ema_half_life=2", "train.max_steps=6"), run)
    tags = scalar_tags(run)
    assert [s for s, _ in tags["val/loss_raw"]] == [s for s, _ in tags["val/loss"]] == [3, 6]
    assert tags["val/loss_raw"][-1][1] != tags["val/loss"][-1][1]
    ckpt = load_checkpoint(run / "ckpt.pt")
    averaged = load_run(run, torch.device("cpu")).model.state_dict()
    raw = load_run(run, torch.device("cpu"), weights="raw").model.state_dict()
    _same(averaged, ckpt.averaged)
    _same(raw, ckpt.model)


def test_a_run_without_an_average_keeps_none_and_swa_waits_for_its_start(tmp_path):
    train(train_job(tmp_path, *COMMON, "train.max_steps=3"), tmp_path / "plain")
    plain = load_checkpoint(tmp_path / "plain" / "ckpt.pt")
    assert plain.averaged is None and plain.weights() is plain.model
    train(train_job(tmp_path, *COMMON, "train.average=swa", "train.swa_start=0.9", "train.max_steps=3"),
          tmp_path / "early")
    early = load_checkpoint(tmp_path / "early" / "ckpt.pt")
    assert early.averaged is None and early.training.average_updates == 0  # the run ended before the average began


@pytest.mark.slow
def test_generate_evaluate_and_export_use_the_average_unless_asked_for_raw(tmp_path, small_corpus):
    run = tmp_path / "run"
    r = cli("train.py", "model=tiny", "device=cpu", "train.max_steps=6", "train.eval_interval=6", "train.eval_steps=1",
            "train.sample_chars=0", "train.average=ema", "train.ema_half_life=1", f"data.path={small_corpus}",
            f"hydra.run.dir={run}", f"data.cache_dir={tmp_path / 'cache'}")
    assert r.returncode == 0, r.stderr[-2000:]
    score = {w: json.loads(cli("evaluate.py", f"ckpt={run}", f"data.path={small_corpus}", "device=cpu",
                               "progress=false", f"weights={w}").stdout) for w in ("averaged", "raw")}
    assert score["averaged"]["loss"] != score["raw"]["loss"]
    default = json.loads(cli("evaluate.py", f"ckpt={run}", f"data.path={small_corpus}", "device=cpu",
                             "progress=false").stdout)
    assert default["loss"] == score["averaged"]["loss"]
    r = cli("export.py", f"ckpt={run}", f"out={tmp_path / 'm'}", "verify=false")
    assert r.returncode == 0, r.stderr[-2000:]
    exported = load_run(tmp_path / "m", torch.device("cpu")).model.state_dict()
    for k, v in load_checkpoint(run / "ckpt.pt").averaged.items():
        torch.testing.assert_close(exported[k], v)
