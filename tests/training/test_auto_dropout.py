"""`model.dropout: null` (auto): resolved at start from the passes the run will make, printed once, recorded,
and equal in every way to typing the value it resolved to."""

from __future__ import annotations

import contextlib
import itertools

import pytest
import torch

from inference.checkpoint import load_checkpoint
from tests.helpers import KOREAN, TINY, cli, same_precision, tiny_model
from training.optim.factory import make_optimizer
from training.settings.auto import (
    MAX_DROPOUT,
    auto_weight_decays,
    dropout_for_passes,
    measured_tokens_per_sec,
    token_seconds,
)

FREE = 1.0  # passes without dropout in the tests' own runs (the lecture recipe's default is 8)


def test_dropout_grows_with_passes_and_is_capped():
    values = [dropout_for_passes(p, FREE) for p in (0.01, 0.5, 1.0, FREE, 3, 5, 10, 30, 100, 1e6)]
    assert values[:4] == [0.0] * 4  # up to the recipe's threshold: nothing to regularise
    assert values == sorted(values) and 0 < values[5] < MAX_DROPOUT and values[-1] == MAX_DROPOUT


def test_the_threshold_is_the_recipes():
    from tests.helpers import config_object

    lecture, modern = config_object("train"), config_object("train", "recipe=modern")
    assert (lecture.train.auto_dropout_after, modern.train.auto_dropout_after) == (8, 3)
    assert dropout_for_passes(8, lecture.train.auto_dropout_after) == 0.0  # the lecture still learns at 8 passes
    assert dropout_for_passes(10, lecture.train.auto_dropout_after) == 0.02  # the quick start: a little
    assert dropout_for_passes(16, lecture.train.auto_dropout_after) == 0.05  # and it memorises at 16
    assert dropout_for_passes(12, modern.train.auto_dropout_after) == 0.1  # Muon memorises: log2(4) * 0.05
    assert dropout_for_passes(64, 16) == 0.1 and dropout_for_passes(0.5, 0) == MAX_DROPOUT


def test_the_recipes_weight_decays_come_with_the_dropout_and_a_typed_one_wins():
    from tests.helpers import config_object

    lecture, modern = config_object("train").train, config_object("train", "recipe=modern").train
    assert auto_weight_decays(lecture, 0.1, None) == {}  # the lecture recipe names none
    assert auto_weight_decays(modern, 0.0, None) == {}  # no dropout (a pass or a few): the recipe's own decays
    assert auto_weight_decays(modern, 0.1, None) == {"weight_decay": 2.0, "muon_weight_decay": 0.1}
    assert auto_weight_decays(modern, 0.1, {"train.weight_decay", "seed"}) == {"muon_weight_decay": 0.1}


def test_no_pass_count_is_a_cliff():
    # the passes of a timed run come from a measured speed: a little faster must not mean much less dropout
    # (a rule that gave none below 0.05 left a ladder rung just under 16 passes without dropout: 4.775 held-out
    # bpc on the novels, against 4.415 for the rung before it, at 16 passes with 0.05)
    passes = [8 * 1.01**i for i in range(1, 300)]
    values = [dropout_for_passes(p, 8) for p in passes]
    assert values == sorted(values) and values[0] == 0.0 and values[-1] == MAX_DROPOUT
    assert max(b - a for a, b in itertools.pairwise(values)) <= 0.01 + 1e-9  # one rounding step at a time


def test_the_decays_grow_with_the_dropout_to_the_recipes():
    from tests.helpers import config_object

    modern = config_object("train", "recipe=modern").train  # 0.1 and 0.0 of its own; 2.0 and 0.1 with dropout
    assert auto_weight_decays(modern, 0.05, None) == pytest.approx({"weight_decay": 1.05, "muon_weight_decay": 0.05})
    assert auto_weight_decays(modern, 0.2, None) == {"weight_decay": 2.0, "muon_weight_decay": 0.1}
    steps = [auto_weight_decays(modern, d / 100, None)["weight_decay"] for d in range(1, 21)]
    assert steps == sorted(steps) and max(b - a for a, b in itertools.pairwise(steps)) < 0.25


def test_speed_is_measured_on_a_copy():
    model = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batches = itertools.repeat((torch.randint(0, 10, (2, 8)), torch.randint(0, 10, (2, 8))))
    rng = torch.get_rng_state()
    tps = measured_tokens_per_sec(
        model, lambda m: make_optimizer(m, 1e-2, 0.1, (0.9, 0.99), torch.device("cpu")), batches, contextlib.nullcontext
    )
    assert tps > 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(rng, torch.get_rng_state())  # the run's random streams are untouched


