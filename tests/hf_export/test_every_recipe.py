"""Every recipe (configs/recipe/*.yaml, as model=tiny composes it) with every tokenizer exports to a folder that
`transformers` runs as we do: logits within 1e-4 on Korean text, the same 200 greedy characters. Every model
setting is known to export, a setting it does not know is refused rather than exported wrong, and a folder
that would compute something else never gets its name.

The greedy comparison runs for every recipe with `char` and for every tokenizer with the recipes at both ends
of the ladder (a tokenizer changes the network only through the vocabulary size and the jamo fold, which
those cover in both the stock and the custom layout): the custom model recomputes its window at every step,
so 200 steps of it for each of the 24 pairs would cost the suite more than they could find."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch
from omegaconf import OmegaConf

from common.errors import UserError
from hf_export import plain
from hf_export.writer import write_folder
from inference.checkpoint import Checkpoint
from model import AttentionLanguageModel
from model.config import ModelConfig
from model.counts import num_parameters
from tests.helpers import KOREAN, ROOT, compose_config
from tokenizer import build_tokenizer

transformers = pytest.importorskip("transformers", reason="pip install -r requirements-dev.txt")

RECIPES = sorted(p.stem for p in (ROOT / "configs" / "recipe").glob("*.yaml"))
# (data.tokenizer, model.embedding, model.head): the Hangul-aware ids with the jamo parts they exist for
TOKENIZERS = {
    "char": ("char", "token", "softmax"),
    "jamo": ("jamo", "token", "softmax"),
    "hangul": ("hangul", "jamo", "softmax"),
    "hangul-head": ("hangul", "jamo", "jamo"),
}
GREEDY_FOR_EVERY_TOKENIZER = ("lecture", "modern")
TEXT = "강가의 버드나무 아래서 우리는 오래 이야기했다. 밤이 깊도록 별을 세었다.\n그리고 아침이 왔다."


def model_config(recipe: str, tokenizer: str, vocab_size: int) -> ModelConfig:
    kind, embedding, head = TOKENIZERS[tokenizer]
    cfg = compose_config(
        "train",
        f"recipe={recipe}",
        "model=tiny",
        "model.context_length=256",
        f"data.tokenizer={kind}",
        f"model.embedding={embedding}",
        f"model.head={head}",
    )
    model = OmegaConf.to_container(cfg.model, resolve=True)
    return ModelConfig(**{**model, "vocab_size": vocab_size, "dropout": 0.0})


def export(tmp_path, config: ModelConfig, tokenizer, head_gain: float = 1.0, **write):
    """A model of `config`, weights shaken so that a wrong mapping shows (and the LM head times `head_gain`, so that
    a small difference inside shows in the logits), exported to tmp_path/m."""
    torch.manual_seed(0)
    model = AttentionLanguageModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
        if head_gain != 1.0:
            model.lm_head.weight.mul_(head_gain)
    ckpt = Checkpoint(config, model.state_dict(), tokenizer.to_dict(), 1.0)
    layout = write_folder(
        ckpt, tokenizer, num_parameters(model), tmp_path / "m", "python export.py (test)", overwrite=False, **write
    )
    return model, layout


@pytest.mark.parametrize("tokenizer", TOKENIZERS)
@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_and_tokenizer_gives_our_logits_and_greedy_text(tmp_path, recipe, tokenizer):
    tok = build_tokenizer(TOKENIZERS[tokenizer][0], [KOREAN + TEXT])
    model, layout = export(tmp_path, model_config(recipe, tokenizer, tok.vocab_size), tok, verify=False)
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "m"), trust_remote_code=True).eval()
    stock = recipe in ("lecture", "l1_torch_init") and tokenizer != "hangul-head"  # the staged head is ours alone
    assert layout == ("gpt2" if stock else "custom")
    ids = torch.tensor([tok.encode(TEXT + KOREAN)[:256].tolist()])
    with torch.no_grad():
        ours, theirs = model(ids)[0], hf(ids).logits
        assert (ours - theirs).abs().max() < 1e-4
        if tokenizer != "char" and recipe not in GREEDY_FOR_EVERY_TOKENIZER:
            return
        prompt = ids[:, :20]
        greedy = model.generate(prompt, 200, temperature=0.0)
        their_greedy = hf.generate(
            prompt, max_new_tokens=200, do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(prompt)
        )
    assert tok.decode(greedy[0].tolist()) == tok.decode(their_greedy[0].tolist())


def test_every_model_setting_is_known_to_export():
    new = sorted({f.name for f in fields(ModelConfig)} - set(plain.HANDLED))
    assert not new, (
        f"ModelConfig gained {new}: say in hf_export/plain.py HANDLED how export treats it (and teach "
        "hf_export/hf_code/modeling_kochar.py any new computation), or export refuses such runs"
    )


def test_a_setting_export_does_not_know_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.delitem(plain.HANDLED, "qk_norm")
    tok = build_tokenizer("char", [KOREAN])
    config = ModelConfig(
        vocab_size=tok.vocab_size,
        context_length=32,
        embedding_size=32,
        head_size=32,
        num_heads=4,
        num_blocks=1,
        qk_norm=True,
    )
    with pytest.raises(UserError) as e:
        export(tmp_path, config, tok)
    assert "model.qk_norm=True cannot be exported yet" in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "m").exists()
    export(tmp_path, ModelConfig(**{**config.to_dict(), "qk_norm": False}), tok)  # its default still exports


def test_a_folder_that_computes_something_else_is_never_named(tmp_path, monkeypatch):
    from hf_format import gpt2

    wrong = gpt2.hf_config
    monkeypatch.setattr(gpt2, "hf_config", lambda c: {**wrong(c), "activation_function": "gelu_new"})  # tanh GELU
    tok = build_tokenizer("char", [KOREAN])
    config = ModelConfig(
        vocab_size=tok.vocab_size, context_length=32, embedding_size=32, head_size=32, num_heads=4, num_blocks=1
    )
    with pytest.raises(UserError, match="does not compute what the run computes"):
        export(tmp_path, config, tok, head_gain=10.0)  # the two GELUs differ by < 1e-3: shown 10x in the logits
    assert not (tmp_path / "m").exists() and not list(tmp_path.iterdir())
    export(tmp_path, config, tok, head_gain=10.0, verify=False)  # unchecked, it would have been written
    assert (tmp_path / "m" / "model.safetensors").is_file()


@pytest.mark.parametrize(
    "extra,layout",
    [
        ({"tie_weights": True}, "gpt2"),
        ({"position": "rope", "norm": "rmsnorm", "mlp": "swiglu"}, "llama"),
        ({"head_size": 16, "mlp": "relu2"}, "custom"),
    ],
)
def test_the_jamo_embedding_folds_exactly_where_it_earns_a_stock_class(tmp_path, extra, layout):
    from inference.exported_folder import read_folder

    tok = build_tokenizer("hangul", [KOREAN])
    shape = dict(context_length=64, embedding_size=32, head_size=32, num_heads=4, num_blocks=1)
    config = ModelConfig(vocab_size=tok.vocab_size, embedding="jamo", **{**shape, **extra})
    model, written = export(tmp_path, config, tok)
    assert written == layout
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "m"), trust_remote_code=True).eval()
    back = read_folder(tmp_path / "m")
    again = AttentionLanguageModel(back.model_config).eval()
    again.load_state_dict(back.model)
    ids = torch.tensor([tok.encode("똠방각하 " + KOREAN[:50]).tolist()])  # 똠 and 뷁: syllables the corpus lacks
    with torch.no_grad():
        assert (model(ids)[0] - hf(ids).logits).abs().max() < 1e-4
        assert torch.equal(model(ids)[0], again(ids)[0])  # read back, our scripts sample exactly the run's model
    card = (tmp_path / "m" / "README.md").read_text(encoding="utf-8")
    folded = layout != "custom"  # the custom code composes it as trained
    assert ("folded into the token embedding" in card) == folded
    assert (back.model_config.embedding == "token") == folded
