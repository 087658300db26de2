"""No work is lost: Ctrl-C / SIGTERM save and resume, SIGKILL mid-write leaves a loadable checkpoint, a NaN
loss keeps the last good checkpoint, and a checkpoint crafted to run code is refused without running it.

Everything goes through the real `train.py` / `generate.py` command lines.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
from pathlib import Path

import pytest
import torch

from common.atomic_files import file_sha256
from common.errors import UserError
from inference.checkpoint import FORMAT, load_checkpoint
from inference.run_files import newest_checkpoint, resolve_checkpoint
from tests.helpers import ENDLESS, TINY, LineReader, assert_one_line_error, cli, cli_all, start, stderr_lines

# Signals, kills and torchrun timing: `make test` runs these after the parallel tests, one at a time.
pytestmark = pytest.mark.serial


@pytest.mark.slow
@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_a_checkpoint_that_resumes(tmp_path, corpus, sig, code):
    run = tmp_path / "run"
    proc = start(*ENDLESS, "train.eval_interval=5", f"data.path={corpus}", f"hydra.run.dir={run}")
    reader = LineReader(proc)
    try:
        reader.wait_for("step 5:")  # training is under way and has checkpointed once
        proc.send_signal(sig)
        rc = proc.wait(timeout=60)
    finally:
        proc.kill()
    out, err = reader.rest(), reader.stderr()
    assert rc in (0, code), f"exit {rc}\n{out}\n{err}"
    assert "Traceback" not in err
    stopped = re.findall(rf"stopped by {sig.name} at step (\d+); checkpoint saved, resume with train.resume=", out)
    assert len(stopped) == 1, out  # said once
    step = int(stopped[0])
    assert step >= 5
    assert load_checkpoint(run / "ckpt.pt").step == step  # saved at the step it stopped, not at step 5

    # a plain second run into the folder is refused (tests/cli/test_one_line_errors.py); resume or overwrite are not
    if sig == signal.SIGINT:
        r = cli(
            "train.py",
            *TINY,
            f"train.resume={run}",
            f"train.max_steps={step + 3}",
            "train.eval_interval=100",
            "train.lr_decay_steps=1000",
            f"data.path={corpus}",
        )
        assert r.returncode == 0, r.stderr
        assert f"step {step + 3}: train loss" in r.stdout
        assert load_checkpoint(run / "ckpt.pt").step == step + 3
    else:
        r = cli(
            "train.py",
            *TINY,
            "train.overwrite=true",
            "train.max_steps=1",
            "train.eval_interval=1",
            f"data.path={corpus}",
            f"hydra.run.dir={run}",
        )
        assert r.returncode == 0, r.stderr
        assert load_checkpoint(run / "ckpt.pt").step == 1


def _temp_files(run: Path) -> list[Path]:
    return sorted(run.glob(".*.tmp"))


@pytest.mark.slow
def test_sigkill_during_checkpoint_writes_leaves_a_loadable_checkpoint(tmp_path, corpus):
    """kill -9 in the middle of a checkpoint write, twice: tests/e2e/fault_save.py writes half of the n-th ckpt.pt,
    says so on stdout and waits, so the kill lands there every time (no guessed delay)."""
    run = tmp_path / "runs" / "run"
    for attempt, nth in enumerate((2, 3)):
        resume = (f"train.resume={run}",) if attempt else (f"hydra.run.dir={run}",)
        proc = start(
            "tests/e2e/fault_save.py",
            "hold",
            str(nth),
            *ENDLESS[1:],
            "train.eval_interval=1",
            f"data.path={corpus}",
            *resume,
        )
        reader = LineReader(proc)
        try:
            reader.wait_for("fault: holding a half-written checkpoint")
            assert (run / f".ckpt.pt.{proc.pid}.tmp").stat().st_size > 0  # the half-written file
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
        finally:
            proc.kill()
        err = reader.stderr()
        if attempt:  # the first killed process's lock was stale; this one took it over
            assert "which is no longer running; took its lock over" in err, err
        assert (run / f".ckpt.pt.{proc.pid}.tmp").exists()  # the killed process's temp file is left behind
        for name in ("ckpt.pt", "best.pt"):
            ckpt = load_checkpoint(run / name)  # never half a file
            assert ckpt.step >= nth - 1
            assert all(torch.isfinite(v).all() for v in ckpt.model.values())

    # leftover temp files (plus one planted for a process id that cannot exist) are never taken for checkpoints
    (run / ".ckpt.pt.999999999.tmp").write_bytes(b"half a checkpoint")
    assert resolve_checkpoint(run) == run / "ckpt.pt"
    assert newest_checkpoint(tmp_path / "runs") == run / "ckpt.pt"
    step = load_checkpoint(run / "ckpt.pt").step
    r = cli(
        "train.py",
        *TINY,
        f"train.resume={run}",
        f"train.max_steps={step + 2}",
        "train.eval_interval=1",
        "train.lr_decay_steps=1000",
        f"data.path={corpus}",
    )
    assert r.returncode == 0, r.stderr
    assert load_checkpoint(run / "ckpt.pt").step == step + 2
    assert list(run.glob(".ckpt.pt.*.tmp")) == []  # the next save removed the dead processes' temp files


@pytest.mark.slow
def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, corpus):
    run = tmp_path / "run"
    r = cli(
        "train.py",
        *TINY,
        "train.max_steps=4",
        "train.eval_interval=2",
        "train.lr_decay_steps=1000",
        f"data.path={corpus}",
        f"hydra.run.dir={run}",
    )
    assert r.returncode == 0, r.stderr
    before = {name: file_sha256(run / name) for name in ("ckpt.pt", "best.pt")}

    r = cli(
        "tests/e2e/fault_nan.py",
        "5",
        *TINY,
        f"train.resume={run}",
        "train.max_steps=10",
        "train.eval_interval=1",
        "train.lr_decay_steps=1000",
        f"data.path={corpus}",
    )
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr
    errors = [line for line in stderr_lines(r.stderr) if line.startswith("error:")]
    assert len(errors) == 1 and errors[0] == stderr_lines(r.stderr)[-1], r.stderr
    assert "the loss became nan at step 5" in errors[0] and "last good checkpoint is kept" in errors[0]
    assert {name: file_sha256(run / name) for name in before} == before  # byte for byte
    assert load_checkpoint(run / "ckpt.pt").step == 4


class _Marker:
    """Unpickling this calls open(marker, "w"): a stand-in for any code an attacker would run."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def _malicious_files(d: Path, marker: Path) -> tuple[Path, Path]:
    as_torch = d / "evil_torch" / "ckpt.pt"  # torch's zip format, looking like one of ours
    as_torch.parent.mkdir()
    torch.save(
        {"format": FORMAT, "version": 1, "model": _Marker(marker), "model_config": {}, "tokenizer": {}}, as_torch
    )
    as_pickle = d / "evil_pickle" / "ckpt.pt"  # a bare pickle stream
    as_pickle.parent.mkdir()
    as_pickle.write_bytes(pickle.dumps({"format": FORMAT, "model": _Marker(marker)}, protocol=4))
    return as_torch, as_pickle


