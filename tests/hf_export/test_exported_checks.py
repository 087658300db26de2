"""An exported folder is checked before it is trusted: every field of kochar.json typed, the safetensors header
against the record before any model is built, and weights that are not finite refused by every reader (and by
train.init_from, for checkpoints too); evaluate.py's JSON never holds NaN."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest
import torch

import model as model_package
from common.errors import UserError
from hf_export.writer import write_folder
from inference.checkpoint import Checkpoint, save_checkpoint
from inference.exported_folder import read_folder
from inference.loading import load_run
from inference.scoring import json_ready
from model import AttentionLanguageModel
from model.config import ModelConfig
from tests.helpers import KOREAN, assert_one_line_error, cli
from tokenizer import KoreanCharTokenizer

pytest.importorskip("safetensors", reason="pip install -r requirements-dev.txt")

SHAPE = dict(context_length=16, embedding_size=16, head_size=16, num_heads=2, num_blocks=1)


def _checkpoint(nan: bool = False, **settings) -> tuple[Checkpoint, KoreanCharTokenizer]:
    tok = KoreanCharTokenizer.from_text(KOREAN)
    torch.manual_seed(0)
    model = AttentionLanguageModel(ModelConfig(vocab_size=tok.vocab_size, **{**SHAPE, **settings}))
    state = model.state_dict()
    if nan:
        state = {k: torch.full_like(v, math.nan) if v.is_floating_point() else v for k, v in state.items()}
    return Checkpoint(model.config, state, tok.to_dict(), 1.0), tok


def exported(tmp_path: Path, name: str = "exported", **settings) -> Path:
    ckpt, tok = _checkpoint(**settings)
    out = tmp_path / name
    write_folder(ckpt, tok, 1, out, "python export.py (test)", False, verify=False)
    return out


def _edit_record(folder: Path, edit) -> None:
    rec = json.loads((folder / "kochar.json").read_text(encoding="utf-8"))
    edit(rec)
    (folder / "kochar.json").write_text(json.dumps(rec, ensure_ascii=False), encoding="utf-8")


def _edit_header(folder: Path, edit) -> None:
    """Rewrite the safetensors header in place (padded to its old length, so every offset stays valid)."""
    data = (folder / "model.safetensors").read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8 : 8 + length])
    edit(header)
    raw = json.dumps(header, separators=(",", ":")).encode()
    assert len(raw) <= length
    (folder / "model.safetensors").write_bytes(data[:8] + raw.ljust(length) + data[8 + length :])


RECORDS = {  # name: (how kochar.json is damaged, what the one line says)
    "no_tokenizer": (lambda r: r.pop("tokenizer"), "tokenizer must be a JSON object, found missing"),
    "no_model_config": (lambda r: r.pop("model_config"), "model_config must be a JSON object"),
    "model_config_a_list": (lambda r: r.update(model_config=[1, 2]), "model_config must be a JSON object"),
    "num_heads_text": (lambda r: r["model_config"].update(num_heads="two"), "model.num_heads=two is invalid"),
    "unknown_setting": (lambda r: r["model_config"].update(wings=2), "unknown model settings wings"),
    "no_vocab_size": (lambda r: r["model_config"].pop("vocab_size"), "vocab_size is missing"),
    "tokens_per_char_text": (lambda r: r.update(tokens_per_char="lots"), "tokens_per_char must be a positive"),
    "tokens_per_char_zero": (lambda r: r.update(tokens_per_char=0), "tokens_per_char must be a positive"),
    "step_negative": (lambda r: r.update(step=-3), "step must be a whole number"),
    "config_a_string": (lambda r: r.update(config="x"), "config must be a JSON object"),
    "version_newer": (lambda r: r.update(version=99), "format version 99"),
    "version_text": (lambda r: r.update(version="1"), "no valid format version"),
    "trained_as_bad": (lambda r: r.update(trained_as={"num_blocks": 0}), "in trained_as"),
    # the tokenizer's own fields: each named, never an error inside the tokenizer
    "chars_numbers": (
        lambda r: r["tokenizer"].update(chars=[5, 6]),
        "kochar.json: tokenizer.chars[0] must be a single character, found int '5'; export the run again",
    ),
    "chars_nested": (lambda r: r["tokenizer"]["chars"].append(["x"]), "must be a single character, found list"),
    "chars_a_word": (
        lambda r: r["tokenizer"].update(chars=["봄이"]),
        "tokenizer.chars[0] must be a single character, found '봄이'",
    ),
    "chars_text": (
        lambda r: r["tokenizer"].update(chars="봄이"),
        "tokenizer.chars must be a JSON list of text, found str",
    ),
    "added_numbers": (
        lambda r: r["tokenizer"].update(added=[1.5]),
        "tokenizer.added[0] must be a single character, found float '1.5'",
    ),
    "format_number": (
        lambda r: r["tokenizer"].update(format=3),
        "(tokenizer.format is '3', not kochar-gpt/char-tokenizer)",
    ),
    "kind_number": (lambda r: r["tokenizer"].update(kind=3), "tokenizer.kind must be text"),
    "weights_number": (lambda r: r.update(weights=5), "weights must be one of averaged, raw, unknown, found '5'"),
    "updates_text": (lambda r: r.update(average_updates="7"), "average_updates must be a whole number >= 0 or null"),
}


@pytest.mark.parametrize("case", RECORDS)
def test_every_field_of_the_record_is_checked_in_one_line(tmp_path, case):
    edit, needle = RECORDS[case]
    folder = exported(tmp_path)
    _edit_record(folder, edit)
    _refused(lambda: load_run(folder, torch.device("cpu")), needle)


def _refused(call, needle: str) -> None:
    with pytest.raises(UserError) as e:
        call()
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_the_cli_names_the_file_and_the_field_of_a_tokenizer_of_the_wrong_type(tmp_path):
    folder = exported(tmp_path)
    _edit_record(folder, lambda r: r["tokenizer"].update(chars=[5, 6]))
    r = cli("generate.py", f"ckpt={folder}", "device=cpu", "max_new_tokens=3")
    assert assert_one_line_error(r) == (
        f"error: {folder / 'kochar.json'}: tokenizer.chars[0] must be a single "
        "character, found int '5'; export the run again"
    )


@pytest.mark.parametrize(
    "vocabulary,line",
    [
        ({"format": "kochar-gpt/jamo-tokenizer", "kind": "jamo", "tokens": [5]}, "tokenizer.tokens[0] must be text"),
        ({"format": "kochar-gpt/jamo-tokenizer", "kind": "jamo", "tokens": ["가", ["x"]]}, "tokens[1] must be text"),
        (
            {"format": "kochar-gpt/jamo-tokenizer", "kind": "jamo", "tokens": ["<L nope>"]},
            "tokenizer.tokens[0] must be a character or a jamo part",
        ),
        (
            {"format": "kochar-gpt/jamo-tokenizer", "kind": "jamo", "tokens": [], "added": {"a": 1}},
            "tokenizer.added must be a JSON list of text, found dict",
        ),
        (
            {"format": "kochar-gpt/hangul-tokenizer", "kind": "hangul", "chars": ["a"], "syllables_seen": 3},
            "tokenizer.syllables_seen must be text, found int",
        ),
    ],
)
def test_every_tokenizer_kind_names_the_field_of_the_wrong_type(vocabulary, line):
    from tokenizer import tokenizer_from_dict

    _refused(lambda: tokenizer_from_dict(vocabulary), line)


def test_the_cli_says_a_missing_field_in_one_line(tmp_path):
    folder = exported(tmp_path)
    _edit_record(folder, lambda r: r.pop("tokenizer"))
    r = cli("generate.py", f"ckpt={folder}", "device=cpu", "max_new_tokens=3")
    assert_one_line_error(r, "kochar.json", "tokenizer")


def test_a_record_claiming_thousands_of_blocks_is_refused_before_any_model_is_built(tmp_path, monkeypatch):
    folder = exported(tmp_path, head_size=8)  # a custom layout: its weights keep our names
    _edit_record(folder, lambda r: r["model_config"].update(num_blocks=20000))
    built = model_package.AttentionLanguageModel.__init__

    def guarded(self, *args, **kwargs):
        config = args[0] if args else kwargs.get("config")
        assert getattr(config, "num_blocks", 0) < 100, "a model of the record's false size was built"
        built(self, *args, **kwargs)

    monkeypatch.setattr(model_package.AttentionLanguageModel, "__init__", guarded)
    with pytest.raises(UserError) as e:
        load_run(folder, torch.device("cpu"))
    assert "says the model has 20000 blocks" in str(e.value) and "holds the weights of 1" in str(e.value)


HEADERS = {  # name: (how the header lies, what the one line says)
    "relabelled_same_size": (lambda h: h["transformer.wte.weight"].update(dtype="I32"), "is I32"),
    "relabelled_half": (lambda h: h["transformer.wte.weight"].update(dtype="F16"), "which is not the"),
    "reshaped": (
        lambda h: h["transformer.wte.weight"].update(shape=h["transformer.wte.weight"]["shape"][::-1]),
        "need F32",
    ),
    "offsets_outside": (lambda h: h["transformer.ln_f.bias"].update(data_offsets=[0, 10**9]), "points outside"),
    "missing_tensor": (lambda h: h.pop("transformer.ln_f.bias"), "lacks the tensor transformer.ln_f.bias"),
    "renamed_tensor": (lambda h: h.update(extra=h.pop("transformer.ln_f.bias")), "lacks the tensor"),
    "not_a_header": (lambda h: h.update({"transformer.wte.weight": 5}), "malformed"),
}


@pytest.mark.parametrize("case", HEADERS)
def test_a_header_that_disagrees_with_the_record_or_its_bytes_is_refused(tmp_path, case):
    edit, needle = HEADERS[case]
    folder = exported(tmp_path)
    _edit_header(folder, edit)
    _refused(lambda: read_folder(folder), needle)


def test_weights_that_are_not_finite_are_refused_by_every_reader(tmp_path):
    ckpt, tok = _checkpoint(nan=True)
    run = tmp_path / "run"
    run.mkdir()
    save_checkpoint(ckpt, run / "ckpt.pt")
    folder = tmp_path / "exported"
    write_folder(ckpt, tok, 1, folder, "python export.py (test)", False, verify=False)
    for path in (run, folder):  # generate.py, evaluate.py, serve.py and export.py all load through load_run
        with pytest.raises(UserError, match="not finite numbers"):
            load_run(path, torch.device("cpu"))
    from tests.helpers import train_job
    from training.init_from import load_source

    with pytest.raises(UserError, match="not finite numbers"):
        load_source(train_job(tmp_path, f"train.init_from={run}"))


def test_evaluate_s_json_never_holds_nan_or_infinity():
    result = json_ready({"loss": math.nan, "bpc": math.inf, "chars": 3, "data": "a\udcff.txt", "bpc_seen": None})
    line = json.dumps(result, ensure_ascii=False, allow_nan=False)
    assert json.loads(line) == {"loss": None, "bpc": None, "chars": 3, "data": "a\ufffd.txt", "bpc_seen": None}


@pytest.mark.slow
def test_evaluate_and_generate_refuse_a_folder_of_nan_weights_in_one_line(tmp_path, corpus):
    ckpt, tok = _checkpoint(nan=True)
    write_folder(ckpt, tok, 1, tmp_path / "nan", "python export.py (test)", False, verify=False)
    r = cli("evaluate.py", f"ckpt={tmp_path / 'nan'}", f"data.path={corpus}", "device=cpu", "progress=false")
    assert_one_line_error(r, "not finite numbers")
    r = cli("generate.py", f"ckpt={tmp_path / 'nan'}", "device=cpu", "max_new_tokens=3")
    assert_one_line_error(r, "not finite numbers")


def test_the_playground_answers_a_nan_run_with_one_line(tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from playground.app import create_app
    from playground.config import ServeConfig

    ckpt, _ = _checkpoint(nan=True)
    (tmp_path / "run").mkdir()
    save_checkpoint(ckpt, tmp_path / "run" / "ckpt.pt")
    app = create_app(ServeConfig(runs_dir=str(tmp_path), ckpt=str(tmp_path / "run"), device="cpu"))
    with TestClient(app) as client:
        r = client.post("/api/generate", json={"prompt": "봄이", "max_new_tokens": 3, "stream": False})
    assert r.status_code == 400 and "holds weights that are not finite numbers" in r.text, r.text  # at load
