"""hf_export/: every architecture exports to a folder `transformers` loads and runs exactly as we do (logits
within 1e-4, the same greedy text), the tokenizer files encode as ours, nothing is unpickled, and the folder
reads back into the same model."""

from __future__ import annotations

import json

import pytest
import torch

from hf_export.writer import write_folder
from inference.checkpoint import Checkpoint
from inference.exported_folder import read_folder
from model import AttentionLanguageModel
from model.config import ModelConfig
from model.counts import num_parameters
from tests.helpers import KOREAN
from tokenizer import KoreanCharTokenizer, KoreanHangulTokenizer, KoreanJamoTokenizer

transformers = pytest.importorskip("transformers", reason="pip install -r requirements-dev.txt")

BASE = dict(context_length=256, embedding_size=32, head_size=32, num_heads=4, num_blocks=2)
VARIANTS = {
    "lecture": ({}, "gpt2"),
    "lecture-tied": ({"tie_weights": True}, "gpt2"),
    "llama": ({"position": "rope", "norm": "rmsnorm", "mlp": "swiglu"}, "llama"),
    "modern": ({"position": "rope", "norm": "rmsnorm", "mlp": "relu2", "qk_norm": True}, "custom"),
    "narrow-heads": ({"head_size": 16}, "custom"),
    "rope-gelu": ({"position": "rope"}, "custom"),
    "hangul": ({"embedding": "jamo", "head": "jamo", "position": "rope", "norm": "rmsnorm"}, "custom"),
    "hangul-linear-initials": ({"embedding": "jamo", "head": "jamo", "jamo_initials": "linear"}, "custom"),
    "hangul-softmax": ({"embedding": "jamo"}, "gpt2"),  # the jamo embedding folded (hf_export/plain.py)
}
HANGUL = {"hangul", "hangul-linear-initials", "hangul-softmax"}
TEXT = "강가의 버드나무 아래서 우리는 오래 이야기했다. 밤이 깊도록 별을 세었다.\n그리고 아침이 왔다."


