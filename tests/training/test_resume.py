"""Resume takes what the user typed or refuses it in one line; a partial checkpoint still samples and says why it
cannot resume; resuming from best.pt keeps the run's newer ckpt.pt."""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from common.atomic_files import file_sha256
from common.errors import UserError
from inference.checkpoint import Checkpoint, TrainingState, load_checkpoint
from inference.loading import model_from_checkpoint
from model.config import ModelConfig
from tests.helpers import TINY, assert_one_line_error, cli, cli_all, config_object, tiny_model, train_job
from tokenizer import KoreanCharTokenizer
from training.settings.resume import apply_checkpoint_settings, summary, typed_keys
from training.trainer import train

# -- which settings a resume takes from the command line (in-process, no training) ---------------------------

ORIGINAL = ("model=tiny", "train.lr=0.001", "train.eval_interval=7", "data.path=/data/novel.txt", "seed=5")


def _fake_checkpoint():
    job = config_object("train", *ORIGINAL)
    return SimpleNamespace(model_config=job.model.with_vocab(60), config=asdict(job), path=Path("/r/ckpt.pt"), step=9)


def _resume(*typed: str):
    job = config_object("train", *typed)
    return job, apply_checkpoint_settings(job, _fake_checkpoint(), typed)


@pytest.mark.parametrize(
    "typed,key,old",
    [
        ("model.num_heads=2", "model.num_heads=2", "model.num_heads=4"),
        ("model.context_length=64", "model.context_length=64", "model.context_length=32"),
        ("model.embedding_size=32", "model.embedding_size=32", "model.embedding_size=64"),
        ("model.num_blocks=3", "model.num_blocks=3", "model.num_blocks=2"),
        ("model.tie_weights=true", "model.tie_weights=true", "model.tie_weights=false"),
        ("model.vocab_size=100", "model.vocab_size=100", "model.vocab_size=60"),
        ("data.tokenizer=jamo", "data.tokenizer=jamo", "data.tokenizer=char"),
        ("data.val_fraction=0.2", "data.val_fraction=0.2", "data.val_fraction=0.1"),
        ("seed=1", "seed=1", "seed=5"),
        ("model=small", "model.context_length=128", "model.context_length=32"),  # a group counts as typing its keys
        ("experiment=heads", "model.context_length=64", "model.context_length=32"),
        ("recipe=modern", "model.position=rope", "model.position=learned"),  # through its chain of files
    ],
)
def test_a_typed_change_the_checkpoint_cannot_honour_is_refused(typed, key, old):
    with pytest.raises(UserError) as e:
        _resume(typed)
    message = str(e.value)
    assert message.startswith(f"{key} cannot change when resuming: /r/ckpt.pt was trained with {old};"), message
    assert "drop the override" in message and "start a new run" in message


@pytest.mark.parametrize(
    "typed", ["model=tiny", "model.num_heads=4", "data.tokenizer=char", "seed=5", "data.val_fraction=0.1"]
)
def test_typing_the_checkpoints_own_value_is_accepted(typed):
    job, changed = _resume(typed)
    assert changed == []


def test_changeable_overrides_are_applied_and_listed():
    typed = (
        "train.lr=0.0005",
        "train.batch_size=3",
        "train.max_steps=40",
        "train.max_seconds=30",
        "model.dropout=0.1",
        "model.attention=heads",
        "train.eval_interval=3",
        "train.lr_schedule=constant",
        "train.eval_steps=2",
        "data.path=/data/other.txt",
    )
    job, changed = _resume(*typed)
    t = job.train
    assert (t.lr, t.batch_size, t.max_steps, t.max_seconds, t.eval_interval, t.lr_schedule, t.eval_steps) == (
        0.0005,
        3,
        40,
        30,
        3,
        "constant",
        2,
    )
    assert (job.model.dropout, job.model.attention, job.data.path) == (0.1, "heads", "/data/other.txt")
    assert changed[0] == "train.lr=0.0005 (was 0.001)" and len(changed) == len(typed)
    line = summary(_fake_checkpoint(), changed)
    assert line.startswith("resuming /r/ckpt.pt at step 9; from this command line: ") and "\n" not in line
    assert all(o.split("=")[0] + "=" in line for o in typed)


