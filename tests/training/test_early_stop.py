"""A longer run never hands a reader a worse model: readers take a run's best validated weights (best.pt where it
is the run's and better than ckpt.pt) and say so, `ckpt=<run>/ckpt.pt` picks the last weights, the run's end says
where it stood best, and `train.early_stop` stops a run whose validation has turned, which then counts as finished.

The memorising run: a tiny model at a high constant rate on a text whose training part is our test sentences six
times over and whose validation part (the last tenth) is other sentences, also written for these tests. It learns
the training text by heart within a few steps, so validation is best after one or two evaluations and rises from
there: the same turn a small model takes on the built-in corpus after a few hundred steps, in a few seconds. Which
evaluation is the best differs between a CPU that computes in bfloat16 and one that computes in float32, so the
tests read it from the run (`turn`)."""

from __future__ import annotations

import json
import math
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from inference.checkpoint import load_checkpoint, save_checkpoint
from inference.loading import load_run
from inference.run_files import folder_file, run_file
from tests.helpers import KOREAN, cli, cli_all, scalar_tags, stderr_lines, train_job
from training.early_stop import EarlyStop, patience
from training.trainer import train

OTHER = (
    "아침 일찍 일어나 창문을 열었더니 새들이 지저귀고 있었다. 커피를 한 잔 내려 마시며 신문을 펼쳤다.\n"
    "오후에는 도서관에 가서 소설책 두 권을 빌렸다. 돌아오는 길에 빵집에 들러 식빵을 샀다.\n"
    "저녁 무렵 비가 그치고 하늘이 맑아졌다. 강아지와 함께 공원을 한 바퀴 천천히 걸었다.\n"
)
MEMORISE = (
    "train.eval_interval=5",
    "train.lr=1e-2",
    "train.lr_schedule=constant",
    "train.warmup_steps=0",
    "train.batch_size=8",
    "train.log_interval=5",
    "train.snapshot_interval=0",
    "train.sample_tokens=0",
    "train.attention_tokens=0",
    "train.sample_prompts=[]",
)


def memorised(folder: Path, *overrides: str):
    """Train the memorising run into folder/run (in this process) -> (run folder, TrainResult)."""
    text = folder / "text.txt"
    text.write_text(KOREAN * 6 + OTHER, encoding="utf-8")
    run = folder / "run"
    job = train_job(folder, f"data.path={text}", *MEMORISE, *overrides)
    return run, train(job, run)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """Stopped early: two evaluations without a better one after the best, so it stops 10 steps after it."""
    return memorised(tmp_path_factory.mktemp("stopped"), "train.max_steps=60", "train.early_stop=2")


def turn(stopped) -> tuple[int, int]:
    """(the step of the best validation, the step the run stopped at) of the `stopped` run."""
    run, result = stopped
    return load_checkpoint(run / "best.pt").step, result.step


def test_a_run_that_memorises_stops_early_and_keeps_both_files(stopped):
    run, result = stopped
    b, last_step = turn(stopped)
    assert (result.step, result.stopped) == (b + 10, "early_stop") and b in (5, 10, 15)
    best, last = load_checkpoint(run / "best.pt"), load_checkpoint(run / "ckpt.pt")
    assert (best.step, last.step) == (b, last_step)
    assert last.training.early_stop["stopped_at"] == last_step and last.training.early_stop["best_step"] == b
    assert best.training.val_loss == result.best_val_loss < result.val_loss
    lines = result.closing.splitlines()
    assert lines[0].startswith(
        f"early stop at step {last_step}: 2 evaluations in a row without a better validation "
        f"loss (the best: step {b}, val loss "
    )
    assert lines[1].startswith(f"validation turned: the best was step {b}, val loss ")
    assert lines[2] == (
        "generate.py, evaluate.py, serve.py, export.py and train.init_from read best.pt (the best) "
        f"from this run; ckpt={run / 'ckpt.pt'} reads the last weights"
    )


