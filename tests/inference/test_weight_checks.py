"""A weight file is checked for what it computes before any conversion (inference/weight_checks.py): every key known,
no per-head key beside a stacked `qkv`, float dtypes, shapes, then finite logits, in every reader, train.resume and
train.init_from; a folder holding two models is refused with both paths named; the shape checks build no model
that imports torch._dynamo."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from common.errors import UserError
from inference.checkpoint import Checkpoint, load_checkpoint, probe_model, save_checkpoint, usable
from inference.loading import load_run
from inference.run_files import resolve_checkpoint
from inference.weight_checks import expected_state, meta_model
from model.config import CHOICES, SWITCHES, ModelConfig
from tests.helpers import ROOT, assert_one_line_error, cli, tiny_model, train_job
from tokenizer import KoreanCharTokenizer

TEXT = "가나다라마바사 아자차카타파하. 봄이 오면 꽃이 핀다."


def _checkpoint(
    tmp_path, edit=None, attention: str = "fused", name: str = "run", **settings
) -> tuple[Checkpoint, object]:
    """A checkpoint of a tiny model in `tmp_path/name/ckpt.pt`, its state dict changed by `edit` first."""
    tok = KoreanCharTokenizer.from_text(TEXT)
    model = tiny_model(attention, vocab_size=tok.vocab_size, **settings)
    state = dict(model.state_dict())
    if edit is not None:
        edit(state)
    run = tmp_path / name
    run.mkdir()
    ckpt = Checkpoint(model.config, state, tok.to_dict(), 1.0)
    save_checkpoint(ckpt, run / "ckpt.pt")
    return ckpt, run


def _refused(call, *needles: str) -> str:
    with pytest.raises(UserError) as e:
        call()
    message = str(e.value)
    assert "\n" not in message and all(n in message for n in needles), message
    return message


STRUCTURE = {  # name: (how the fused state dict is damaged, what the one line says)
    "stray_head_beside_qkv": (
        lambda s: s.update({"blocks.0.attn.heads.0.query.weight": torch.zeros(8, 32)}),
        "holds both the stacked blocks.0.attn.qkv and the per-head blocks.0.attn.heads.0.query.weight",
    ),
    "integer_weights": (
        lambda s: s.update({"ln_f.weight": s["ln_f.weight"].long()}),
        "ln_f.weight holds int64 numbers where weights are floating-point",
    ),
    "boolean_weights": (lambda s: s.update({"blocks.1.ln1.bias": s["blocks.1.ln1.bias"] > 0}), "holds bool numbers"),
    "not_a_tensor": (lambda s: s.update({"ln_f.bias": [0.0] * 32}), "ln_f.bias is a list, not a tensor"),
    "unknown_key": (
        lambda s: s.update({"blocks.0.wings.weight": torch.zeros(2)}),
        "it holds blocks.0.wings.weight, which its model settings do not use",
    ),
    "unknown_block": (
        lambda s: s.update({"blocks.7.attn.heads.0.query.weight": torch.zeros(8, 32)}),
        "it holds blocks.7.attn.heads.0.query.weight, which its model settings do not use",
    ),
    "missing": (lambda s: s.pop("blocks.1.ffwd.fc.bias"), "its weights lack blocks.1.ffwd.fc.bias"),
    "reshaped": (
        lambda s: s.update({"ln_f.weight": torch.ones(31)}),
        "ln_f.weight is [31] but its model settings need [32]",
    ),
}


@pytest.mark.parametrize("case", STRUCTURE)
def test_a_damaged_structure_is_refused_before_any_conversion_in_one_line(tmp_path, case):
    edit, needle = STRUCTURE[case]
    _, run = _checkpoint(tmp_path, edit)
    _refused(lambda: load_checkpoint(run / "ckpt.pt"), f"checkpoint {run / 'ckpt.pt'}", needle)


HEADS = {  # name: (how a per-head (lecture layout) state dict is damaged, what the one line says)
    "a_head_missing": (
        lambda s: s.pop("blocks.0.attn.heads.3.value.weight"),
        "its weights lack blocks.0.attn.heads.3.value.weight",
    ),
    "a_head_too_many": (
        lambda s: s.update({"blocks.0.attn.heads.4.key.weight": torch.zeros(8, 32)}),
        "it holds blocks.0.attn.heads.4.key.weight, which its model settings do not use (model.num_heads=4)",
    ),
    "a_head_reshaped": (
        lambda s: s.update({"blocks.1.attn.heads.2.key.weight": torch.zeros(8, 31)}),
        "blocks.1.attn.heads.2.key.weight is [8, 31] but its model settings need [8, 32]",
    ),
    "qkv_beside_heads": (
        lambda s: s.update({"blocks.1.attn.qkv": torch.zeros(3, 4, 8, 32)}),
        "holds both the stacked blocks.1.attn.qkv",
    ),
}


@pytest.mark.parametrize("saved_in", ["heads", "fused"])
@pytest.mark.parametrize("case", HEADS)
def test_per_head_weights_are_checked_as_each_head_of_the_stack(tmp_path, case, saved_in):
    """A file written head by head (the lecture's layout, or any file from before the fused qkv) is checked in its
    own layout, whichever layout its settings build."""
    edit, needle = HEADS[case]

    def damaged(state):
        match_heads(state)
        edit(state)

    _, run = _checkpoint(tmp_path, damaged, attention=saved_in)
    _refused(lambda: load_checkpoint(run / "ckpt.pt"), needle)


def match_heads(state: dict) -> None:
    """`state` rewritten head by head, in place."""
    from model.qkv_layout import to_heads

    heads = to_heads(state)
    state.clear()
    state.update(heads)


@pytest.mark.parametrize("saved_in,settings", [("heads", "fused"), ("fused", "heads"), ("heads", "heads")])
def test_either_layout_still_loads_under_either_setting(tmp_path, saved_in, settings):
    ckpt, run = _checkpoint(tmp_path, match_heads if saved_in == "heads" else None, attention=settings)
    loaded = load_checkpoint(run / "ckpt.pt")
    assert set(loaded.model) == set(expected_state(loaded.model_config))


def _overflowing(state: dict) -> None:
    """Finite weights whose logits are not: the final norm's gain and the head's rows near float32's largest."""
    state["ln_f.weight"] = torch.full_like(state["ln_f.weight"], 3e38)
    state["lm_head.weight"] = torch.full_like(state["lm_head.weight"], 3e38)


def test_finite_weights_with_logits_that_are_not_are_refused_by_every_reader(tmp_path):
    ckpt, run = _checkpoint(tmp_path, _overflowing)
    assert all(bool(torch.isfinite(w).all()) for w in ckpt.model.values())
    _refused(
        lambda: load_run(run, torch.device("cpu")),
        f"the raw weights of {run / 'ckpt.pt'} compute logits that are not finite numbers",
    )
    _refused(lambda: load_run(run, torch.device("cpu"), weights="raw"), "not finite numbers")
    _refused(lambda: usable(load_checkpoint(run / "ckpt.pt")), "raw weights of", "resumed or fine-tuned from")
    from training.checkpoints import open_resume
    from training.init_from import load_source

    _refused(lambda: load_source(train_job(tmp_path, f"train.init_from={run}")), "compute logits that are not finite")
    _refused(lambda: open_resume(train_job(tmp_path, f"train.resume={run}"), run, True), "compute logits that are not")
    pytest.importorskip("safetensors")
    from hf_export.writer import write_folder

    folder = tmp_path / "exported"
    write_folder(ckpt, KoreanCharTokenizer.from_text(TEXT), 1, folder, "python export.py", False, verify=False)
    _refused(lambda: load_run(folder, torch.device("cpu")), f"weights of {folder / 'kochar.json'} compute logits")


def test_the_averaged_weights_are_checked_too(tmp_path):
    ckpt, run = _checkpoint(tmp_path)
    averaged = dict(ckpt.model)
    _overflowing(averaged)
    save_checkpoint(Checkpoint(ckpt.model_config, ckpt.model, ckpt.tokenizer, 1.0, averaged=averaged), run / "ckpt.pt")
    _refused(lambda: load_run(run, torch.device("cpu")), "the averaged weights of")
    load_run(run, torch.device("cpu"), weights="raw")  # the raw set alone is sound
    _refused(lambda: usable(load_checkpoint(run / "ckpt.pt")), "the averaged weights of")  # a resume keeps both


def test_the_exporter_names_the_weights_not_itself(tmp_path):
    from hf_export.writer import check_folder

    model = tiny_model()
    with torch.no_grad():
        model.ln_f.weight.fill_(3e38)
        model.lm_head.weight.fill_(3e38)
    message = _refused(
        lambda: check_folder(tmp_path / "never-read", model, "runs/x/ckpt.pt"),
        "the weights of runs/x/ckpt.pt compute logits that are not finite",
        "nothing was written",
    )
    assert "report" not in message


def test_the_cli_refuses_weights_that_compute_no_finite_logits_in_one_line(tmp_path):
    _, run = _checkpoint(tmp_path, _overflowing)
    r = cli("generate.py", f"ckpt={run}", "device=cpu", "max_new_tokens=3")
    assert_one_line_error(r, f"the raw weights of {run / 'ckpt.pt'}", "not finite numbers")


def test_a_folder_holding_a_checkpoint_and_an_exported_model_is_refused_naming_both(tmp_path):
    pytest.importorskip("safetensors")
    from hf_export.writer import write_folder
    from playground.runs import RunRegistry

    ckpt, run = _checkpoint(tmp_path)
    write_folder(
        ckpt, KoreanCharTokenizer.from_text(TEXT), 1, tmp_path / "exported", "python export.py", False, verify=False
    )
    for name in ("kochar.json", "model.safetensors"):
        (run / name).write_bytes((tmp_path / "exported" / name).read_bytes())
    both = (str(run / "ckpt.pt"), str(run / "kochar.json"))
    _refused(lambda: load_run(run, torch.device("cpu")), f"ckpt={run} holds two models", *both)
    _refused(lambda: RunRegistry(tmp_path, str(run)), "holds two models", *both)
    _refused(lambda: resolve_checkpoint(run, key="train.resume"), f"train.resume={run} holds two models", *both)
    _refused(lambda: resolve_checkpoint(None, tmp_path), "holds two models")  # the newest run is that folder
    assert load_run(run / "ckpt.pt", torch.device("cpu")).checkpoint.held is None  # a file named is never refused
    assert load_run(run / "kochar.json", torch.device("cpu")).checkpoint.held == "raw"
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    r = cli("evaluate.py", f"ckpt={run}", f"data.path={tmp_path / 'text.txt'}", "device=cpu")
    assert_one_line_error(r, *both)


def _configs() -> list[ModelConfig]:
    base = dict(
        vocab_size=11300, context_length=8, embedding_size=16, head_size=16, num_heads=2, num_blocks=2, dropout=0.0
    )
    out = [ModelConfig(**base)]
    for name, kinds in CHOICES.items():
        for kind in kinds:
            out.append(ModelConfig(**{**base, name: kind}))
    out += [ModelConfig(**{**base, switch: True}) for switch in SWITCHES]
    return out + [ModelConfig(**{**base, "logit_softcap": 15.0, "embedding": "jamo", "position": "rope"})]


def test_the_shapes_only_build_gives_the_model_s_own_names_shapes_and_logits():
    """For every kind and switch: the meta build's state dict is the real model's, and the weights assigned into it
    compute the real model's logits (its derived tables, made on the CPU, are the real ones)."""
    from model import AttentionLanguageModel

    ids = torch.tensor([[0, 5, 11180, 77, 3]])
    for config in _configs():
        torch.manual_seed(0)
        real = AttentionLanguageModel(config).eval()
        state = real.state_dict()
        assert {k: (v.dtype, tuple(v.shape)) for k, v in state.items()} == expected_state(config), config
        assert all(p.is_meta for p in meta_model(config).parameters())
        with torch.no_grad():
            torch.testing.assert_close(probe_model(config, state).eval()(ids)[0], real(ids)[0], msg=str(config))


def test_reading_weights_imports_no_torch_dynamo(tmp_path):
    """The shape checks of a checkpoint and of an exported folder, the reader's whole load, and the meta build of
    every kind and switch, in a fresh interpreter: torch._dynamo (a second or more of every reader's start) is never
    imported."""
    pytest.importorskip("safetensors")
    from hf_export.writer import write_folder

    ckpt, run = _checkpoint(tmp_path, position="rope", norm="rmsnorm", mlp="swiglu")  # exported as a LLaMA
    write_folder(
        ckpt, KoreanCharTokenizer.from_text(TEXT), 1, tmp_path / "exported", "python export.py", False, verify=False
    )
    code = (
        "import sys, torch; from inference.loading import load_run; "
        f"load_run({str(run)!r}, torch.device('cpu')); load_run({str(tmp_path / 'exported')!r}, "
        "torch.device('cpu')); from tests.inference.test_weight_checks import _configs; "
        "from inference.weight_checks import meta_model; [meta_model(c) for c in _configs()]; "
        "print(sorted(m for m in sys.modules if m.startswith('torch._dynamo')))"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]", r.stdout


def test_the_logit_check_passes_what_trains_and_is_cheap():
    from inference.checkpoint import refuse_non_finite_logits

    model = tiny_model().train()
    refuse_non_finite_logits(model, "x")
    assert model.training  # its mode is given back
