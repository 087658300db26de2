"""One forward pass, restated in two places, checked against the model for every kind of every setting.

`DecodeStep` (model/decode.py) rewrites a block's forward for one new token, and the exported modeling code
(hf_export/hf_code/modeling_kochar.py) rewrites the whole model for `transformers`. The cases below enumerate every
field of `ModelConfig` and every kind it allows (`model.config.CHOICES`, `SWITCHES`, and `NUMBER_CASES` here): a
field the enumeration does not know fails `test_every_model_setting_is_enumerated`, and a new kind of a known field
becomes a new case, which fails until each restatement computes it (or, for the exported code, export refuses it in
one line before anything is written).
"""

from __future__ import annotations

import importlib
from dataclasses import fields

import pytest
import torch

from common.errors import UserError
from hf_export.plain import plain_model
from hf_format import custom
from model import AttentionLanguageModel
from model.config import CHOICES, SWITCHES, ModelConfig
from model.streaming import stream

HANGUL_VOCAB = 11_200  # the hangul tokenizer's ids: the 11,172 syllables after <unk>, then other characters
BASE = dict(vocab_size=60, context_length=8, embedding_size=16, head_size=16, num_heads=2, num_blocks=2, dropout=0.0)
# numbers worth their own case: a head size other than the width, one head, one block, a larger vocabulary, ...
NUMBER_CASES = [
    ("head_size", 8),
    ("num_heads", 1),
    ("num_blocks", 1),
    ("vocab_size", 300),
    ("context_length", 5),
    ("embedding_size", 24),
    ("dropout", 0.1),
    ("logit_softcap", 2.0),
]
# the data-limited levers together, on a deeper model (U-Net skips across 5 blocks, value embeddings on 3)
LEVERS = dict(
    attention_gate=True,
    value_embedding=True,
    unet_skips=True,
    logit_softcap=3.0,
    num_blocks=5,
    position="rope",
    norm="rmsnorm",
    qk_norm=True,
)


def cases() -> list[tuple[str, object]]:
    out = [(name, kind) for name, kinds in CHOICES.items() for kind in kinds]
    out += [(name, value) for name in SWITCHES for value in (False, True)]
    return out + NUMBER_CASES + [("levers", "all")]


def settings(name: str, value: object) -> dict:
    """A small model's settings with `name=value`, plus what that value needs (the hangul ids for the jamo layers,
    the staged head for the staged head's stage-1 choice)."""
    s = {**BASE, **LEVERS} if name == "levers" else {**BASE, name: value}
    if name in ("embedding", "head", "jamo_initials") and value != "token" and value != "softmax":
        s["vocab_size"] = HANGUL_VOCAB
    if name == "jamo_initials":
        s["head"] = "jamo"
    return s


def shaken(s: dict) -> AttentionLanguageModel:
    """The model of settings `s`, every weight moved off its initial value so that a wrong restatement shows."""
    torch.manual_seed(0)
    model = AttentionLanguageModel(**s).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model


CASES = cases()
IDS = [f"{name}={value}" for name, value in CASES]


def test_every_model_setting_is_enumerated():
    known = set(CHOICES) | set(SWITCHES) | {name for name, _ in NUMBER_CASES}
    new = sorted({f.name for f in fields(ModelConfig)} - known)
    assert not new, (
        f"ModelConfig gained {new}: list it in model/config.py CHOICES or SWITCHES, or give it a case in "
        "NUMBER_CASES here, so the restatements of the forward pass (model/decode.py, "
        "hf_export/hf_code/modeling_kochar.py) are tested with each of its kinds"
    )


@pytest.mark.parametrize("name,value", CASES, ids=IDS)
def test_the_decode_step_gives_the_forward_pass_logits(name, value):
    model = shaken(settings(name, value))
    prompt = torch.randint(0, model.config.vocab_size, (2, 3))
    n = 3 * model.context_length  # past the context: the window jumps and the cache is refilled
    # a jumping window (shift 3) is exact for every setting; rotary positions' own sliding cache keeps the keys of
    # tokens the window has left, so it is checked against its own definition (tests/model/test_generation.py)
    cached = [lg for _, lg in stream(model, prompt, n, temperature=0, use_cache=True, window_shift=3)]
    plain = [lg for _, lg in stream(model, prompt, n, temperature=0, use_cache=False, window_shift=3)]
    for step, (a, b) in enumerate(zip(cached, plain, strict=True)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=lambda m, step=step: f"step {step}: {m}")


@pytest.fixture(scope="module")
def modeling():
    pytest.importorskip("transformers", reason="pip install -r requirements-dev.txt")
    return importlib.import_module("hf_export.hf_code.modeling_kochar")


@pytest.mark.parametrize("name,value", CASES, ids=IDS)
def test_the_exported_modeling_code_gives_the_model_logits(modeling, name, value):
    model = shaken(settings(name, value))
    c = model.config
    if name in custom.COMPUTES and value not in custom.COMPUTES[name]:
        with pytest.raises(UserError, match=f"model.{name}={value} cannot be exported yet"):
            plain_model(model.state_dict(), c, lambda c: False)
        return
    state, c = plain_model(model.state_dict(), c, lambda c: False)  # the custom layout, nothing folded
    theirs = modeling.KocharForCausalLM(modeling.KocharConfig(**custom.hf_config(c))).eval()
    theirs.load_state_dict(custom.to_hf(state, c))
    ids = torch.randint(0, c.vocab_size, (2, c.context_length))
    with torch.no_grad():
        torch.testing.assert_close(theirs(ids).logits, model(ids)[0], rtol=1e-4, atol=1e-4)


def test_the_exported_code_and_export_agree_on_the_kinds_it_computes(modeling):
    assert modeling.KINDS == custom.COMPUTES
    with pytest.raises(ValueError, match="mlp='gelu_tanh'.*computes only gelu, relu2, swiglu"):
        modeling.KocharForCausalLM(
            modeling.KocharConfig(**{**custom.hf_config(ModelConfig(vocab_size=60)), "mlp": "gelu_tanh"})
        )


def test_a_kind_the_exported_code_does_not_compute_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    from hf_export.writer import write_folder
    from inference.checkpoint import Checkpoint
    from tokenizer import build_tokenizer

    monkeypatch.setitem(custom.COMPUTES, "mlp", ("gelu", "swiglu"))  # as if relu2 were new to it
    tok = build_tokenizer("char", ["가나다라마바사"])
    model = shaken({**BASE, "vocab_size": tok.vocab_size, "mlp": "relu2", "head_size": 8})
    ckpt = Checkpoint(model.config, model.state_dict(), tok.to_dict(), 1.0)
    with pytest.raises(UserError) as e:
        write_folder(ckpt, tok, 1, tmp_path / "m", "python export.py (test)", overwrite=False)
    assert "model.mlp=relu2 cannot be exported yet" in str(e.value) and "\n" not in str(e.value)
    assert not list(tmp_path.iterdir())