def test_malicious_checkpoint_is_refused_in_process(tmp_path):
    marker = tmp_path / "PWNED"
    for path in _malicious_files(tmp_path, marker):
        with pytest.raises(UserError, match="refusing to load"):
            load_checkpoint(path)
    assert not marker.exists()


@pytest.mark.slow
def test_malicious_checkpoint_is_refused_by_generate_and_resume(tmp_path):
    marker = tmp_path / "PWNED"
    as_torch, as_pickle = _malicious_files(tmp_path, marker)
    g, t = cli_all(
        ("generate.py", "device=cpu", f"ckpt={as_torch}", "max_new_tokens=5"),
        ("train.py", *TINY, f"train.resume={as_pickle.parent}"),
    )
    assert_one_line_error(g, "refusing to load", str(as_torch))
    assert_one_line_error(t, "refusing to load", str(as_pickle))
    assert not marker.exists()
    assert not os.path.exists(Path.cwd() / "PWNED")


def test_the_ready_file_marks_the_installed_hook(tmp_path):
    ready = tmp_path / "ready"
    code = "import sys; sys.path.insert(0, sys.argv[1]); import cli.entry; print(sys.excepthook.__name__)"
    r = cli("-c", code, str(Path(__file__).resolve().parents[2]), env={"KOCHAR_READY_FILE": str(ready)})
    assert r.returncode == 0 and r.stdout.strip() == "_interrupt_hook" and ready.exists(), r.stderr


def test_a_ctrl_c_that_python_swallows_in_a_callback_still_ends_the_command_in_one_line():
    """A Ctrl-C landing in a weakref callback or a __del__ (CI once saw one in an import lock's callback) is only
    printed by Python, with a traceback, and the command goes on; it must end the command like any other."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import cli.entry\n"
        "class Dying:\n    def __del__(self):\n        raise KeyboardInterrupt\n"
        "Dying()\nimport time\ntime.sleep(30)\nprint('went on')\n"
    )
    r = cli("-c", code, str(Path(__file__).resolve().parents[2]))
    assert (r.returncode, r.stdout, r.stderr.strip()) == (130, "", "interrupted"), r.stderr


def test_a_ctrl_c_wrapped_by_python_still_ends_in_one_line(tmp_path):
    """Python 3.11 turns a Ctrl-C that lands in a class body's __set_name__ (as while importing ipaddress) into a
    RuntimeError caused by the KeyboardInterrupt; CI once saw that traceback instead of `interrupted`."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import cli.entry\n"
        "try:\n    raise KeyboardInterrupt\nexcept KeyboardInterrupt as e:\n"
        "    raise RuntimeError('Error calling __set_name__') from e\n"
    )
    r = cli("-c", code, str(Path(__file__).resolve().parents[2]))
    assert r.returncode == 130 and "Traceback" not in r.stderr and r.stderr.strip() == "interrupted", r.stderr


def test_run_cli_reads_an_interrupt_inside_another_error_as_an_interrupt(capsys):
    from cli.entry import run_cli

    def job():
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as e:
            raise RuntimeError("wrapped") from e

    with pytest.raises(SystemExit) as ended:
        run_cli(job)
    assert ended.value.code == 130 and capsys.readouterr().err.strip() == "interrupted"