def test_timed_sides_take_turns_the_order_turning_every_other_round():
    """Each side's step sits beside the other's in every round, first and second in turn: a load that rises
    through the measurement weighs on both alike."""
    order: list = []

    def side(name):
        return lambda: order.append(name) or contextlib.nullcontext()

    batches = itertools.repeat((torch.randint(0, 10, (2, 8)), torch.randint(0, 10, (2, 8))))

    def optimizer(m):
        return make_optimizer(m, 1e-2, 0.1, (0.9, 0.99), torch.device("cpu"))

    timed = token_seconds(tiny_model(), optimizer, batches, [side("a"), side("b")], 3)
    assert order == ["a", "b", "a", "b", "b", "a", "a", "b"]  # a warm-up step of each first
    assert len(timed) == 3 and all(len(r) == 2 and min(r) > 0 for r in timed)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(KOREAN * 3, encoding="utf-8")
    return path


def run(tmp_path, corpus, name, *extra):
    r = cli(
        "train.py",
        *TINY,
        f"data.path={corpus}",
        f"hydra.run.dir={tmp_path / name}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "train.max_steps=80",
        *extra,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return r, load_checkpoint(tmp_path / name / "ckpt.pt")


def test_auto_is_printed_recorded_and_the_same_as_typing_it(tmp_path, corpus):
    r, auto = run(
        tmp_path,
        corpus,
        "auto",
        "model.dropout=null",
        f"train.auto_dropout_after={FREE}",
        "train.auto_weight_decay=0.5",
    )
    lines = [line for line in r.stdout.splitlines() if line.startswith("auto: model.dropout=")]
    assert len(lines) == 1 and "passes" in lines[0] and ", train.weight_decay=0.5 (" in lines[0]
    assert auto.config["train"]["weight_decay"] == 0.5
    value = auto.model_config.dropout
    expected = dropout_for_passes(80 * 2 * 32 / int(len(KOREAN * 3) * 0.9), FREE)
    assert value == pytest.approx(expected, abs=0.011) and value > 0  # about 7 passes, threshold 1: some dropout
    assert auto.config["model"]["dropout"] == value  # the job the checkpoint records holds the value
    r2, typed = run(
        tmp_path, corpus, "typed", f"model.dropout={value}", "train.weight_decay=0.5", same_precision(tmp_path / "auto")
    )
    assert "auto:" not in r2.stdout
    assert all(torch.equal(v, typed.model[k]) for k, v in auto.model.items())  # bit for bit the same run


@pytest.mark.cpu_precision  # a start's output, on either CPU precision path (`make test` runs both)
def test_typed_zero_is_not_auto(tmp_path, corpus):
    r, ckpt = run(tmp_path, corpus, "zero", "model.dropout=0")
    assert "auto:" not in r.stdout and ckpt.model_config.dropout == 0.0


def test_hparams_record_the_passes(tmp_path, corpus):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    run(tmp_path, corpus, "hp", "model.dropout=null", f"train.auto_dropout_after={FREE}")
    acc = EventAccumulator(str(tmp_path / "hp"))
    acc.Reload()
    content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    info = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info
    assert info.hparams["auto.dropout_passes"].number_value > FREE
    assert info.hparams["model.dropout"].number_value > 0


def test_the_line_names_the_time_budget_that_ends_a_run_however_large():
    from training.distributed import DistInfo
    from training.settings.auto import resolve_dropout

    for seconds in (60.0, 1e300):
        auto = resolve_dropout(None, seconds, 10_000, 256, lambda: 5_000.0, DistInfo(), torch.device("cpu"), 8.0)
        line = auto.line(10_000)
        assert auto.source == "speed" and "time budget" in line and "step limit" not in line, line
        assert "inf " not in line and len(line) < 300, line


def test_a_new_run_of_zero_steps_is_refused_before_it_starts(tmp_path):
    from common.errors import ConfigError
    from tests.helpers import config_object

    with pytest.raises(ConfigError, match="train.max_steps=0 trains nothing, so no checkpoint would be written"):
        config_object("train", "train.max_steps=0")
    assert config_object("train", "train.max_steps=0", f"train.resume={tmp_path}").train.max_steps == 0
