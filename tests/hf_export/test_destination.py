"""Where an export goes: overwrite=true replaces only a previous export (never the run, a folder holding it, or
the user's files), one export per folder at a time, nothing half-written or left behind, the umask's modes,
and every file-system fault one line. The folder is written with verify=false: these are about the disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import hf_export.writer as writer
from common.errors import UserError
from hf_export.destination import PREFIX
from hf_export.writer import write_folder
from inference.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from model import AttentionLanguageModel
from model.config import ModelConfig
from tests.helpers import KOREAN, assert_one_line_error, cli, small_disk, start
from tokenizer import KoreanCharTokenizer

pytest.importorskip("safetensors", reason="pip install -r requirements-dev.txt")


@pytest.fixture
def run(tmp_path):
    """A tiny run folder (ckpt.pt, events, a file of the user's) and its checkpoint, loaded as export loads it."""
    tok = KoreanCharTokenizer.from_text(KOREAN)
    torch.manual_seed(0)
    model = AttentionLanguageModel(
        ModelConfig(
            vocab_size=tok.vocab_size, context_length=16, embedding_size=16, head_size=16, num_heads=2, num_blocks=1
        )
    )
    folder = tmp_path / "runs" / "r1"
    folder.mkdir(parents=True)
    save_checkpoint(Checkpoint(model.config, model.state_dict(), tok.to_dict(), 1.0), folder / "ckpt.pt")
    (folder / "events.out.tfevents.1").write_bytes(b"curves")
    (tmp_path / "runs" / "notes.txt").write_text("mine")
    return load_checkpoint(folder / "ckpt.pt"), tok


def export(run, out: Path, overwrite: bool = False) -> str:
    ckpt, tok = run
    return write_folder(ckpt, tok, 1, out, "python export.py (test)", overwrite, verify=False)


def one_line(e: pytest.ExceptionInfo, *needles: str) -> str:
    message = str(e.value)
    assert "\n" not in message and all(n in message for n in needles), message
    return message


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize("target", ["the run", "the folder holding it"])
def test_overwrite_never_replaces_the_run_being_exported(run, target):
    folder = run[0].path.parent
    out = folder if target == "the run" else folder.parent
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(UserError) as e:
        export(run, out, overwrite=True)
    one_line(e, "holds the run being exported")
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


@pytest.mark.parametrize("extra", ["notes.txt", ".git"])
def test_overwrite_replaces_only_what_an_export_wrote(run, tmp_path, extra):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "a.txt").write_text("mine")
    with pytest.raises(UserError) as e:
        export(run, mine, overwrite=True)
    one_line(e, "holds files but no export")
    assert (mine / "a.txt").read_text() == "mine"
    out = tmp_path / "exported"
    export(run, out)
    (out / extra).mkdir() if extra == ".git" else (out / extra).write_text("mine")
    with pytest.raises(UserError) as e:
        export(run, out, overwrite=True)
    one_line(e, "also what an export never writes", extra)
    assert (out / extra).exists()
    (out / extra).rmdir() if extra == ".git" else (out / extra).unlink()
    export(run, out, overwrite=True)  # a previous export alone is replaced
    empty = tmp_path / "empty"
    empty.mkdir()
    export(run, empty)  # as is an empty folder
    assert (empty / "kochar.json").is_file() and not hidden(tmp_path)


def test_a_second_export_to_the_same_folder_at_once_is_refused(run, tmp_path, monkeypatch):
    out, inside, go = tmp_path / "exported", threading.Event(), threading.Event()
    original = writer.write_tokenizer

    def slow_tokenizer(*args):
        inside.set()
        go.wait(30)
        return original(*args)

    monkeypatch.setattr(writer, "write_tokenizer", slow_tokenizer)
    first_error: list[BaseException] = []
    first = threading.Thread(target=lambda: _record(first_error, lambda: export(run, out)))
    first.start()
    assert inside.wait(30)
    try:
        with pytest.raises(UserError) as e:
            export(run, out, overwrite=True)
        one_line(e, "another export is writing")
    finally:
        go.set()
        first.join(30)
    assert not first_error and json.loads((out / "kochar.json").read_text())["format"] == "kochar-gpt/export"
    assert not hidden(tmp_path)


def _record(errors: list, fn) -> None:
    try:
        fn()
    except BaseException as e:  # noqa: BLE001 - handed to the test
        errors.append(e)


