"""Which file of a run folder a reader reads: `best.pt` only where it is this run's (the same model, tokenizer and
corpus) and its recorded validation loss is finite and lower than `ckpt.pt`'s; otherwise `ckpt.pt`, with the reason
best.pt was passed over in the reader's first line. One rule (inference/run_files.py) for generate.py, evaluate.py,
export.py, the playground and train.init_from."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest
import torch

from common.errors import UserError
from inference.checkpoint import Checkpoint, TrainingState, save_checkpoint
from inference.run_files import folder_file, run_file
from tests.helpers import KOREAN, assert_one_line_error, cli, cli_all, stderr_lines, tiny_model
from tokenizer import KoreanCharTokenizer

TOKENIZER = KoreanCharTokenizer.from_text(KOREAN)
CONFIG = {"data": {"path": "novels.txt", "val_fraction": 0.1, "val_files": None, "tokenizer": "char"}}


def save(
    folder: Path,
    name: str,
    step: int,
    loss: float,
    *,
    tokenizer: dict | None = None,
    config: dict | None = None,
    tokens_per_char: float = 1.0,
    **model,
) -> Path:
    """A checkpoint as a run writes it: its step and validation loss, the run's config, tokenizer and model."""
    tokenizer = tokenizer or TOKENIZER.to_dict()
    m = tiny_model(**{"vocab_size": len(tokenizer["chars"]) + 1, **model})
    training = TrainingState(step, {}, {}, loss, loss, 1.0, {}, {})
    folder.mkdir(parents=True, exist_ok=True)
    save_checkpoint(
        Checkpoint(
            m.config, m.state_dict(), tokenizer, tokens_per_char, CONFIG if config is None else config, training
        ),
        folder / name,
    )
    return folder / name


def pair(folder: Path, best_loss: float = 3.0, **best) -> Path:
    """ckpt.pt at step 8 (val loss 3.5) and a best.pt at step 4 with `best_loss` and whatever `best` changes."""
    save(folder, "ckpt.pt", 8, 3.5)
    save(folder, "best.pt", 4, best_loss, **best)
    return folder


def other_corpus_config() -> dict:
    return {"data": {**CONFIG["data"], "path": "reviews.txt"}}


FOREIGN = {  # a best.pt that is not this run's best, and the words that say why it was passed over
    "worse": (dict(best_loss=3.9), "its val loss 3.9000 (step 4) is not lower than ckpt.pt's 3.5000"),
    "equal": (dict(best_loss=3.5), "its val loss 3.5000 (step 4) is not lower than ckpt.pt's 3.5000"),
    "nan": (dict(best_loss=math.nan), "it records no validation loss"),
    "inf": (dict(best_loss=math.inf), "it records no validation loss"),
    "model": (dict(num_blocks=3), "it is another run's: its model differs (model.num_blocks=3, ckpt.pt's 2)"),
    "tokenizer": (
        dict(tokenizer=KoreanCharTokenizer.from_text(KOREAN + "★").to_dict()),
        "it is another run's: its tokenizer differs",
    ),
    "corpus": (
        dict(config=other_corpus_config()),
        "it is another run's: its corpus differs (data.path=reviews.txt, ckpt.pt's novels.txt)",
    ),
    "tokens_per_char": (
        dict(tokens_per_char=1.5),
        "it is another run's: its corpus differs (tokens_per_char=1.5, ckpt.pt's 1)",
    ),
}


@pytest.mark.parametrize("kind", FOREIGN)
def test_a_foreign_or_worse_best_pt_is_passed_over_and_the_line_says_why(kind, tmp_path):
    changes, why = FOREIGN[kind]
    chosen = folder_file(pair(tmp_path, **changes))
    assert (chosen.path, chosen.chosen, chosen.other) == (tmp_path / "ckpt.pt", "last", None)
    assert chosen.note == f"best.pt was passed over: {why}"
    words = chosen.words()
    assert words.startswith(f"{tmp_path / 'ckpt.pt'} (step 8, val loss 3.5000; best.pt was passed over: ")
    assert "the best validation" not in words


def test_a_better_best_pt_of_the_same_run_is_read_and_called_the_best(tmp_path):
    chosen = run_file(pair(tmp_path, dropout=0.1, attention="heads"))  # dropout and attention may change on resume
    assert (chosen.path, chosen.chosen, chosen.header.step, chosen.other.step) == (tmp_path / "best.pt", "best", 4, 8)
    assert chosen.note == "" and ": the best validation; the last weights, step 8 at 3.5000" in chosen.words()


def test_the_model_settings_a_resumed_run_may_change_are_the_trainers():
    from inference.run_files import RESUMABLE_MODEL_KEYS
    from training.settings.resume import MODEL_CHANGEABLE

    assert {f"model.{k}" for k in RESUMABLE_MODEL_KEYS} == set(MODEL_CHANGEABLE)


def test_a_run_written_before_its_config_recorded_the_corpus_is_still_one_run(tmp_path):
    save(tmp_path, "ckpt.pt", 8, 3.5, config={})
    save(tmp_path, "best.pt", 4, 3.0, config={"data": {"path": None}})  # the defaults, spelt out
    assert folder_file(tmp_path).chosen == "best"


