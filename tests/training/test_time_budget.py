"""The budget the user gives is the budget used: passes over the data end a timed run only when typed, the
schedule spans the time, and the result line and TensorBoard say which limit ended the run."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import pytest

from tests.helpers import KOREAN, TINY, cli
from training.optim.schedule import lr_at, lr_at_fraction
from training.session import epochs_to_steps, step_limit
from training.settings.config import TrainConfig
from training.step import learning_rate

RESULT = re.compile(r"run: \S+\s+step (\d+).*\((\w+)\)")


@pytest.fixture
def small_corpus(tmp_path):
    path = tmp_path / "small.txt"
    path.write_text((KOREAN * 2)[:420], encoding="utf-8")  # 10 passes of batch 1 x 32 tokens: about 120 steps
    return path


def train(tmp_path, corpus, *extra, batch_size: int = 1):
    r = cli(
        "train.py",
        *TINY,
        f"train.batch_size={batch_size}",
        "train.eval_interval=1000",
        f"data.path={corpus}",
        f"hydra.run.dir={tmp_path / 'run'}",
        f"data.cache_dir={tmp_path / 'cache'}",
        *extra,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    step, stopped = RESULT.search(r.stdout).groups()
    return int(step), stopped


def test_time_budget_is_not_cut_short_by_passes(tmp_path, small_corpus):
    """Ten passes of batch 8 are 15 steps, which even a busy machine makes well within the budget."""
    step, stopped = train(tmp_path, small_corpus, "train.max_seconds=4", batch_size=8)
    assert stopped == "max_seconds"
    assert step > epochs_to_steps(10, 378, 8 * 32)  # more than the ten passes that ended such a run before


def test_typed_passes_still_end_a_timed_run(tmp_path, small_corpus):
    step, stopped = train(tmp_path, small_corpus, "train.max_seconds=300", "train.max_epochs=2")
    assert stopped == "max_epochs" and step <= epochs_to_steps(2, 378, 32)


def test_step_limit_names_the_key_that_set_it():
    assert step_limit(TrainConfig(max_steps=7), 10_000, 100) == (7, "max_steps")
    assert step_limit(TrainConfig(), 10_000, 100) == (1000, "max_epochs")  # 10 passes when nothing is given
    assert step_limit(TrainConfig(max_epochs=2.5), 10_000, 100) == (250, "max_epochs")
    assert step_limit(TrainConfig(max_seconds=60), 10_000, 100) == (None, "max_seconds")
    assert step_limit(TrainConfig(max_seconds=60, max_epochs=1), 10_000, 100) == (100, "max_epochs")


def test_fraction_schedule_warms_up_by_steps_and_ends_at_the_floor():
    lr, lo = 1e-3, 1e-5
    assert lr_at_fraction(0, 0.5, lr, lo, 10) == pytest.approx(lr / 11)  # warmup counts steps, not time
    assert lr_at_fraction(10, 0.0, lr, lo, 10) == pytest.approx(lr)
    assert lr_at_fraction(500, 0.5, lr, lo, 10) == pytest.approx((lr + lo) / 2)
    assert lr_at_fraction(900, 1.0, lr, lo, 10) == pytest.approx(lo)
    assert lr_at_fraction(900, 1.7, lr, lo, 10) == pytest.approx(lo)  # past the budget: the floor
    assert lr_at_fraction(3, 0.9, lr, lo, 10, "constant") == lr


def test_learning_rate_follows_the_clock_when_only_time_limits_the_run():
    t = TrainConfig(max_seconds=100, lr=1e-3, min_lr=1e-5, warmup_steps=10)
    s = SimpleNamespace(job=SimpleNamespace(train=t), decay_steps=None)
    state = SimpleNamespace(step=50, elapsed=lambda: 25.0)
    expected = 1e-5 + 0.5 * (1 + math.cos(math.pi * 0.25)) * (1e-3 - 1e-5)
    assert learning_rate(s, state) == pytest.approx(expected)
    s.decay_steps = 200  # a step limit too: whichever is further along (here the steps, 50 of 200 = 0.25)
    state.elapsed = lambda: 10.0
    assert learning_rate(s, state) == pytest.approx(lr_at(50, 1e-3, 1e-5, 10, 200))


def test_tensorboard_says_which_limit_ended_the_run(tmp_path, small_corpus):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    train(tmp_path, small_corpus, "train.max_seconds=300", "train.max_epochs=1")
    acc = EventAccumulator(str(tmp_path / "run"), size_guidance={"tensors": 0})
    acc.Reload()
    event = acc.Tensors("run/stopped/text_summary")[-1]
    text = event.tensor_proto.string_val[0].decode()
    assert text.startswith("max_epochs at step") and "train.max_epochs" in text
