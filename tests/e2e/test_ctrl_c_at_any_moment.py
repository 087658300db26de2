"""Ctrl-C at any moment of an entry script's start-up (its imports, torch's and numpy's among them, and Hydra's
start of the job) until the script does its own work ends the command in one line: `interrupted` (or, once a
training runs, its own `stopped by SIGINT` line), exit 130, no traceback and no abort, nothing half-written.

Each script is interrupted as numpy's import begins (tests/e2e/interrupt_at_import.py: inside torch's, a moment a
guessed delay rarely hits; train.py also once its run folder is made, before its first step), at its own work (a
training's first step, or the FIFO given as the checkpoint opened for reading; that start measures how long after
the ready file it comes), at the ready file (cli.entry's first import has installed the handler), and at a random
moment within each of MOMENTS equal slices of the time between.
No command can end on its own first: train.py trains without end; generate, evaluate and export wait on the FIFO.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cli.run_lock import LOCK_NAME
from tests.helpers import ENDLESS, LineReader, start, stderr_lines

MOMENTS = 3


def _arguments(script: str, folder: Path, corpus: Path) -> tuple[str, ...]:
    if script == "train.py":
        run = f"hydra.run.dir={folder / 'run'}"
        return (*ENDLESS[1:], "train.compile=false", "train.eval_interval=1", f"data.path={corpus}", run)
    os.mkfifo(folder / "ckpt.pt")
    return {
        "generate.py": ("device=cpu", f"ckpt={folder / 'ckpt.pt'}"),
        "evaluate.py": ("device=cpu", f"ckpt={folder / 'ckpt.pt'}", f"data.path={corpus}"),
        "export.py": (f"ckpt={folder / 'ckpt.pt'}", f"out={folder / 'export'}"),
    }[script]


def _wait_for_work(script: str, proc, reader: LineReader, folder: Path) -> int | None:
    """Wait until the command does its own work; for a FIFO, its writing end is returned open (a reader then
    waits for data, not for an end of file)."""
    if script == "train.py":
        reader.wait_for("step 1:")  # every step is evaluated and printed: training runs
        return None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            return os.open(folder / "ckpt.pt", os.O_WRONLY | os.O_NONBLOCK)  # opens once a reader has it open
        except OSError:
            time.sleep(0.005)
    raise AssertionError(f"{script} never opened its checkpoint: exit {proc.poll()}\n{reader.stderr(1)}")


def _signal(script: str, proc, reader: LineReader, folder: Path, when: float | str) -> tuple[float, int | None]:
    """Send SIGINT `when` seconds after the ready file, or at the work; the moment, and the FIFO's writer."""
    while not (folder / "ready").exists():
        assert proc.poll() is None, reader.stderr(1)
        time.sleep(0.002)
    ready = time.monotonic()
    writer = None
    if when == "work":
        writer = _wait_for_work(script, proc, reader, folder)
    else:
        time.sleep(when)
    moment = time.monotonic() - ready
    proc.send_signal(signal.SIGINT)
    return moment, writer


def _interrupt(script: str, folder: Path, corpus: Path, when: float | str) -> float:
    """Interrupt `script` at `when`: seconds after the ready file, "work", or "import <module>"; check how it
    ends. Returns the seconds from the ready file to the signal."""
    folder.mkdir()
    arguments = _arguments(script, folder, corpus)
    at_import = isinstance(when, str) and when.startswith("import ")
    if at_import:
        proc = start("tests/e2e/interrupt_at_import.py", when.split()[1], script, *arguments)
    else:
        proc = start(script, *arguments, env={"KOCHAR_READY_FILE": str(folder / "ready")})
    reader, moment, writer = LineReader(proc), 0.0, None
    try:
        if not at_import:
            moment, writer = _signal(script, proc, reader, folder, when)
        at = f"{script}: a Ctrl-C at {when}" + ("" if at_import else f" ({moment:.2f}s after the ready file)")
        rc = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{at} was lost: the command went on") from None
    finally:
        proc.kill()
        if writer is not None:
            os.close(writer)
    out, err = reader.rest(), reader.stderr()
    said = f"{at}: exit {rc}\n{out[-1000:]}\n{err[-3000:]}"
    stopped = "stopped by SIGINT at step" in out  # training had started
    assert rc == 130 and "Traceback" not in out + err and "terminate called" not in err, said
    assert stopped or stderr_lines(err)[-1] == "interrupted", said
    left = {p.name for p in folder.iterdir()} - {"ready", "ckpt.pt"}
    assert left == ({"run"} if stopped else set()), said  # no run folder, lock or export, whole or half
    if stopped:
        run = folder / "run"
        assert (run / "ckpt.pt").is_file() and not (run / LOCK_NAME).exists() and not list(run.glob(".*.tmp"))
    return moment


@pytest.mark.slow
@pytest.mark.parametrize("script", ["train.py", "generate.py", "evaluate.py", "export.py"])
def test_ctrl_c_at_any_moment_of_the_start_up_ends_the_command_in_one_line(tmp_path, corpus, script):
    _interrupt(script, tmp_path / "at numpy", corpus, "import numpy")
    if script == "train.py":  # the run folder and its TensorBoard file are made; no step yet: nothing is kept
        _interrupt(script, tmp_path / "at the run folder", corpus, "import inference.generation")
    window = _interrupt(script, tmp_path / "at work", corpus, "work")
    _interrupt(script, tmp_path / "at ready", corpus, 0.0)
    for i in range(MOMENTS):
        _interrupt(script, tmp_path / f"moment {i}", corpus, window * (i + random.random()) / MOMENTS)
