from dataclasses import replace
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from cli.overrides import prepare_overrides
from common.errors import UserError
from model import AttentionLanguageModel
from tests.helpers import compose_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def compose_train(*overrides: str):
    return compose_config("train", *overrides)


def check_train_config(cfg):
    """Range checks run when the composed config becomes its dataclass."""
    return OmegaConf.to_object(cfg)


@pytest.mark.parametrize("model", sorted(p.stem for p in (CONFIGS / "model").glob("*.yaml")))
def test_every_model_config_composes_and_builds(model):
    cfg = compose_train(f"model={model}")
    check_train_config(cfg)
    model_cfg = check_train_config(cfg).model.with_vocab(100)
    if model_cfg.dropout is None:  # auto: training resolves it; any number builds the same shapes
        model_cfg = replace(model_cfg, dropout=0.0)
    m = AttentionLanguageModel(model_cfg)
    assert m.context_length == cfg.model.context_length


@pytest.mark.parametrize("data", sorted(p.stem for p in (CONFIGS / "data").glob("*.yaml")))
def test_every_data_config_composes(data):
    check_train_config(compose_train(f"data={data}"))


def test_required_keys_exist():
    cfg = compose_train()
    for key in (
        "model.context_length",
        "model.embedding_size",
        "model.head_size",
        "model.num_heads",
        "model.num_blocks",
        "model.dropout",
        "data.path",
        "data.val_fraction",
        "train.batch_size",
        "train.max_steps",
        "train.lr",
        "train.eval_interval",
        "train.eval_steps",
        "seed",
        "device",
    ):
        nullable = ("data.path", "train.max_steps", "model.dropout")  # model.dropout null = auto
        assert OmegaConf.select(cfg, key, throw_on_missing=True) is not None or key in nullable, key
    assert cfg.train.max_epochs is None or cfg.train.max_epochs > 0  # null: 10 passes, or the time budget alone
    assert cfg.model.head_size % cfg.model.num_heads == 0


def test_generate_config_composes():
    overrides = prepare_overrides(["prompt=안녕 '친구'", "top_k=5", "data.path=/tmp/소설.txt"])
    cfg = compose_config("generate", *overrides[:2])
    assert cfg.prompt == "안녕 '친구'" and cfg.top_k == 5
    assert overrides[2] == "data.path='/tmp/소설.txt'"


@pytest.mark.parametrize(
    "override,keys",
    [
        ("model.head_size=30", "model.head_size=30 is not divisible by model.num_heads=4"),
        ("model.num_heads=0", "model.num_heads=0"),
        ("model.dropout=1.5", "model.dropout"),
        ("data.val_fraction=0", "data.val_fraction"),
        ("data.val_fraction=1.2", "data.val_fraction"),
        ("device=tpu", "device=tpu"),
        ("train.batch_size=-1", "train.batch_size"),
        ("train.lr_schedule=linear", "train.lr_schedule"),
    ],
)
def test_invalid_combinations_name_the_keys(override, keys):
    with pytest.raises(UserError) as e:
        check_train_config(compose_train(override))
    assert keys in str(e.value) and "\n" not in str(e.value)