def test_an_interrupted_replacement_keeps_the_previous_export_whole(run, tmp_path, monkeypatch):
    out = tmp_path / "exported"
    export(run, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    rename = Path.rename

    def interrupted(self, target):
        if self.name.startswith(PREFIX) and not self.name.endswith(".old") and Path(target) == out:
            raise KeyboardInterrupt  # Ctrl-C just as the new folder would take the name
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export(run, out, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and not hidden(tmp_path)


def test_what_a_killed_export_left_is_removed_by_the_next(run, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    left = tmp_path / f"{PREFIX}{dead.pid}.abcd1234"
    left.mkdir()
    (left / "model.safetensors").write_bytes(b"\0" * 1000)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    busy = tmp_path / f"{PREFIX}{alive.pid}.ef567890"  # another export, still running: left alone
    busy.mkdir()
    try:
        export(run, tmp_path / "exported")
    finally:
        alive.kill()
        alive.wait()
    assert not left.exists() and busy.is_dir()


@pytest.mark.serial
def test_sigterm_during_an_export_leaves_nothing_behind(run, tmp_path):
    pytest.importorskip("transformers", reason="the check with transformers keeps the export busy long enough")
    out = tmp_path / "exported"
    proc = start("export.py", f"ckpt={run[0].path}", f"out={out}")
    try:
        for _ in range(600):  # the hidden folder appears once the export writes
            if any(p.name.startswith(PREFIX) and not p.name.startswith(PREFIX + "lock") for p in tmp_path.iterdir()):
                break
            if proc.poll() is not None:
                pytest.fail(f"the export ended before it could be interrupted: {proc.stderr.read()}")
            threading.Event().wait(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 128 + signal.SIGTERM
    finally:
        proc.kill()
    assert not out.exists() and not hidden(tmp_path)


def test_exported_files_have_the_modes_the_umask_gives(run, tmp_path):
    mask = os.umask(0o027)
    try:
        export(run, tmp_path / "exported")
    finally:
        os.umask(mask)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "exported").iterdir()}
    assert set(modes.values()) == {0o640}, modes
    assert (tmp_path / "exported").stat().st_mode & 0o777 == 0o750


def _link_to_folder(tmp_path: Path) -> Path:
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    return tmp_path / "link"


def _dangling_link(tmp_path: Path) -> Path:
    os.symlink(tmp_path / "nowhere", tmp_path / "link")
    return tmp_path / "link"


def _below_a_file(tmp_path: Path) -> Path:
    (tmp_path / "a_file").write_text("x")
    return tmp_path / "a_file" / "exported"


FAULTS = {
    "link_to_a_folder": (_link_to_folder, "is a symbolic link"),
    "dangling_link": (_dangling_link, "is a symbolic link"),
    "below_a_file": (_below_a_file, "which is a file, not a folder"),
    "name_too_long": (lambda t: t / ("긴" * 86), "more than the file system allows"),  # 258 bytes in UTF-8
    "a_file": (lambda t: _below_a_file(t).parent, "is a file"),
}


@pytest.mark.parametrize("case", FAULTS)
def test_a_destination_that_cannot_be_a_folder_is_one_line(run, tmp_path, case):
    make, needle = FAULTS[case]
    place = tmp_path / "place"
    place.mkdir()
    out = make(place)
    with pytest.raises(UserError) as e:
        export(run, out)
    one_line(e, needle)
    assert not hidden(place)
    if (place / "real").exists():
        assert not any((place / "real").iterdir())  # nothing written through the link


def test_a_name_at_the_file_system_s_limit_exports(run, tmp_path):
    out = tmp_path / ("a" * os.pathconf(tmp_path, "PC_NAME_MAX"))
    export(run, out)  # the hidden sibling's name is short, whatever this one's length
    assert (out / "kochar.json").is_file() and not hidden(tmp_path)


def test_a_full_disk_is_one_line_and_leaves_nothing(run, tmp_path):
    with small_disk(tmp_path / "disk", "24k") as disk:
        with pytest.raises(UserError) as e:
            export(run, disk / "exported")
        one_line(e, "the disk is full", str(disk / "exported"))
        assert not list(disk.iterdir())


def test_a_read_only_disk_is_one_line(run, tmp_path):
    with small_disk(tmp_path / "disk", read_only=True) as disk:
        with pytest.raises(UserError) as e:
            export(run, disk / "new" / "exported")
        one_line(e, "read-only")


def test_the_cli_says_a_full_disk_in_one_line_exit_2(run, tmp_path):
    with small_disk(tmp_path / "disk", "24k") as disk:
        r = cli("export.py", f"ckpt={run[0].path}", f"out={disk / 'exported'}", "verify=false")
        assert_one_line_error(r, "the disk is full", "exported", code=2)
        assert not list(disk.iterdir())


@pytest.mark.parametrize("damage", [b"[unclosed, 'list", b"\xff\xfe\x00 binary", b"just: a mapping\n"])
def test_a_damaged_record_of_the_run_never_stops_an_export(run, tmp_path, damage):
    hydra = run[0].path.parent / ".hydra"
    hydra.mkdir()
    (hydra / "overrides.yaml").write_bytes(damage)
    export(run, tmp_path / "exported")
    card = (tmp_path / "exported" / "README.md").read_text(encoding="utf-8")
    assert "overrides.yaml could not be read" in card
