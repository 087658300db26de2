"""Every long wait of a training answers SIGINT and SIGTERM at once: an evaluation, a snapshot, the closing sample,
a compile's warm-up and the setup's first token-cache build, each leaving the last good checkpoint, said in one line;
`train.eval_steps` is capped to what the splits hold, said once.

The in-process tests make a wait that only a signal ends: the patched function sends the signal to this process and
then spins (a wait that never finishes on its own, within the test's bound), so nothing depends on timing."""

from __future__ import annotations

import math
import os
import re
import signal
import time

import pytest

from common.atomic_files import file_sha256
from common.errors import Interrupted
from inference.checkpoint import load_checkpoint
from tests.helpers import TINY, LineReader, start, train_job
from training import evaluation, trainer

# Signals sent to the test process itself (caught by the training's handlers): one test at a time.
pytestmark = pytest.mark.serial


def endless_wait(sig: signal.Signals, waited: list):
    """A stand-in for a wait of any length: sends `sig` to this process, then spins until the handler cuts it."""

    def wait(*args, **kwargs):
        os.kill(os.getpid(), sig)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pass
        waited.append("to the end")  # the signal went unanswered: the test fails
        return 4.0

    return wait


def _job(tmp_path, corpus, *overrides: str):
    return train_job(
        tmp_path,
        f"data.path={corpus}",
        "train.eval_interval=3",
        "train.dtype=float32",
        "train.snapshot_interval=0",
        *overrides,
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_during_an_evaluation_stops_it_and_saves_the_step(tmp_path, corpus, monkeypatch, capsys, sig):
    waited: list = []
    real, calls = evaluation.estimate_loss, []

    def estimate(*args, **kwargs):  # the first evaluation runs; the second never ends on its own
        calls.append(1)
        return real(*args, **kwargs) if len(calls) <= 2 else endless_wait(sig, waited)()

    monkeypatch.setattr(evaluation, "estimate_loss", estimate)
    result = trainer.train(_job(tmp_path, corpus, "train.max_steps=9"), tmp_path / "run")
    assert not waited and result.stopped == sig.name and result.step == 6
    said = f"stopped by {sig.name} at step 6; checkpoint saved, resume with train.resume="
    assert capsys.readouterr().out.count(said) == 1
    ckpt = load_checkpoint(tmp_path / "run" / "ckpt.pt")
    assert ckpt.step == 6 and ckpt.training.val_loss == result.best_val_loss  # the step-3 evaluation's, recorded
    assert load_checkpoint(tmp_path / "run" / "best.pt").step == 3


def test_a_signal_during_a_snapshot_keeps_the_checkpoint_written_before_it(tmp_path, corpus, monkeypatch):
    from training.reporting.tensorboard import RunLogger

    waited: list = []
    monkeypatch.setattr(RunLogger, "snapshot", lambda self, step: endless_wait(signal.SIGTERM, waited)())
    result = trainer.train(
        _job(tmp_path, corpus, "train.max_steps=9", "train.snapshot_interval=1000", "train.sample_tokens=4"),
        tmp_path / "run",
    )
    assert not waited and result.stopped == "SIGTERM" and result.step == 3
    ckpt = load_checkpoint(tmp_path / "run" / "ckpt.pt")
    assert ckpt.step == 3 and math.isfinite(ckpt.training.val_loss)  # validated and saved before the snapshot


def test_a_signal_during_the_closing_sample_ends_the_run_with_its_code(tmp_path, corpus, monkeypatch, capsys):
    waited: list = []
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    monkeypatch.setattr(trainer, "sample_chars", endless_wait(signal.SIGTERM, waited))
    result = trainer.train(_job(tmp_path, corpus, "train.max_steps=3", "train.sample_chars=50"), tmp_path / "run")
    assert not waited and result.stopped == "SIGTERM" and result.step == 3 and result.sample == ""
    assert "stopped by SIGTERM at step 3; checkpoint saved" in capsys.readouterr().out
    assert load_checkpoint(tmp_path / "run" / "ckpt.pt").step == 3
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers  # the caller's again


@pytest.mark.parametrize("name,code,line", [("SIGTERM", 143, "terminated"), ("SIGINT", 130, "interrupted")])
def test_an_interrupted_start_ends_in_the_signals_line_and_code(capsys, name, code, line):
    from cli.entry import run_cli

    def job():
        raise Interrupted(name)

    with pytest.raises(SystemExit) as ended:
        run_cli(job)
    assert ended.value.code == code and capsys.readouterr().err.strip() == line


def test_a_signal_during_the_first_token_cache_build_leaves_nothing_half_written(tmp_path, corpus, monkeypatch):
    """A resume whose token cache is built anew (another data.cache_dir): the build is cut at once, its temp file
    removed, the run's checkpoint as it was."""
    import data.corpus as token_cache

    run = tmp_path / "run"
    trainer.train(_job(tmp_path, corpus, "train.max_steps=3"), run)
    before = file_sha256(run / "ckpt.pt")
    waited: list = []
    real_scan = token_cache._scan

    def scan(ids):  # the build scans each chunk's ids as it writes them: the build's wait
        return endless_wait(signal.SIGTERM, waited)() if cache.exists() else real_scan(ids)

    cache = tmp_path / "new cache"
    monkeypatch.setattr(token_cache, "_scan", scan)
    with pytest.raises(Interrupted) as e:
        trainer.train(
            _job(tmp_path, corpus, "train.max_steps=6", f"train.resume={run}", f"data.cache_dir={cache}"), run
        )
    assert not waited and (e.value.signal_name, e.value.exit_code, e.value.line) == ("SIGTERM", 143, "terminated")
    assert list(cache.iterdir()) == [] and file_sha256(run / "ckpt.pt") == before


def test_eval_steps_beyond_the_splits_are_capped_and_said_once(tmp_path, corpus, monkeypatch, capsys):
    seen = []
    real = evaluation.estimate_loss
    monkeypatch.setattr(evaluation, "estimate_loss", lambda *a, **k: seen.append(a[4]) or real(*a, **k))
    trainer.train(_job(tmp_path, corpus, "train.max_steps=3", "train.eval_steps=100000"), tmp_path / "run")
    notes = [line for line in capsys.readouterr().out.splitlines() if "train.eval_steps=100000" in line]
    assert len(notes) == 1, notes
    cap = int(re.search(r"each evaluation scores (\d+) batches per split", notes[0]).group(1))
    assert seen == [cap] * 2 and 1 <= cap < 100000  # the evaluation's two splits


def test_a_default_run_is_not_capped(tmp_path, corpus, monkeypatch, capsys):
    seen = []
    real = evaluation.estimate_loss
    monkeypatch.setattr(evaluation, "estimate_loss", lambda *a, **k: seen.append(a[4]) or real(*a, **k))
    trainer.train(_job(tmp_path, corpus, "train.max_steps=3", "train.eval_steps=20"), tmp_path / "run")
    assert seen == [20, 20] and "train.eval_steps" not in capsys.readouterr().out


@pytest.mark.slow
def test_sigterm_during_a_long_closing_sample_is_answered_within_seconds(tmp_path, corpus):
    """train.py itself: a closing sample of a million characters (minutes of work), SIGTERM once it has begun."""
    run = tmp_path / "run"
    proc = start(
        "train.py",
        *TINY,
        "train.max_steps=2",
        "train.eval_interval=2",
        "train.sample_chars=1000000",
        f"data.path={corpus}",
        f"hydra.run.dir={run}",
    )
    reader = LineReader(proc)
    try:
        reader.wait_for("step 2:")  # the last evaluation and its checkpoint: the sample starts now
        time.sleep(0.5)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        answered = time.monotonic() - sent
    finally:
        proc.kill()
    out, err = reader.rest(), reader.stderr()
    assert rc == 143 and "Traceback" not in err, f"exit {rc}\n{out}\n{err}"
    assert answered < 15, answered  # a busy machine's seconds; unanswered, the sample would take minutes
    assert "stopped by SIGTERM at step 2; checkpoint saved" in out
    assert load_checkpoint(run / "ckpt.pt").step == 2


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_during_a_compile_warm_up_ends_the_run_at_once_keeping_the_step_reached(
    tmp_path, corpus, monkeypatch, capsys, sig
):
    """The first compiled forward compiles for tens of seconds: a signal then ends it at once, and the checkpoint saved
    is the step reached before it, untouched by the warm-up (no update, the batch put back)."""
    import torch

    from training.runner import steps as step_runner
    from training.runner.plan import Way

    waited: list = []

    class SlowCompile(torch.nn.Module):  # a stand-in for inductor: its first call is a wait only a signal ends
        def __init__(self, model):
            super().__init__()
            self.inner = model

        def forward(self, *args, **kwargs):
            endless_wait(sig, waited)()
            return self.inner(*args, **kwargs)

    monkeypatch.setattr(step_runner.torch, "compile", SlowCompile)
    monkeypatch.setattr(step_runner.plan, "fixed_way", lambda *a: None)  # auto: eager steps first, then the compile
    monkeypatch.setattr(step_runner.plan, "measured_way", lambda *a: (Way(inductor=True), "test"))
    result = trainer.train(_job(tmp_path, corpus, "train.max_steps=20", "train.compile=auto"), tmp_path / "run")
    assert not waited and result.stopped == sig.name
    reached = result.step
    assert reached == step_runner.plan.PROBE_STEPS + 1  # the timed eager steps, then the compile
    out = capsys.readouterr().out
    assert out.count(f"stopped by {sig.name} at step {reached}; checkpoint saved") == 1
    assert load_checkpoint(tmp_path / "run" / "ckpt.pt").step == reached
