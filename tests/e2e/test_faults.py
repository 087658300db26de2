"""Faults a disk or a second process can throw at a training: a full disk while saving, two trainings in one
run folder (and the lock a killed one leaves), and a failed `train.overwrite=true` start deleting nothing."""

from __future__ import annotations

import errno
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import inference.checkpoint as checkpoint_module
from cli.run_lock import LOCK_NAME, RunLock, folder_named
from common.atomic_files import file_sha256
from common.errors import UserError
from inference.checkpoint import Checkpoint, CheckpointWriteError, load_checkpoint, save_checkpoint
from tests.helpers import (
    ENDLESS,
    ROOT,
    TINY,
    LineReader,
    _env,
    assert_one_line_error,
    cli,
    start,
    stderr_lines,
    tiny_model,
)

# Signals, kills and torchrun timing: `make test` runs these after the parallel tests, one at a time.
pytestmark = pytest.mark.serial

# -- a full disk while a checkpoint is written ----------------------------------------------------------------

FAILURES = {
    "enospc": (OSError(errno.ENOSPC, "No space left on device"), "the disk is full"),
    "quota": (OSError(errno.EDQUOT, "Disk quota exceeded"), "the disk is full"),
    "read_only": (OSError(errno.EROFS, "Read-only file system"), "Read-only file system"),
    "torch_runtime": (
        RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed"),
        "write failed: PytorchStreamWriter failed writing file data/0: file write failed",
    ),
}


@pytest.mark.parametrize("name", FAILURES)
def test_a_failed_checkpoint_write_keeps_the_old_file_and_says_so(tmp_path, monkeypatch, name):
    error, reason = FAILURES[name]
    model = tiny_model()
    ckpt = Checkpoint(model.config, model.state_dict(), {"kind": "char", "chars": []})
    path = tmp_path / "ckpt.pt"
    save_checkpoint(ckpt, path)
    before = file_sha256(path)

    def failing_save(obj, f):
        f.write(b"half a checkpoint")
        raise error

    monkeypatch.setattr(checkpoint_module.torch, "save", failing_save)
    with pytest.raises(CheckpointWriteError) as e:
        save_checkpoint(ckpt, path)
    assert str(e.value) == (
        f"could not save checkpoint {path} ({reason}); the previous ckpt.pt is kept unchanged; "
        "free space or fix the folder, then resume"
    )
    assert e.value.exit_code == 1 and isinstance(e.value, UserError)
    with pytest.raises(CheckpointWriteError, match="nothing was written"):
        save_checkpoint(ckpt, tmp_path / "best.pt")
    assert file_sha256(path) == before and not list(tmp_path.glob(".*.tmp")) and not (tmp_path / "best.pt").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode,reason",
    [("enospc", "the disk is full"), ("runtime", "write failed: PytorchStreamWriter failed writing file data/3")],
)
def test_a_full_disk_during_training_is_one_line_and_the_last_checkpoint_stays(tmp_path, corpus, mode, reason):
    run = tmp_path / "run"
    r = cli(
        "tests/e2e/fault_save.py",
        mode,
        "2",
        *TINY,
        "train.max_steps=6",
        "train.eval_interval=2",
        "train.lr_decay_steps=100",
        f"data.path={corpus}",
        f"hydra.run.dir={run}",
    )
    lines = stderr_lines(r.stderr)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[-1].startswith(f"error: could not save checkpoint {run / 'ckpt.pt'} ({reason}"), r.stderr
    assert "the previous ckpt.pt is kept unchanged" in lines[-1]
    assert sum(line.startswith("error:") for line in lines) == 1
    assert load_checkpoint(run / "ckpt.pt").step == 2 and not list(run.glob(".*.tmp"))


# -- one training per run folder ------------------------------------------------------------------------------

HOLD = (
    "import sys, threading; sys.path.insert(0, sys.argv[2]); from cli.run_lock import RunLock; "
    "lock = RunLock(sys.argv[1]); print('locked', flush=True); threading.Event().wait()"
)


def _holder(folder: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder), str(ROOT)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "locked\n"  # the holder says when it holds the lock
    return proc