def test_settings_not_typed_are_the_checkpoints_not_the_yaml_defaults():
    job, changed = _resume()  # configs/train.yaml says model: small, lr 2e-3, eval_interval 250, seed 1337
    assert changed == []
    assert (job.model.context_length, job.model.embedding_size, job.model.vocab_size) == (32, 64, 60)
    assert (job.train.lr, job.train.eval_interval, job.data.path, job.seed) == (0.001, 7, "/data/novel.txt", 5)
    assert job.train.resume is None and job.device == "auto"  # about this start, never inherited
    job, _ = _resume("device=cpu", "train.overwrite=true")
    assert job.device == "cpu"


def test_typed_keys_reads_groups_and_experiments():
    assert typed_keys(["model.num_heads=2", "+seed=3", "model=tiny"]) == {"model.num_heads", "seed", "model"}
    assert {"model", "model.context_length", "model.head_size", "train.max_steps"} <= typed_keys(["experiment=heads"])
    assert {"model.position", "model.norm", "train.optimizer"} <= typed_keys(["recipe=modern"])


# -- partial and inconsistent checkpoints (in-process) -------------------------------------------------------


def _payload(**changes) -> dict:
    tok = KoreanCharTokenizer.from_text("가나다라마바사 아자차카타파하.")
    model = tiny_model(vocab_size=tok.vocab_size)
    state = TrainingState(
        3, {"state": {}, "param_groups": []}, {}, 1.0, 1.0, 1.0, {"torch": torch.get_rng_state()}, {"bit_generator": {}}
    )
    payload = Checkpoint(model.config, model.state_dict(), tok.to_dict(), 1.0, {}, state).to_payload()
    payload.update(changes)
    return payload


def _v1(payload: dict) -> dict:
    flat = {k: v for k, v in payload.items() if k != "training"}
    flat.update(payload["training"])
    flat["version"] = 1
    return flat


@pytest.mark.parametrize("drop", ["optimizer", "rng", "sampler", "step", "elapsed_seconds"])
@pytest.mark.parametrize("version", [1, 2])
def test_a_checkpoint_missing_part_of_its_training_state_samples_and_says_why_it_cannot_resume(tmp_path, drop, version):
    payload = _payload()
    del payload["training"][drop]
    torch.save(_v1(payload) if version == 1 else payload, tmp_path / "ckpt.pt")
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert ckpt.training is None
    refusal = ckpt.resume_refusal()
    assert f"lacks the training state's {drop}" in refusal and "generate.py" in refusal and "\n" not in refusal
    model = model_from_checkpoint(ckpt)  # the weights still load
    assert model(torch.zeros(1, 4, dtype=torch.long))[0].shape[-1] == ckpt.model_config.vocab_size


@pytest.mark.parametrize(
    "settings,needle",
    [
        (
            {"embedding_size": 16, "head_size": 16},
            "token_embedding.weight is [17, 32] but its model settings need [17, 16]",
        ),
        ({"num_blocks": 3}, "its weights lack blocks.2."),
        ({"vocab_size": 20}, "token_embedding.weight is [17, 32] but its model settings need [20, 32]"),
        ({"context_length": 8}, "position_embedding.weight is [16, 32]"),
    ],
)
def test_settings_that_disagree_with_the_weights_are_one_line(tmp_path, settings, needle):
    payload = _payload()
    payload["model_config"] = {**payload["model_config"], **settings}
    torch.save(payload, tmp_path / "ckpt.pt")
    with pytest.raises(UserError, match="is inconsistent") as e:
        load_checkpoint(tmp_path / "ckpt.pt")
    assert needle in str(e.value) and "cannot be sampled or resumed" in str(e.value)


@pytest.mark.parametrize(
    "part,broken", [("rng", {}), ("sampler", {}), ("optimizer", {"state": {}, "param_groups": []}), ("step", "many")]
)
def test_an_unusable_training_state_is_refused_in_one_line(tmp_path, small_corpus, part, broken):
    from training.trainer import train

    run = tmp_path / "run"
    train(train_job(tmp_path, f"data.path={small_corpus}", "train.max_steps=2", "train.eval_interval=2"), run)
    payload = torch.load(run / "ckpt.pt", weights_only=True)
    payload["training"][part] = broken
    torch.save(payload, run / "ckpt.pt")
    names = {"rng": "random-number state", "sampler": "sampler state", "optimizer": "optimizer state"}
    names["step"] = r"training state \(step is 'many', not a whole number\)"  # its shape, checked when opened
    with pytest.raises(UserError, match=f"has an unusable {names[part]}.*cannot be resumed.*generate.py"):
        train(train_job(tmp_path, f"data.path={small_corpus}", f"train.resume={run}", "train.max_steps=4"), run)