def test_tensorboard_logs_the_best_validation_so_far(stopped):
    run, result = stopped
    tags = scalar_tags(run)
    best = [v for _, v in tags["val/best_loss"]]
    assert [s for s, _ in tags["val/best_loss"]] == list(range(5, turn(stopped)[1] + 1, 5))
    assert best == sorted(best, reverse=True) and best[-1] == pytest.approx(result.best_val_loss)
    assert best[-1] < tags["val/loss"][-1][1]


def test_generate_and_evaluate_read_best_pt_and_name_it_while_ckpt_pt_gives_the_last(stopped):
    run, _ = stopped
    b, last_step = turn(stopped)
    text = run.parent / "text.txt"
    generated, scored, named, best = cli_all(
        ("generate.py", f"ckpt={run}", "device=cpu", "prompt=봄이", "max_new_tokens=3"),
        ("evaluate.py", f"ckpt={run}", f"data.path={text}", "device=cpu", "progress=false"),
        ("evaluate.py", f"ckpt={run / 'ckpt.pt'}", f"data.path={text}", "device=cpu", "progress=false"),
        ("evaluate.py", f"ckpt={run / 'best.pt'}", f"data.path={text}", "device=cpu", "progress=false"),
    )
    for r in (generated, scored, named, best):
        assert r.returncode == 0, r.stderr
    best_loss = load_checkpoint(run / "best.pt").training.val_loss
    last_loss = load_checkpoint(run / "ckpt.pt").training.val_loss
    assert stderr_lines(generated.stderr)[0] == (
        f"weights: raw (the run kept no average: train.average=none) from {run / 'best.pt'} (step {b}, val loss "
        f"{best_loss:.4f}: the best validation; the last weights, step {last_step} at {last_loss:.4f}, are "
        f"ckpt={run / 'ckpt.pt'})"
    )
    scored, named, best = (json.loads(r.stdout) for r in (scored, named, best))
    assert (scored["checkpoint"], scored["chosen"], scored["step"]) == (str(run / "best.pt"), "best", b)
    assert (named["checkpoint"], named["chosen"], named["step"]) == (str(run / "ckpt.pt"), "named", last_step)
    assert scored["val_loss"] == best_loss and named["val_loss"] == last_loss
    assert scored["bpc"] == best["bpc"] != named["bpc"]  # the run folder scores as its best.pt, not its last weights


def test_the_first_line_of_a_named_ckpt_pt_says_it_is_the_last_and_where_the_best_is(stopped):
    run, _ = stopped
    b, last_step = turn(stopped)
    words = run_file(run / "ckpt.pt").words()
    assert words.startswith(f"{run / 'ckpt.pt'} (step {last_step}, val loss ")
    assert f": the last weights, as named; the best, step {b} at " in words and words.endswith(", are best.pt)")


def test_train_init_from_a_run_folder_starts_from_its_best_weights(stopped, tmp_path):
    from training.session import setup

    run, _ = stopped
    job = train_job(
        tmp_path,
        f"train.init_from={run}",
        f"data.path={run.parent / 'text.txt'}",
        "train.max_steps=1",
        "train.sample_prompts=['봄이']",
    )
    s, _ = setup(job, tmp_path / "new")
    s.logger.close()
    start, best = s.raw_model.state_dict(), load_checkpoint(run / "best.pt").model
    assert all(torch.equal(start[k], v) for k, v in best.items())
    chosen = (s.init_record["from"], s.init_record["chosen"], s.init_record["step"])
    assert chosen == (str(run / "best.pt"), "best", turn(stopped)[0])


def test_an_export_records_the_checkpoint_it_came_from(stopped, tmp_path):
    pytest.importorskip("safetensors", reason="pip install -r requirements-dev.txt")
    run, _ = stopped
    b = turn(stopped)[0]
    out = tmp_path / "exported"
    r = cli("export.py", f"ckpt={run}", f"out={out}", "verify=false")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"exported {run / 'best.pt'} (step {b}, val loss ")
    source = json.loads((out / "kochar.json").read_text(encoding="utf-8"))["source"]
    assert (source["checkpoint"], source["chosen"], source["step"]) == (str(run / "best.pt"), "best", b)
    assert source["val_loss"] == load_checkpoint(run / "best.pt").training.val_loss
    card = (out / "README.md").read_text(encoding="utf-8")
    assert f"- Exported from / 내보낸 체크포인트: `{run / 'best.pt'}` (step / 스텝 {b}, val loss / 검증 손실 " in card
    folder = load_run(out, torch.device("cpu"))  # read back, the folder names where it came from
    assert folder.source().startswith(f"{out / 'kochar.json'} (exported from {run / 'best.pt'}: step {b}, val loss ")