def test_an_unreadable_best_pt_leaves_ckpt_pt(tmp_path):
    pair(tmp_path)
    data = (tmp_path / "best.pt").read_bytes()
    (tmp_path / "best.pt").write_bytes(data[: len(data) // 2])  # truncated
    chosen = folder_file(tmp_path)
    assert (chosen.path.name, chosen.chosen, chosen.note) == (
        "ckpt.pt",
        "last",
        "best.pt is there but cannot be read, so ckpt.pt was",
    )


def test_a_folder_with_best_pt_but_no_ckpt_pt_is_refused_naming_the_file_to_read(tmp_path):
    save(tmp_path, "best.pt", 4, 3.0)
    with pytest.raises(UserError) as e:
        folder_file(tmp_path)
    assert str(e.value) == (
        f"no ckpt.pt in run directory {tmp_path}: its best.pt cannot be compared with the run's "
        f"last weights, so it is not read as the run's best; name it to read it anyway: "
        f"ckpt={tmp_path / 'best.pt'}"
    )
    with pytest.raises(UserError, match=rf"anyway: train.init_from={tmp_path / 'best.pt'}$"):
        folder_file(tmp_path, "train.init_from")


def test_a_named_ckpt_pt_points_to_best_pt_only_where_a_folder_would_read_it(tmp_path):
    pair(tmp_path, best_loss=3.9)
    assert (
        run_file(tmp_path / "ckpt.pt").words() == f"{tmp_path / 'ckpt.pt'} (step 8, val loss 3.5000: the last "
        "weights, as named)"
    )
    save(tmp_path, "best.pt", 4, 3.0)
    assert run_file(tmp_path / "ckpt.pt").words().endswith("; the best, step 4 at 3.0000, are best.pt)")


# -- every reader, as a user runs it ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def worse(tmp_path_factory):
    """A run folder whose best.pt is worse than its ckpt.pt, and the text to score."""
    folder = tmp_path_factory.mktemp("worse")
    pair(folder / "run", best_loss=3.9)
    (folder / "text.txt").write_text(KOREAN, encoding="utf-8")
    return folder


WHY = "best.pt was passed over: its val loss 3.9000 (step 4) is not lower than ckpt.pt's 3.5000"


def test_generate_evaluate_and_export_read_ckpt_pt_and_say_why(worse):
    run = worse / "run"
    generated, scored, exported = cli_all(
        ("generate.py", f"ckpt={run}", "device=cpu", "prompt=봄이", "max_new_tokens=3"),
        ("evaluate.py", f"ckpt={run}", f"data.path={worse / 'text.txt'}", "device=cpu", "progress=false"),
        ("export.py", f"ckpt={run}", f"out={worse / 'exported'}", "verify=false"),
    )
    assert generated.returncode == 0, generated.stderr
    first = stderr_lines(generated.stderr)[0]
    assert (
        first == f"weights: raw (the run kept no average: train.average=none) from {run / 'ckpt.pt'} (step 8, "
        f"val loss 3.5000; {WHY})"
    )
    assert scored.returncode == 0, scored.stderr
    record = json.loads(scored.stdout)
    assert (record["checkpoint"], record["chosen"], record["step"], record["val_loss"]) == (
        str(run / "ckpt.pt"),
        "last",
        8,
        3.5,
    )
    assert record["note"] == WHY  # its one line, the JSON, says why
    if "safetensors" in exported.stderr and exported.returncode:
        pytest.skip("pip install -r requirements-dev.txt")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.startswith(f"exported {run / 'ckpt.pt'} (step 8, val loss 3.5000; {WHY})")
    card = (worse / "exported" / "README.md").read_text(encoding="utf-8")
    assert "also its best" not in card and WHY in card


def test_the_playground_lists_and_reads_ckpt_pt(worse):
    from playground.app import create_app
    from playground.config import ServeConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    with TestClient(create_app(ServeConfig(runs_dir=str(worse)), torch.device("cpu"))) as c:
        listed = [(r["name"], r["checkpoint"], r["chosen"], r["step"]) for r in c.get("/api/runs").json()]
        assert listed == [("run", "ckpt.pt", "last", 8)]


def test_train_init_from_starts_from_ckpt_pt_and_says_why(worse, tmp_path):
    from tests.helpers import train_job
    from training.session import setup

    job = train_job(
        tmp_path,
        f"train.init_from={worse / 'run'}",
        f"data.path={worse / 'text.txt'}",
        "train.max_steps=1",
        "train.sample_prompts=[]",
    )
    s, _ = setup(job, tmp_path / "new")
    s.logger.close()
    assert (s.init_record["from"], s.init_record["chosen"], s.init_record["step"]) == (
        str(worse / "run" / "ckpt.pt"),
        "last",
        8,
    )


def test_a_truncated_best_pt_named_is_not_told_to_use_best_pt(worse, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "ckpt.pt").write_bytes((worse / "run" / "ckpt.pt").read_bytes())
    data = (worse / "run" / "best.pt").read_bytes()
    (run / "best.pt").write_bytes(data[: len(data) // 2])
    line = assert_one_line_error(
        cli("generate.py", f"ckpt={run / 'best.pt'}", "device=cpu", "max_new_tokens=2"),
        f"checkpoint {run / 'best.pt'} is truncated or corrupt",
    )
    advice = line.split(";", 1)[1]
    assert "best.pt" not in advice and f"ckpt={run / 'ckpt.pt'}" in advice