# -- through the command line ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_resume_on_the_command_line_refuses_applies_and_lists(tmp_path, small_corpus):
    run = tmp_path / "run"
    r = cli(
        "train.py",
        *TINY,
        "train.max_steps=4",
        "train.eval_interval=2",
        "train.lr_decay_steps=100",
        f"data.path={small_corpus}",
        f"hydra.run.dir={run}",
    )
    assert r.returncode == 0, r.stderr
    before = file_sha256(run / "ckpt.pt")
    partial = tmp_path / "partial" / "ckpt.pt"
    partial.parent.mkdir()
    payload = torch.load(run / "ckpt.pt", weights_only=True)
    del payload["training"]["optimizer"]
    torch.save(payload, partial)
    copies = [shutil.copytree(run, tmp_path / f"copy{i}") for i in range(4)]  # one training per folder at a time
    results = cli_all(
        *[
            ("train.py", "device=cpu", f"train.resume={c}", o)
            for c, o in zip(
                copies,
                ("model.num_heads=2", "model.context_length=64", "model.embedding_size=32", "data.tokenizer=jamo"),
                strict=True,
            )
        ],
        ("train.py", "device=cpu", f"train.resume={partial}"),
        ("generate.py", "device=cpu", f"ckpt={partial}", "max_new_tokens=5", "prompt=봄"),
        ("train.py", "device=cpu", f"train.resume={run}", "train.max_steps=6", "train.lr=0.001", "model.dropout=0.1"),
    )
    assert all(file_sha256(c / "ckpt.pt") == before for c in copies)
    for r, (key, old) in zip(
        results,
        [
            ("model.num_heads=2", "model.num_heads=4"),
            ("model.context_length=64", "model.context_length=32"),
            ("model.embedding_size=32", "model.embedding_size=64"),
            ("data.tokenizer=jamo", "data.tokenizer=char"),
        ],
        strict=False,
    ):
        assert_one_line_error(r, f"{key} cannot change when resuming", f"was trained with {old}", "drop the override")
    assert_one_line_error(results[4], "lacks the training state's optimizer", "cannot be resumed", "generate.py")
    assert results[5].returncode == 0, results[5].stderr
    applied = results[6]
    assert applied.returncode == 0, applied.stderr
    assert (
        f"resuming {run / 'ckpt.pt'} at step 4; from this command line: train.max_steps=6 (was 4), "
        "train.lr=0.001 (was 0.002), model.dropout=0.1 (was 0.0)\n"
    ) in applied.stdout
    # data.path, batch size, eval interval... were not typed: the checkpoint's, not the YAML defaults
    assert "step 6: train loss" in applied.stdout and "step 5:" not in applied.stdout
    config = load_checkpoint(run / "ckpt.pt").config
    assert config["data"]["path"] == str(small_corpus) and config["train"]["lr"] == 0.001
    assert config["train"]["batch_size"] == 2 and before != file_sha256(run / "ckpt.pt")


def _two_steps(tmp_path, small_corpus):
    """A run trained two steps in tmp_path/run, and the command line that trained it (less its limit)."""
    run = tmp_path / "run"
    base = ("train.py", *TINY, "train.eval_interval=2", "train.lr_decay_steps=100", f"data.path={small_corpus}")
    assert cli(*base, "train.max_steps=2", f"hydra.run.dir={run}").returncode == 0
    return run, base