def test_the_playground_reads_and_lists_the_best_weights(stopped):
    from playground.app import create_app
    from playground.config import ServeConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    run, _ = stopped
    with TestClient(create_app(ServeConfig(runs_dir=str(run.parent)), torch.device("cpu"))) as c:
        listed = c.get("/api/runs").json()
        listed = [(r["name"], r["checkpoint"], r["chosen"], r["step"]) for r in listed]
        assert listed == [("run", "best.pt", "best", turn(stopped)[0])]
        answer = c.post("/api/generate", json={"run": "run", "prompt": "봄", "max_new_tokens": 2, "stream": False})
        assert answer.status_code == 200 and answer.json()["checkpoint"] == "best.pt"


def test_resuming_a_run_that_stopped_early_trains_nothing_unless_a_limit_is_raised(stopped, tmp_path, capsys):
    run, _ = stopped
    b, last_step = turn(stopped)
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    before = (copy / "ckpt.pt").read_bytes()
    job = train_job(
        tmp_path,
        f"data.path={run.parent / 'text.txt'}",
        *MEMORISE,
        "train.max_steps=60",
        "train.early_stop=2",
        f"train.resume={copy}",
    )
    result = train(job, copy)
    assert (result.step, result.stopped) == (last_step, "early_stop") and (copy / "ckpt.pt").read_bytes() == before
    assert (
        f"train.resume: this run stopped early at step {last_step} (validation had not improved for 2 evaluations "
        f"since step {b}); it counts as finished, so nothing is trained"
    ) in capsys.readouterr().out
    assert not result.closing.startswith("early stop at step")  # said once, at the start
    job = train_job(
        tmp_path,
        f"data.path={run.parent / 'text.txt'}",
        *MEMORISE,
        "train.max_steps=70",
        "train.early_stop=2",
        f"train.resume={copy}",
    )
    result = train(job, copy)  # raised: the count starts again, and the run stops two evaluations later
    assert (result.step, result.stopped) == (last_step + 10, "early_stop")
    assert (
        f"the run stopped early at step {last_step}; train.max_steps was raised (60 to 70), so it trains on"
        in capsys.readouterr().out
    )
    assert load_checkpoint(copy / "best.pt").step == b


def test_the_cli_resume_of_a_finished_run_says_so_and_exits_0(stopped, tmp_path):
    run, _ = stopped
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    r = cli("train.py", f"train.resume={copy}", "device=cpu", "train.sample_chars=0")
    assert r.returncode == 0, r.stderr
    assert "it counts as finished, so nothing is trained: raise train.max_steps" in r.stdout
    assert f"run: {copy}  step {turn(stopped)[1]}  " in r.stdout and "(early_stop)" in r.stdout


def test_the_average_and_best_pt_together(tmp_path):
    run, result = memorised(
        tmp_path, "train.max_steps=25", "train.early_stop=null", "train.average=ema", "train.ema_half_life=2"
    )
    assert result.stopped == "max_steps"
    best = load_checkpoint(run / "best.pt")
    assert best.step < 25 and best.averaged is not None  # chosen by the average's validation, holding both sets
    averaged, raw = load_run(run, torch.device("cpu")), load_run(run, torch.device("cpu"), weights="raw")
    assert averaged.path == raw.path == run / "best.pt"
    assert averaged.line().startswith(
        f"weights: averaged (train.average=ema, {best.training.average_updates} "
        f"updates) from {run / 'best.pt'} (step {best.step}, val loss "
    )
    assert raw.line().endswith("; that val loss is the average's)")
    assert all(torch.equal(averaged.model.state_dict()[k], v) for k, v in best.averaged.items())


# -- the rule, unit by unit ---------------------------------------------------------------------------------------


