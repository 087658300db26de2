"""A refused value is shown as it was typed (quoted where it has spaces), surrounding spaces are refused alike for
every word a key takes and every environment variable the project reads, and a refusal never advises the value or
file that just failed (common/config_checks.py)."""

from __future__ import annotations

import pytest

from common.errors import ConfigError, UserError
from tests.helpers import TINY, assert_one_line_error, cli, config_object

WORDS = [
    ("train", "train.compile", "false"),
    ("train", "train.dtype", "float32"),
    ("train", "train.early_stop", "3"),
    ("train", "train.early_stop", "auto"),
    ("train", "device", "cpu"),
    ("train", "data.tokenizer", "jamo"),
    ("train", "train.optimizer", "muon"),
    ("train", "train.average", "ema"),
    ("train", "model.attention", "fused"),
    ("generate", "weights", "raw"),
    ("generate", "device", "cuda:0"),
]


@pytest.mark.parametrize("config,key,word", WORDS)
@pytest.mark.parametrize("typed", ["{} ", " {}"])
def test_spaces_around_a_word_are_refused_alike_on_either_side_and_shown(config, key, word, typed):
    value = typed.format(word)
    with pytest.raises(ConfigError) as e:
        config_object(config, f"{key}='{value}'")
    assert str(e.value) == f"{key}={value!r} is invalid: the spaces around it are part of the value; write {key}={word}"


@pytest.mark.parametrize(
    "config,key,value,need",
    [
        ("train", "train.early_stop", "abc ", "give null (off), auto"),
        ("train", "train.compile", " maybe", "true, false"),
        ("train", "device", "gpu ", "use one of auto, cpu, cuda, mps"),
        ("generate", "weights", " all", "averaged, raw"),
    ],
)
def test_a_wrong_word_with_spaces_is_shown_quoted_and_never_advised(config, key, value, need):
    with pytest.raises(ConfigError) as e:
        config_object(config, f"{key}='{value}'")
    assert str(e.value).startswith(f"{key}={value!r} is invalid: ") and need in str(e.value)
    assert f"{key}={value.strip()}" not in str(e.value)


@pytest.mark.parametrize("typed", ["train.max_steps=' 5'", "train.lr='1e-3 '"])
def test_a_quoted_number_with_spaces_is_refused_as_a_word_is(typed, tmp_path):
    key, _, value = typed.partition("=")
    r = cli("train.py", *TINY, typed, f"hydra.run.dir={tmp_path}")
    assert_one_line_error(
        r,
        f"{key}={value} is invalid: the spaces around it are part of the value; write "
        f"{key}={value.strip(chr(39)).strip()}",
    )


@pytest.mark.parametrize("value", ["1 ", " 1", " 0", "0 ", "1\n"])
def test_kochar_cpu_bf16_with_spaces_is_refused_alike_and_shown_as_set(value, monkeypatch):
    from common.device import CPU_BF16_ENV, cpu_bf16_forced

    monkeypatch.setenv(CPU_BF16_ENV, value)
    with pytest.raises(UserError) as e:
        cpu_bf16_forced()
    assert str(e.value).startswith(
        f"KOCHAR_CPU_BF16={value!r} is not understood: the spaces around it are part of "
        "the value; use KOCHAR_CPU_BF16=1 ("
    )


@pytest.mark.parametrize(
    "name,value,fix",
    [
        ("KOCHAR_DEBUG", " 0", "write KOCHAR_DEBUG=0"),
        ("KOCHAR_DEBUG", "1 ", "write KOCHAR_DEBUG=1"),
        ("KOCHAR_CPU_BF16", "0 ", "use KOCHAR_CPU_BF16=1"),
    ],
)
def test_an_entry_script_refuses_a_variable_with_spaces_in_one_line(name, value, fix, tmp_path):
    r = cli("train.py", *TINY, "train.max_steps=1", f"hydra.run.dir={tmp_path}", env={name: value})
    assert_one_line_error(r, f"{name}={value!r} is not understood: the spaces around it are part of the value; {fix}")


def test_the_corpus_mirror_variable_with_spaces_is_refused(monkeypatch):
    from data.prepare.fetching import REGISTRY, _base_url

    monkeypatch.setenv("KOCHAR_CORPUS_BASE_URL", " https://example.org/corpora")
    with pytest.raises(
        UserError,
        match=r"^KOCHAR_CORPUS_BASE_URL=' https://example.org/corpora' is not understood: "
        r"the spaces around it are part of the value; write KOCHAR_CORPUS_BASE_URL="
        r"https://example.org/corpora$",
    ):
        _base_url(next(iter(REGISTRY.values())), None)


def test_weights_that_are_not_finite_are_not_told_to_use_themselves(tmp_path):
    import torch

    from inference.checkpoint import Checkpoint, load_checkpoint, refuse_non_finite, save_checkpoint
    from tests.helpers import tiny_model

    m = tiny_model()
    weights = {k: v.clone() for k, v in m.state_dict().items()}
    weights["lm_head.weight"][0, 0] = float("nan")
    for name in ("best.pt", "ckpt.pt"):
        save_checkpoint(Checkpoint(m.config, weights, {"kind": "char", "chars": []}), tmp_path / name)
    for name, other in (("best.pt", "ckpt.pt"), ("ckpt.pt", "best.pt")):
        with pytest.raises(UserError) as e:
            refuse_non_finite(load_checkpoint(tmp_path / name))
        advice = str(e.value).rsplit(";", 1)[1]
        assert name not in advice and f"ckpt={tmp_path / other}" in advice
    (tmp_path / "best.pt").unlink()
    with pytest.raises(UserError) as e:
        refuse_non_finite(load_checkpoint(tmp_path / "ckpt.pt"))
    assert "best.pt" not in str(e.value) and str(e.value).endswith("use another run's checkpoint or train again")
    assert not torch.isfinite(weights["lm_head.weight"]).all()