@pytest.mark.slow
def test_resuming_from_best_keeps_the_newer_ckpt_under_its_own_name(tmp_path, small_corpus):
    run, base = _two_steps(tmp_path, small_corpus)
    shutil.copy(run / "ckpt.pt", tmp_path / "step2.pt")
    assert cli(*base, "train.max_steps=4", f"train.resume={run}").returncode == 0
    shutil.copy(tmp_path / "step2.pt", run / "best.pt")  # as if the loss had risen after step 2
    newer = file_sha256(run / "ckpt.pt")
    r = cli(*base, "train.max_steps=3", f"train.resume={run / 'best.pt'}")
    assert r.returncode == 0, r.stderr
    assert (
        "note: resuming from best.pt (step 2); the run's newer ckpt.pt (step 4) is kept as ckpt.step4.pt\n" in r.stdout
    )
    assert file_sha256(run / "ckpt.step4.pt") == newer
    assert load_checkpoint(run / "ckpt.pt").step == 3
    ModelConfig.from_dict(load_checkpoint(run / "ckpt.step4.pt").model_config.to_dict())


@pytest.mark.slow
def test_a_resume_that_runs_no_step_still_leaves_the_run_a_checkpoint(tmp_path, small_corpus):
    run, base = _two_steps(tmp_path, small_corpus)
    shutil.copy(run / "ckpt.pt", run / "best.pt")
    r = cli(*base, "train.max_steps=0", f"train.resume={run / 'best.pt'}")  # evaluates; the ckpt.pt is set aside
    assert r.returncode == 0 and "kept as ckpt.step2.pt" in r.stdout, r.stderr[-2000:]
    assert load_checkpoint(run / "ckpt.pt").step == 2  # generate.py ckpt=<run> still has its checkpoint


def test_a_resume_with_nothing_left_to_train_says_so_and_changes_nothing(tmp_path, corpus):
    """train.py: exit 0, one line, the checkpoints and the recorded settings (.hydra) byte for byte."""
    run = tmp_path / "run"
    common = (*TINY, f"data.path={corpus}", f"data.cache_dir={tmp_path / 'cache'}")
    r = cli("train.py", *common, "train.max_steps=3", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr
    files = [run / "ckpt.pt", run / "best.pt", *sorted((run / ".hydra").iterdir())]
    before = {p: p.read_bytes() for p in files}
    r = cli("train.py", *common, "train.max_steps=2", "train.lr=0.01", f"train.resume={run}")
    assert r.returncode == 0, r.stderr
    assert (
        "nothing to train: the checkpoint resumed is at step 3, and train.max_steps=2 ends the run there; it "
        "is evaluated as it stands (raise train.max_steps to train on)"
    ) in r.stdout.splitlines()
    assert f"run: {run}  step 3  val loss " in r.stdout
    assert {p: p.read_bytes() for p in files} == before


def test_a_resume_whose_time_budget_is_used_up_trains_nothing(tmp_path, corpus, capsys):
    run = tmp_path / "run"
    train(train_job(tmp_path, f"data.path={corpus}", "train.max_steps=3", "train.snapshot_interval=0"), run)
    before = file_sha256(run / "ckpt.pt")
    result = train(
        train_job(
            tmp_path,
            f"data.path={corpus}",
            "train.max_seconds=0.001",
            "train.snapshot_interval=0",
            f"train.resume={run}",
        ),
        run,
    )
    assert (result.step, result.stopped) == (3, "max_seconds") and file_sha256(run / "ckpt.pt") == before
    assert "train.max_seconds=0.001, used up" in capsys.readouterr().out


# -- a checkpoint's fields read back as the code writes them, or refused or ignored in one line ---------------


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, dict]:
    """A short run's checkpoint payload, for the cases below to edit (each in a folder of its own)."""
    from tests.helpers import KOREAN

    folder = tmp_path_factory.mktemp("written")
    (folder / "corpus.txt").write_text(KOREAN * 8, encoding="utf-8")
    job = train_job(folder, f"data.path={folder / 'corpus.txt'}", "train.max_steps=2", "train.eval_interval=2")
    train(job, folder / "run")
    return folder / "corpus.txt", torch.load(folder / "run" / "ckpt.pt", weights_only=True)


def _edited(tmp_path: Path, payload: dict, path: tuple, value) -> Path:
    import copy

    payload = copy.deepcopy(payload)
    node = payload
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    run = tmp_path / "run"
    run.mkdir()
    torch.save(payload, run / "ckpt.pt")
    return run


def _resumed(tmp_path: Path, corpus: Path, run: Path, steps: int = 4):
    return train(train_job(tmp_path, f"data.path={corpus}", f"train.resume={run}", f"train.max_steps={steps}"), run)