def test_auto_is_on_for_time_and_passes_and_off_for_max_steps():
    assert patience("auto", None) == 4 and patience("auto", 800) is None
    assert patience(None, None) is None and patience("3", 800) == 3


@pytest.mark.parametrize("value,shown", [("0", "0"), ("2.5", "2.5"), ("true", "True"), ("abc", "abc")])
def test_a_bad_early_stop_is_one_line_naming_the_key(value, shown):
    from common.errors import ConfigError
    from tests.helpers import config_object

    with pytest.raises(ConfigError, match=rf"^train.early_stop={shown} is invalid: give null \(off\), auto, or the "):
        config_object("train", f"train.early_stop={value}")


def test_early_stop_takes_null_auto_and_a_count():
    from tests.helpers import config_object

    assert [config_object("train", f"train.early_stop={v}").train.early_stop for v in ("null", "auto", "3")] == [
        None,
        "auto",
        "3",
    ]
    assert config_object("train").train.early_stop == "auto"


def test_jitter_within_the_noise_margin_never_stops_and_the_last_evaluation_never_does():
    e = EarlyStop(patience=2)
    best = math.inf
    for step, loss in ((5, 4.0), (10, 4.02), (15, 4.03), (20, 4.001)):  # within 0.05 bpc (0.0347 nats) of 4.0
        assert not e.count(step, loss, best, 1.0, last=False)
        best = min(best, loss)
    assert (e.best_step, e.stale) == (5, 3)
    assert not e.count(25, 4.5, best, 1.0, last=True)  # turned, but the limit ends the run
    assert e.count(30, 4.5, best, 1.0, last=False) and e.stopped_at == 30


def test_a_saved_count_comes_back_and_junk_is_nothing_counted():
    e = EarlyStop(3, 10, 2, 20, {"max_steps": 60, "max_seconds": None})
    assert EarlyStop.restored(e.record()).record() == e.record()
    assert EarlyStop.restored({"stale": "x", "limits": [1], "best_step": True}).record() == EarlyStop().record()
    assert EarlyStop.restored(None).record() == EarlyStop().record()


def test_a_raised_limit_or_a_patience_that_no_longer_holds_trains_on():
    stopped = lambda: EarlyStop(2, 10, 2, 20, {"max_steps": None, "max_seconds": 300.0})  # noqa: E731
    assert stopped().going_on({"max_steps": None, "max_seconds": 300.0}) is None
    assert stopped().going_on({"max_steps": 5000, "max_seconds": 300.0}) is None  # a step limit added is no raise
    e = stopped()
    assert e.going_on({"max_steps": None, "max_seconds": 600.0}) == "train.max_seconds was raised (300 to 600)"
    assert e.stale == 0
    e = stopped()
    e.patience = 5
    assert e.going_on({"max_steps": None, "max_seconds": 300.0}).startswith("train.early_stop=5 allows 3 more")


def test_which_file_a_reader_reads(tmp_path):
    from inference.checkpoint import Checkpoint, TrainingState
    from tests.helpers import tiny_model

    def save(name: str, step: int, loss: float) -> None:
        m = tiny_model()
        training = TrainingState(step, {}, {}, loss, loss, 1.0, {}, {})
        save_checkpoint(
            Checkpoint(m.config, m.state_dict(), {"kind": "char", "chars": []}, training=training), tmp_path / name
        )

    save("ckpt.pt", 8, 3.5)
    assert (folder_file(tmp_path).path.name, folder_file(tmp_path).chosen) == ("ckpt.pt", "last")
    shutil.copy(tmp_path / "ckpt.pt", tmp_path / "best.pt")  # the last evaluation was the best
    assert (folder_file(tmp_path).path.name, folder_file(tmp_path).words()) == (
        "ckpt.pt",
        f"{tmp_path / 'ckpt.pt'} (step 8, val loss 3.5000)",
    )
    save("best.pt", 4, 3.0)
    chosen = run_file(tmp_path)
    assert (chosen.path.name, chosen.chosen, chosen.header.step, chosen.other.step) == ("best.pt", "best", 4, 8)
    (tmp_path / "best.pt").write_bytes(b"not a checkpoint")
    chosen = run_file(tmp_path)
    assert (chosen.path.name, chosen.note) == ("ckpt.pt", "best.pt is there but cannot be read, so ckpt.pt was")


