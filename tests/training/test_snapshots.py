"""What a training run does around its steps: TensorBoard snapshots rarer than evaluations, and `best.pt`
copied byte for byte from that evaluation's `ckpt.pt` instead of serialised a second time."""

import os

import pytest
import torch

from common import atomic_files
from common.errors import UserError
from inference.checkpoint import copy_checkpoint, load_checkpoint
from tests.helpers import train_job
from training.trainer import snapshot_due, train


def test_snapshots_come_first_then_after_the_interval_and_at_the_end():
    due = [
        step
        for step in (2, 4, 6, 8, 10)
        if snapshot_due(4, last_snapshot=None if step == 2 else 2, step=step, last=False)
    ]
    assert due == [2, 6, 8, 10]  # the first (no snapshot yet), then 4+ steps after step 2
    assert snapshot_due(1000, 250, 300, last=True)  # the last evaluation always shows the final model
    assert not snapshot_due(1000, 250, 500, last=False)
    assert not snapshot_due(0, None, 250, last=True)  # 0 = none at all


def _event_steps(run, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run), size_guidance={"tensors": 0, "images": 0, "scalars": 0}).Reload()
    if tag.startswith("attention/"):
        return [e.step for e in events.Images(tag)]
    if tag in events.Tags()["scalars"]:
        return [e.step for e in events.Scalars(tag)]
    return [e.step for e in events.Tensors(f"{tag}/text_summary")]


def test_a_run_evaluates_at_every_interval_but_draws_snapshots_less_often(tmp_path, small_corpus):
    run = tmp_path / "run"
    train(
        train_job(
            tmp_path,
            f"data.path={small_corpus}",
            "train.max_steps=10",
            "train.eval_interval=2",
            "train.snapshot_interval=4",
            "train.sample_tokens=3",
            "train.attention_tokens=4",
            "model.context_length=16",
        ),
        run,
    )
    assert _event_steps(run, "val/loss") == [2, 4, 6, 8, 10]
    assert _event_steps(run, "samples/prompt_0") == [2, 6, 10]
    assert _event_steps(run, "attention/block_0") == [2, 6, 10]


def test_best_is_the_same_file_as_the_checkpoint_of_its_evaluation(tmp_path, small_corpus):
    run = tmp_path / "run"
    result = train(
        train_job(
            tmp_path,
            f"data.path={small_corpus}",
            "train.max_steps=6",
            "train.eval_interval=3",
            "model.context_length=16",
            "train.lr=3e-3",
            "model.dropout=0",
        ),
        run,
    )
    best, last = load_checkpoint(run / "best.pt"), load_checkpoint(run / "ckpt.pt")
    assert best.training.val_loss == result.best_val_loss
    if result.best_val_loss == result.val_loss:  # the last evaluation was the best: the same bytes, two files
        assert (run / "best.pt").read_bytes() == (run / "ckpt.pt").read_bytes()
        assert not os.path.samefile(run / "best.pt", run / "ckpt.pt")
    assert all(torch.equal(v, last.model[k]) for k, v in best.model.items()) == (best.step == last.step)


def test_the_copy_is_its_own_file_whatever_later_writes_either_name(tmp_path):
    (tmp_path / "ckpt.pt").write_bytes(b"first")
    copy_checkpoint(tmp_path / "ckpt.pt", tmp_path / "best.pt")
    atomic_files.atomic_write(tmp_path / "ckpt.pt", b"second")
    assert (tmp_path / "best.pt").read_bytes() == b"first"
    copy_checkpoint(tmp_path / "ckpt.pt", tmp_path / "best.pt")
    (tmp_path / "best.pt").write_bytes(b"a user's cp over best.pt")  # in place: must not reach ckpt.pt
    assert (tmp_path / "ckpt.pt").read_bytes() == b"second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "ckpt.pt"]  # no temp file left


def test_a_failed_copy_is_one_user_error_and_keeps_the_old_best(tmp_path, monkeypatch):
    (tmp_path / "ckpt.pt").write_bytes(b"new")
    (tmp_path / "best.pt").write_bytes(b"old")

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("inference.checkpoint.shutil.copyfileobj", full)
    with pytest.raises(UserError, match="could not save checkpoint .*best.pt .the disk is full.; the previous best.pt"):
        copy_checkpoint(tmp_path / "ckpt.pt", tmp_path / "best.pt")
    assert (tmp_path / "best.pt").read_bytes() == b"old"
