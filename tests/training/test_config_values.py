"""Every key typed on the command line is checked for type and range before any work, in one place.

Types are refused by the schema while Hydra composes; ranges by the dataclasses' `__post_init__`. These run
in-process (composing is enough); tests/cli/test_one_line_errors.py checks the same path through the real command line.
"""

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf.errors import OmegaConfBaseException

from common.errors import ConfigError, UserError
from tests.helpers import compose_config, config_object

OUT_OF_RANGE = [
    "train.max_epochs=inf",
    "train.max_epochs=nan",
    "train.max_epochs=0",
    "train.max_epochs=-1",
    "seed=-1",
    "train.lr=0",
    "train.lr=-1e-3",
    "train.lr=nan",
    "train.lr=inf",
    "train.min_lr=1.0",
    "train.beta1=1.0",
    "train.beta2=-0.1",
    "train.grad_clip=-1",
    "train.weight_decay=nan",
    "train.warmup_steps=-1",
    "train.lr_decay_steps=0",
    "train.max_seconds=0",
    "train.max_seconds=inf",
    "train.max_steps=-1",
    "train.sample_chars=-1",
    "train.sample_tokens=-1",
    "train.attention_tokens=-1",
    "train.batch_size=0",
    "train.eval_interval=0",
    "train.eval_steps=0",
    "train.grad_accum_steps=0",
    "train.log_interval=0",
    "train.lr_schedule=linear",
    "train.dtype=float64",
    "device=tpu",
    "device=cuda:x",
    "data.val_fraction=0",
    "data.val_fraction=1",
    "data.val_fraction=nan",
    "data.tokenizer=bpe",
    "model.dropout=1.0",
    "model.dropout=-0.1",
    "model.num_heads=0",
    "model.head_size=30",
    "model.context_length=0",
    "model.attention=flash",
    "train.input_noise=1.0",
    "train.input_noise=-0.1",
    "train.compile=maybe",
    "train.compile=2",
    "model.attention=flash",
    "train.input_noise=1.0",
    "train.input_noise=-0.1",
    "train.early_stop=0",
    "train.early_stop=maybe",
]
WRONG_TYPE = [
    "train.lr=abc",
    "train.lr_decay_steps=abc",
    "train.sample_chars=abc",
    "train.max_epochs=abc",
    "train.batch_size=many",
    "model.num_heads=2.5",
    "seed=1e23",
    "seed=1.5",
    "model.tie_weights=nope",
    "train.max_steps=ten",
    "train.no_such_key=1",
    "model.colour=red",
    "train.early_stop=[1,2]",
]


@pytest.mark.parametrize("override", OUT_OF_RANGE)
def test_values_out_of_range_are_one_config_error_naming_the_key(override):
    with pytest.raises(ConfigError) as e:
        config_object("train", override)
    assert override.split("=")[0] in str(e.value) and "\n" not in str(e.value)


def test_unused_keys_are_checked_too():
    """`max_epochs` does nothing when `max_steps` is set, and is checked all the same."""
    with pytest.raises(ConfigError, match="train.max_epochs"):
        config_object("train", "train.max_steps=10", "train.max_epochs=-2")
    with pytest.raises(ConfigCompositionException):
        compose_config("train", "train.max_steps=10", "train.max_epochs=abc")


@pytest.mark.parametrize("override", WRONG_TYPE)
def test_values_of_the_wrong_type_are_refused_while_composing(override):
    with pytest.raises((ConfigCompositionException, OmegaConfBaseException)):
        config_object("train", override)


@pytest.mark.parametrize(
    "word,meaning",
    [
        ("true", True),
        ("false", False),
        ("yes", True),
        ("no", False),
        ("on", True),
        ("off", False),
        ("True", True),
        ("NO", False),
    ],
)
def test_booleans_take_every_yaml_spelling_with_its_meaning(word, meaning):
    job = config_object("train", f"model.tie_weights={word}", f"train.compile={word}", f"train.overwrite={word}")
    assert job.model.tie_weights is meaning and job.train.overwrite is meaning
    assert job.train.compile == str(meaning).lower()  # train.compile also takes auto (training/runner/plan.py)


@pytest.mark.parametrize("word,meaning", [("auto", "auto"), ("AUTO", "auto"), ("on", "true"), ("false", "false")])
def test_compile_takes_auto_beside_the_booleans(word, meaning):
    assert config_object("train", f"train.compile={word}").train.compile == meaning
    assert config_object("train").train.compile == "auto"


def test_the_defaults_are_valid_for_every_entry_script():
    for name in ("train", "generate"):
        config_object(name)
    with pytest.raises(UserError, match="data.path"):  # evaluate.py needs the file to score
        config_object("evaluate")
    assert config_object("evaluate", "data.path=x.txt").batch_size > 0


@pytest.mark.parametrize("override", ["stride=0", "batch_size=0", "dtype=float64", "device=gpu"])
def test_evaluate_values_are_checked(override):
    with pytest.raises(ConfigError):
        config_object("evaluate", "data.path=x.txt", override)


@pytest.mark.parametrize("value", ["2", "0", "1", "-1", "'maybe'"])
def test_boolean_keys_refuse_numbers_that_omegaconf_would_read_as_booleans(value):
    from common.config_checks import boolean_overrides
    from training.settings.config import TrainJob

    for key in ("train.overwrite", "model.tie_weights"):
        with pytest.raises(ConfigError, match=key):
            boolean_overrides(TrainJob, ["model=tiny", f"{key}={value}"])
    boolean_overrides(TrainJob, ["train.overwrite=yes", "model.tie_weights=Off", "train.lr=2"])