def test_an_average_an_early_stop_left_empty_says_the_raw_weights_are_read():
    from tests.helpers import tiny_model
    from training.optim.averaging import WeightAverage
    from training.settings.config import TrainConfig

    average = WeightAverage(tiny_model(), TrainConfig(average="swa"))
    assert average.summary() == (
        "average: train.average=swa, no update (every 1 step from 0.75 of the run): the run "
        "stopped early, before the first; generate.py, evaluate.py, serve.py and export.py "
        "read the raw weights"
    )


# -- torchrun: every rank stops at the same evaluation ------------------------------------------------------------


@pytest.mark.serial
@pytest.mark.slow
def test_two_processes_under_torchrun_stop_early_together(tmp_path):
    import subprocess
    import sys

    from tests.helpers import ROOT, _env

    text = tmp_path / "text.txt"
    text.write_text(KOREAN * 6 + OTHER, encoding="utf-8")
    run = tmp_path / "run"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            str(ROOT / "train.py"),
            "model=tiny",
            "device=cpu",
            "train.eval_steps=2",
            "train.sample_chars=0",
            *MEMORISE,
            "train.max_steps=200",
            "train.early_stop=2",
            f"data.path={text}",
            f"hydra.run.dir={run}",
            f"data.cache_dir={tmp_path / 'cache'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=_env(None),
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]  # a rank that went on alone would hang in its next collective
    stops = [line for line in r.stdout.splitlines() if line.startswith("early stop at step")]
    assert len(stops) == 1, r.stdout  # rank 0 alone says so
    step = int(stops[0].split()[4].rstrip(":"))
    assert f"step {step}  " in r.stdout and "(early_stop)" in r.stdout and step < 200
    assert load_checkpoint(run / "ckpt.pt").training.early_stop["stopped_at"] == step


def test_early_stopping_that_cannot_act_is_refused_when_typed_and_silent_under_auto(tmp_path, capsys):
    """A run whose step limit leaves fewer evaluations before its last than the patience can never stop early."""
    from common.errors import ConfigError

    text = tmp_path / "text.txt"
    text.write_text(KOREAN * 6 + OTHER, encoding="utf-8")
    few = (f"data.path={text}", *MEMORISE, "train.max_steps=17")  # evaluations at 5, 10, 15 and the last, 17
    with pytest.raises(
        ConfigError,
        match=r"^train\.early_stop=3 cannot act in this run: .* this run makes 4 "
        r"evaluations \(every train\.eval_interval=5 steps up to step 17\); drop "
        r"train\.early_stop, or evaluate more often",
    ):
        train(train_job(tmp_path, *few, "train.early_stop=3"), tmp_path / "typed")
    assert not (tmp_path / "typed" / "ckpt.pt").exists()
    train(train_job(tmp_path, *few, "train.early_stop=2"), tmp_path / "acts")  # 2 can stop at step 15
    assert "early stop: after 2 evaluations in a row" in capsys.readouterr().out
    result = train(train_job(tmp_path, f"data.path={text}", *MEMORISE, "train.max_epochs=0.5"), tmp_path / "auto")
    assert result.stopped == "max_epochs" and "early stop:" not in capsys.readouterr().out  # auto: 4, one evaluation


def test_the_evaluations_a_run_has_left():
    from training.early_stop import can_act, evaluations_left

    assert evaluations_left(0, 12, 5) == 3 and evaluations_left(0, 10, 5) == 2 and evaluations_left(0, None, 5) is None
    assert evaluations_left(10, 12, 5) == 1 and evaluations_left(12, 12, 5) == 0
    assert can_act(EarlyStop(), math.inf, 1, 3) and not can_act(EarlyStop(), math.inf, 2, 3)  # best, stale, last
    assert can_act(EarlyStop(best_step=5, stale=1), 4.0, 3, 3)  # resumed one evaluation into the count
