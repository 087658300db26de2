"""train.average: the weights' average is kept beside them, resumes exactly, is what validation, best.pt and every
reader use by default, and `weights=raw` picks the raw weights instead."""

from __future__ import annotations

import json

import pytest
import torch

from common.errors import UserError
from inference.checkpoint import load_checkpoint
from inference.loading import load_run
from tests.helpers import TINY, assert_one_line_error, cli, same_precision, scalar_tags, train_job
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
    settings = (*settings, same_precision(tmp_path / "full"))
    train(train_job(tmp_path, *settings, "train.max_steps=6"), tmp_path / "half")
    resumed = train(
        train_job(tmp_path, *settings, "train.max_steps=12", f"train.resume={tmp_path / 'half'}"), tmp_path / "half"
    )
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


def test_a_run_without_an_average_keeps_none(tmp_path):
    train(train_job(tmp_path, *COMMON, "train.max_steps=3"), tmp_path / "plain")
    plain = load_checkpoint(tmp_path / "plain" / "ckpt.pt")
    assert plain.averaged is None and plain.weights() is plain.model


NEVER = {  # how an average can be asked for and never updated: (settings, the one line's start)
    "every_beyond_the_steps": (
        ("train.average=ema", "train.average_every=5", "train.max_steps=3"),
        "train.average_every=5 never updates the average: the run stops at step 3, before the "
        "first update; lower train.average_every to at most 3, or set train.average=none",
    ),
    "swa_after_the_last_step": (
        ("train.average=swa", "train.swa_start=0.9", "train.max_steps=3"),
        "train.swa_start=0.9 never updates the average: the last step that may (step 3, "
        "train.average_every=1) comes at 0.667 of the run's 3-step schedule, before swa_start",
    ),
    "swa_start_on_a_longer_schedule": (
        ("train.average=swa", "train.max_steps=4", "train.lr_decay_steps=40"),
        "train.swa_start=0.75 never updates the average: the last step that may (step "
        "4, train.average_every=1) comes at 0.075 of the run's 40-step schedule",
    ),
    "every_skips_the_swa_steps": (
        ("train.average=swa", "train.average_every=3", "train.max_steps=5"),
        "train.swa_start=0.75 never updates the average: the last step that may (step 3, "
        "train.average_every=3) comes at 0.4 of the run's 5-step schedule",
    ),
    "every_beyond_the_epochs": (
        ("train.average=ema", "train.average_every=100000", "train.max_epochs=1"),
        "train.average_every=100000 never updates the average: the run stops at step ",
    ),
}


@pytest.mark.parametrize("case", NEVER)
@pytest.mark.cpu_precision  # a start's output, on either CPU precision path (`make test` runs both)
def test_an_average_that_would_never_update_is_refused_at_start_in_one_line(tmp_path, case, corpus):
    settings, line = NEVER[case]
    run = tmp_path / "run"
    r = cli(
        "train.py",
        *TINY,
        *settings,
        f"data.path={corpus}",
        f"hydra.run.dir={run}",
        f"data.cache_dir={tmp_path / 'cache'}",
    )
    assert_one_line_error(r, line)
    assert not run.exists()  # no run folder, no checkpoint
    assert (tmp_path / "cache").exists() == (case == "every_beyond_the_epochs")  # only an epoch limit reads the text


def test_a_resumed_run_whose_average_would_stay_empty_is_refused(tmp_path):
    from inference.checkpoint import save_checkpoint

    run = tmp_path / "run"
    train(train_job(tmp_path, *COMMON, "train.average=ema", "train.average_every=4", "train.max_steps=4"), run)
    ckpt = load_checkpoint(run / "ckpt.pt")  # as if stopped before its first update
    ckpt.averaged, ckpt.training.average_updates = None, 0
    save_checkpoint(ckpt, run / "ckpt.pt")
    before = (run / "ckpt.pt").read_bytes()
    with pytest.raises(UserError) as e:
        train(
            train_job(
                tmp_path,
                *COMMON,
                "train.average=ema",
                "train.average_every=4",
                "train.max_steps=7",
                f"train.resume={run}",
            ),
            run,
        )
    assert str(e.value) == (
        "train.average_every=4 never updates the average: the run goes on from step 4 and stops "
        "at step 7, before the first update; lower train.average_every to at most 3, or set "
        "train.average=none"
    )
    assert (run / "ckpt.pt").read_bytes() == before


def test_a_run_the_clock_stops_before_any_update_keeps_the_final_weights_and_says_so(tmp_path, corpus):
    run = tmp_path / "run"
    r = cli(
        "train.py",
        *TINY,
        "train.average=ema",
        "train.average_every=100000",
        "train.max_seconds=2",
        f"data.path={corpus}",
        f"hydra.run.dir={run}",
        f"data.cache_dir={tmp_path / 'cache'}",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == (
        "average: train.average=ema, 1 update (every 100000 steps); it is the final weights: the run stopped before "
        "any update was due; generate.py, evaluate.py, serve.py and export.py read it unless weights=raw"
    )
    ckpt = load_checkpoint(run / "ckpt.pt")
    assert ckpt.training.average_updates == 1
    _same(ckpt.averaged, ckpt.model)


def test_the_last_line_says_how_many_updates_the_average_had(tmp_path, corpus):
    run = tmp_path / "run"
    r = cli(
        "train.py",
        *TINY,
        "train.average=swa",
        "train.swa_start=0.5",
        "train.max_steps=4",
        "train.eval_interval=4",
        f"data.path={corpus}",
        f"hydra.run.dir={run}",
        f"data.cache_dir={tmp_path / 'cache'}",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == (
        "average: train.average=swa, 2 updates (every 1 step from 0.5 of the run); generate.py, evaluate.py, "
        "serve.py and export.py read it unless weights=raw"
    )
    assert load_checkpoint(run / "ckpt.pt").training.average_updates == 2


@pytest.mark.slow
def test_generate_evaluate_and_export_use_the_average_unless_asked_for_raw(tmp_path, small_corpus):
    run = tmp_path / "run"
    r = cli(
        "train.py",
        "model=tiny",
        "device=cpu",
        "train.max_steps=6",
        "train.eval_interval=6",
        "train.eval_steps=1",
        "train.sample_chars=0",
        "train.average=ema",
        "train.ema_half_life=1",
        f"data.path={small_corpus}",
        f"hydra.run.dir={run}",
        f"data.cache_dir={tmp_path / 'cache'}",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    score = {
        w: json.loads(
            cli(
                "evaluate.py",
                f"ckpt={run}",
                f"data.path={small_corpus}",
                "device=cpu",
                "progress=false",
                f"weights={w}",
            ).stdout
        )
        for w in ("averaged", "raw")
    }
    assert score["averaged"]["loss"] != score["raw"]["loss"]
    default = json.loads(
        cli("evaluate.py", f"ckpt={run}", f"data.path={small_corpus}", "device=cpu", "progress=false").stdout
    )
    assert default["loss"] == score["averaged"]["loss"]
    r = cli("export.py", f"ckpt={run}", f"out={tmp_path / 'm'}", "verify=false")
    assert r.returncode == 0, r.stderr[-2000:]
    exported = load_run(tmp_path / "m", torch.device("cpu")).model.state_dict()
    for k, v in load_checkpoint(run / "ckpt.pt").averaged.items():
        torch.testing.assert_close(exported[k], v)