def test_a_second_lock_is_refused_naming_the_first_and_a_killed_holders_lock_is_taken_over(tmp_path, capsys):
    for folder in (tmp_path / "run", tmp_path / "new" / "deeper"):
        proc = _holder(folder)
        try:
            with pytest.raises(UserError, match=rf"another training \(process {proc.pid}\) is using {folder}; "):
                RunLock(folder)
            assert (folder / LOCK_NAME).read_text() == f"{proc.pid}\n"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        with RunLock(folder) as lock:  # the kernel dropped the killed holder's lock: stale, taken over
            assert f"was locked by process {proc.pid}, which is no longer running" in capsys.readouterr().err
            with RunLock(folder):  # re-entrant in one process
                pass
            assert (folder / LOCK_NAME).read_text() == f"{os.getpid()}\n"
        assert lock.key is None and not (folder / LOCK_NAME).exists()  # released and removed
        with RunLock(folder):
            assert capsys.readouterr().err == ""  # a lock released normally leaves nothing stale


def test_folder_named_reads_the_command_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "best.pt").write_bytes(b"x")
    assert folder_named([f"hydra.run.dir={run}"]) == run
    assert folder_named([f"train.resume={run}"]) == run
    assert folder_named([f"train.resume={run / 'best.pt'}"]) == run
    assert folder_named([f"hydra.run.dir='{run}'", "model=tiny"]) == run
    for argv in (
        [f"hydra.run.dir={tmp_path / 'missing'}"],
        ["model=tiny"],
        ["-m", f"hydra.run.dir={run}"],
        ["--help", f"train.resume={run}"],
        ["hydra.run.dir=runs/${now:%H}"],
    ):
        assert folder_named(argv) is None, argv


@pytest.mark.slow
def test_a_second_training_into_a_busy_folder_is_refused_before_it_writes(tmp_path, corpus):
    run = tmp_path / "run"
    proc = start(*ENDLESS, "train.eval_interval=2", f"data.path={corpus}", f"hydra.run.dir={run}")
    reader = LineReader(proc)
    try:
        reader.wait_for("step 2:")  # the first training runs and has checkpointed
        record = {p: file_sha256(p) for p in (run / ".hydra").iterdir()}
        for extra in (("train.overwrite=true", f"hydra.run.dir={run}"), (f"train.resume={run}",)):
            r = cli("train.py", *TINY, *extra, f"data.path={corpus}")
            assert_one_line_error(r, f"another training (process {proc.pid}) is using {run}")
        # not even Hydra's record was rewritten
        assert {p: file_sha256(p) for p in (run / ".hydra").iterdir()} == record
        assert proc.poll() is None
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    finally:
        proc.kill()
    assert not (run / LOCK_NAME).exists()  # released on the way out
    reader.rest()
    reader.stderr()


# -- train.overwrite=true deletes nothing until every check has passed ----------------------------------------


@pytest.mark.slow
def test_overwrite_with_a_mistyped_corpus_deletes_nothing(tmp_path, corpus):
    run = tmp_path / "run"
    r = cli(
        "train.py", *TINY, "train.max_steps=2", "train.eval_interval=2", f"data.path={corpus}", f"hydra.run.dir={run}"
    )
    assert r.returncode == 0, r.stderr
    before = {p.name: file_sha256(p) for p in run.iterdir() if p.is_file()}
    assert any(name.startswith("events.out.tfevents.") for name in before)
    (tmp_path / "no_text").mkdir()  # a folder is a corpus now; one holding no text file is refused
    for bad in (
        f"data.path={tmp_path / 'corpus.tx'}",
        f"data.path={tmp_path / 'no_text'}",
        "model.context_length=100000",
    ):
        r = cli("train.py", *TINY, "train.overwrite=true", "train.max_steps=2", bad, f"hydra.run.dir={run}")
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert {p.name: file_sha256(p) for p in run.iterdir() if p.is_file()} == before, bad
    assert load_checkpoint(run / "ckpt.pt").step == 2
    assert all(torch.isfinite(v).all() for v in load_checkpoint(run / "ckpt.pt").model.values())