UNREADABLE = [  # what no reader can use: every command refuses the file, naming the field
    (("tokens_per_char",), "many", "an unusable tokens_per_char ('many', not a positive number)"),
    (("tokens_per_char",), float("nan"), "an unusable tokens_per_char (nan, not a positive number)"),
    (("tokens_per_char",), [2.0], "an unusable tokens_per_char (a list, not a positive number)"),
    (("config",), "settings", "an unusable config ('settings', not a mapping of the run's settings)"),
    (("tokenizer",), [1, 2], "an unusable tokenizer (a list, not a mapping)"),
]
UNRESUMABLE = [  # what a resume needs: it is refused naming the entry, the weights still sample
    (("training", "step"), "many", "unusable training state (step is 'many', not a whole number)"),
    (("training", "elapsed_seconds"), float("inf"), "unusable training state (elapsed_seconds is inf, not a number of"),
    (("training", "world_size"), 0, "unusable training state (world_size is 0, not a whole number from 1)"),
    (("training", "optimizer"), [1], "unusable training state (optimizer is a list, not a mapping)"),
    (("config", "seed"), None, "records an unusable seed (Incompatible value 'None'"),
    (("config", "data", "val_fraction"), [0.1], "records an unusable data.val_fraction ("),
]
SETTINGS = [  # what train.py takes from a checkpoint for every key not typed (a Python caller's job stands as given)
    (("config", "train", "lr"), "fast", "records an unusable train.lr (Value 'fast' of type 'str' could not be"),
    (("config", "train", "eval_interval"), -3, "cannot be resumed with these settings: train.eval_interval=-3 is"),
    (("config", "train", "mtp_weights"), {"a": 1}, "records an unusable train.mtp_weights ("),
]


@pytest.mark.parametrize("path,value,line", UNREADABLE, ids=lambda c: str(c)[:30])
def test_a_field_no_reader_can_use_is_refused_in_one_line_naming_it(tmp_path, written, path, value, line):
    from inference.loading import load_run

    corpus, payload = written
    run = _edited(tmp_path, payload, path, value)
    for read in (lambda: load_run(run, torch.device("cpu")), lambda: _resumed(tmp_path, corpus, run)):
        with pytest.raises(UserError) as e:
            read()
        assert line in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("path,value,line", UNRESUMABLE, ids=lambda c: str(c)[:30])
def test_a_field_a_resume_cannot_use_is_refused_in_one_line_and_the_weights_still_sample(
    tmp_path, written, path, value, line
):
    from inference.loading import load_run

    corpus, payload = written
    run = _edited(tmp_path, payload, path, value)
    with pytest.raises(UserError) as e:
        _resumed(tmp_path, corpus, run)
    assert line in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert load_run(run, torch.device("cpu")).line().startswith("weights: raw ")


@pytest.mark.parametrize("path,value,line", SETTINGS, ids=lambda c: str(c)[:30])
def test_a_setting_of_another_shape_refuses_the_resume_in_one_line_naming_it(tmp_path, written, path, value, line):
    corpus, payload = written
    run = _edited(tmp_path, payload, path, value)
    r = cli("train.py", f"data.path={corpus}", f"train.resume={run}", "train.max_steps=4")
    assert_one_line_error(r, line)


@pytest.mark.parametrize(
    "key,value",
    [
        ("measured", "fast"),
        ("measured", {"precision": {"step_ms": [10.0, 12.0], "chosen": "float32"}}),
        ("measured", {"precision": {"step_ms": {"float32": -1.0}, "chosen": "float32", "tokens_per_sec": 9.0}}),
        ("init_from", ["a run"]),
    ],
)
def test_a_record_of_another_shape_is_ignored_with_a_line_and_the_resumed_run_finishes(tmp_path, written, key, value):
    corpus, payload = written
    run = _edited(tmp_path, payload, ("config", key), value)
    r = cli("train.py", f"data.path={corpus}", f"train.resume={run}", "train.max_steps=4", "train.sample_chars=0")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert f"its config.{key}, in a shape this version never writes, is ignored" in r.stdout, r.stdout
    assert " step 4 " in r.stdout.splitlines()[-1] and load_checkpoint(run / "ckpt.pt").ignored == ()  # not kept