def exported(tmp_path, variant: str, tokenizer=None):
    """A randomly weighted model of the variant (weights large enough that a wrong mapping shows), exported."""
    if tokenizer is None:
        tokenizer = (KoreanHangulTokenizer if variant in HANGUL else KoreanCharTokenizer).from_text(KOREAN)
    extra, _ = VARIANTS[variant]
    torch.manual_seed(0)
    model = AttentionLanguageModel(ModelConfig(vocab_size=tokenizer.vocab_size, **{**BASE, **extra})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    ckpt = Checkpoint(model.config, model.state_dict(), tokenizer.to_dict(), 1.0)
    out = tmp_path / variant
    write_folder(ckpt, tokenizer, num_parameters(model), out, "python export.py (test)", overwrite=False)
    return model, tokenizer, out


def hf_model(out):
    return transformers.AutoModelForCausalLM.from_pretrained(str(out), trust_remote_code=True).eval()


@pytest.mark.parametrize("variant", VARIANTS)
def test_transformers_gives_our_logits_and_our_greedy_text(tmp_path, variant):
    model, tok, out = exported(tmp_path, variant)
    assert json.loads((out / "kochar.json").read_text(encoding="utf-8"))["layout"] == VARIANTS[variant][1]
    hf = hf_model(out)
    ids = torch.tensor([tok.encode(TEXT + KOREAN[:150]).tolist()])
    with torch.no_grad():
        ours, theirs = model(ids)[0], hf(ids).logits
        assert torch.allclose(ours, theirs, atol=1e-4, rtol=0), (ours - theirs).abs().max()
        prompt = ids[:, :20]
        greedy = model.generate(prompt, 200, temperature=0.0)
        their_greedy = hf.generate(
            prompt, max_new_tokens=200, do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(prompt)
        )
    assert tok.decode(greedy[0].tolist()) == tok.decode(their_greedy[0].tolist())


@pytest.mark.parametrize("variant", ["lecture", "llama", "modern", "hangul"])
def test_the_folder_reads_back_into_the_same_model_without_unpickling(tmp_path, variant, monkeypatch):
    model, tok, out = exported(tmp_path, variant)

    def no_pickle(*args, **kwargs):
        raise AssertionError("torch.load was called: the folder must load from safetensors alone")

    monkeypatch.setattr(torch, "load", no_pickle)
    ckpt = read_folder(out)
    again = AttentionLanguageModel(ckpt.model_config).eval()
    again.load_state_dict(ckpt.model)
    ids = torch.tensor([tok.encode(TEXT).tolist()])
    with torch.no_grad():
        assert torch.equal(model(ids)[0], again(ids)[0])
    hf_model(out)  # transformers reads the folder with torch.load failing too


def test_auto_tokenizer_encodes_and_decodes_as_ours(tmp_path):
    tok = KoreanCharTokenizer.from_text(KOREAN + "é\r\n\t")
    _, _, out = exported(tmp_path, "lecture", tok)
    auto = transformers.AutoTokenizer.from_pretrained(str(out))
    for text in (
        TEXT,
        KOREAN,
        "  두 칸\n\n새 줄\t탭",
        "모르는 글자 ☃ 와 NFD: " + "한글".encode().decode(),
        "\u1112\u1161\u11ab\u1100\u1173\u11af",
        "e\u0301",
    ):
        ours = tok.encode(text).tolist()
        assert auto(text, add_special_tokens=False)["input_ids"] == ours, text
        assert auto.decode(ours) == tok.decode(ours)


@pytest.mark.parametrize("kind", ["char", "hangul", "jamo"])
def test_auto_tokenizer_round_trips_the_shared_corpus(tmp_path, shared_corpus, kind):
    from hf_export.writer import write_tokenizer
    from tokenizer import build_tokenizer

    text = shared_corpus.read_text(encoding="utf-8")
    tok = build_tokenizer(kind, [text])
    write_tokenizer(tok, tmp_path, 256)
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path), trust_remote_code=kind == "jamo")
    auto.model_max_length = len(text) * 3  # the whole corpus at once, without the length warning
    ids = auto(text, add_special_tokens=False)["input_ids"]
    assert ids == tok.encode(text).tolist() and auto.decode(ids) == tok.decode(ids)


def test_the_jamo_tokenizer_ships_its_own_class(tmp_path):
    tok = KoreanJamoTokenizer.from_text(KOREAN + "ㅋㅋ ABC")
    model, _, out = exported(tmp_path, "modern", tok)
    auto = transformers.AutoTokenizer.from_pretrained(str(out), trust_remote_code=True)
    for text in (TEXT, "ㅋㅋ 가각 ABC 没", KOREAN):
        ours = tok.encode(text).tolist()
        assert auto(text, add_special_tokens=False)["input_ids"] == ours
        assert auto.decode(ours) == tok.decode(ours)
    ids = torch.tensor([tok.encode(TEXT).tolist()])
    with torch.no_grad():
        assert torch.allclose(model(ids)[0], hf_model(out)(ids).logits, atol=1e-4, rtol=0)


def test_the_model_card_says_what_the_model_is(tmp_path):
    _, _, out = exported(tmp_path, "modern")
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "trust_remote_code=True" in card and "KocharForCausalLM" in card and "말뭉치" in card
    names = {p.name for p in out.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "generation_config.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "README.md",
        "kochar.json",
        "modeling_kochar.py",
    } <= names


def test_the_benchmark_races_transformers_generate_on_the_same_weights():
    import json

    from tests.helpers import cli

    r = cli("bench.py", "--generation-only", "--smoke")
    assert r.returncode == 0, r.stderr[-2000:]
    peer = json.loads(r.stdout)["transformers_peer"]
    assert peer["class"] == "GPT2LMHeadModel"
    for batch in ("batch_1", "batch_8"):
        row = peer["threads_1"][batch]
        assert row["ours_tokens_per_sec"] > 0 and row["transformers_tokens_per_sec"] > 0