# -- signals and ranks under torchrun (two CPU workers over gloo) ----------------------------------------------
# What the workers control is tested: one line per event, the checkpoint whole, the resume command printed once.
# What only torchrun's agent controls is asserted as it is, so a change in torch shows up here: the agent
# answers SIGTERM / Ctrl-C with its own SignalException traceback and a dead worker with its ChildFailedError
# report, and exits 1 in both cases (docs/en/training.md, "Signals and torchrun").

# The agent checks its workers every 2 s (its default is 0.1 s): a rank whose peer was killed then reports the
# loss itself before the agent's SIGTERM reaches it, even on a loaded machine (as with the default, on an idle one).
TORCHRUN = (
    "-m",
    "torch.distributed.run",
    "--standalone",
    "--nproc_per_node=2",
    "--monitor-interval=2",
    str(ROOT / "train.py"),
    *TINY,
    "train.max_steps=100000",
    "train.eval_interval=3",
    "train.lr_decay_steps=1000",
)


def _torchrun(tmp_path: Path, corpus: Path) -> tuple[subprocess.Popen, LineReader]:
    proc = subprocess.Popen(
        [sys.executable, *TORCHRUN, f"data.path={corpus}", f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(None),
        start_new_session=True,
    )  # its own process group, as a terminal would start it
    reader = LineReader(proc)
    reader.wait_for("step 3:")  # both ranks train and rank 0 has checkpointed
    return proc, reader


def _worker(agent: int, rank: int) -> int:
    for child in Path(f"/proc/{agent}/task/{agent}/children").read_text().split():
        if f"RANK={rank}".encode() in Path(f"/proc/{child}/environ").read_bytes().split(b"\0"):
            return int(child)
    raise AssertionError(f"no rank {rank} among the children of {agent}")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM to torchrun", "Ctrl-C to the process group"])
def test_a_signal_to_torchrun_stops_every_rank_with_one_line_and_the_checkpoint(tmp_path, corpus, how):
    proc, reader = _torchrun(tmp_path, corpus)
    sig = signal.SIGTERM if how.startswith("SIGTERM") else signal.SIGINT
    try:
        if sig == signal.SIGTERM:
            proc.send_signal(sig)
        else:  # the terminal sends Ctrl-C to every process of the group; the agent forwards a second one
            os.killpg(proc.pid, sig)
        rc = proc.wait(timeout=120)
    finally:
        os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
    out, err = reader.rest(), reader.stderr()
    stops = re.findall(rf"stopped by {sig.name} at step (\d+); checkpoint saved, resume with train.resume=(\S+)", out)
    assert len(stops) == 1 and stops[0][1] == str(tmp_path / "run"), out
    assert load_checkpoint(tmp_path / "run" / "ckpt.pt").step == int(stops[0][0])
    assert not re.search(r"KeyboardInterrupt$|^interrupted$|DistBackendError|^error:", err, re.M), err
    assert not (tmp_path / "run" / LOCK_NAME).exists()
    assert rc == 1 and "SignalException" in err  # the agent's own report: not ours to change


@pytest.mark.slow
def test_kill_9_of_one_rank_leaves_one_line_and_a_whole_checkpoint(tmp_path, corpus):
    proc, reader = _torchrun(tmp_path, corpus)
    run = tmp_path / "run"
    try:
        os.kill(_worker(proc.pid, 1), signal.SIGKILL)
        rc = proc.wait(timeout=120)
    finally:
        os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
    reader.rest()
    err = reader.stderr()
    lines = [line for line in stderr_lines(err) if "error:" in line]
    assert len(lines) == 1 and lines[0].startswith("error: rank 0 lost contact with another rank"), err
    assert lines[0].endswith(f"the last checkpoint in {run} is intact: resume with train.resume={run}")
    assert "Traceback" not in err.split("ChildFailedError")[0].split("lost contact")[0], err
    ckpt = load_checkpoint(run / "ckpt.pt")
    assert ckpt.step >= 3 and all(torch.isfinite(v).all() for v in ckpt.model.values())
    assert rc == 1 and "ChildFailedError" in err  # the agent's own report of the dead worker
    r = cli("train.py", *TINY, f"train.resume={run}", f"train.max_steps={ckpt.step + 1}", f"data.path={corpus}")
    assert r.returncode == 0 and "took its lock over" in r.stderr, r.stderr  # rank 0 ended without releasing it
