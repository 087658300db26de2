"""Corpora that are not plain files: links that lead back up the tree (each real file read once, no hang), pipes,
devices and process substitutions (one line, no wait), names that are not UTF-8 (shown with U+FFFD, the run ends
normally), and files that vanish or change after the scan (one line naming them)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from common.errors import UserError
from data.corpus_files import corpus_files
from tests.helpers import KOREAN, ROOT, TINY, _env, assert_one_line_error, cli

DOCS = [KOREAN[i * 90 : (i + 1) * 90] for i in range(3)]


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "docs"
    (d / "sub").mkdir(parents=True)
    for i, text in enumerate(DOCS):
        (d / f"{i}.txt").write_text(text, encoding="utf-8")
    (d / "sub" / "deep.txt").write_text("깊은 곳\n", encoding="utf-8")
    return d


def _names(files, home) -> list[str]:
    return [f.relative_to(home).as_posix() for f in files]


def test_a_link_back_to_the_parent_reads_each_file_once(folder):
    os.symlink(folder, folder / "sub" / "up")
    os.symlink(folder / "0.txt", folder / "sub" / "same.txt")  # a second name for one file
    expected = ["0.txt", "1.txt", "2.txt", "sub/deep.txt"]
    assert _names(corpus_files(f"{folder}/**/*.txt").files, folder) == expected
    assert _names(corpus_files(folder).files, folder) == expected
    assert _names(corpus_files(f"{folder}/*/*.txt").files, folder) == ["sub/deep.txt", "sub/same.txt"]


def test_links_laid_out_to_explode_a_glob_do_not_hang_it(folder):
    for name in ("up", "up2", "up3"):
        os.symlink(folder, folder / "sub" / name)
    code = (
        "import sys; from data.corpus_files import corpus_files; "
        "print(len(corpus_files(sys.argv[1] + '/**/*.txt').files))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(folder)], cwd=ROOT, capture_output=True, text=True, timeout=60, env=_env(None)
    )
    assert r.returncode == 0 and r.stdout.strip() == "4", r.stderr[-1000:]


def _fifo(tmp_path):
    os.mkfifo(tmp_path / "pipe.txt")
    return tmp_path / "pipe.txt", "a named pipe"


def _link_to_fifo(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    os.symlink(tmp_path / "pipe", tmp_path / "link.txt")
    return tmp_path / "link.txt", "a named pipe"


def _socket(tmp_path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(tmp_path / "s.txt"))
    return tmp_path / "s.txt", "a socket"


STREAMS = {
    "fifo": _fifo,
    "link_to_fifo": _link_to_fifo,
    "socket": _socket,
    "device": lambda t: (os.devnull, "a character device"),
}


@pytest.mark.parametrize("case", STREAMS)
def test_a_corpus_that_is_not_a_regular_file_is_one_line_without_waiting(tmp_path, case):
    path, kind = STREAMS[case](tmp_path)
    code = (
        "import sys; from common.errors import UserError; from data.corpus import load_corpus\n"
        "try:\n    load_corpus(sys.argv[1], cache_dir=sys.argv[2])\n"
        "except UserError as e:\n    print(e)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(path), str(tmp_path / "cache")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(None),
    )
    assert f"is {kind}" in r.stdout and "not a regular file" in r.stdout, r.stdout + r.stderr[-1000:]


@pytest.mark.cpu_precision  # a start's output, on either CPU precision path (`make test` runs both)
def test_a_process_substitution_is_one_line(tmp_path):
    command = (
        f"{sys.executable} train.py {' '.join(TINY)} train.max_steps=1 hydra.run.dir={tmp_path / 'run'} "
        f"data.path=<(printf '봄이 오면 강가에 벚꽃이 핀다.\\n%.0s' $(seq 80))"
    )
    r = subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=120, env=_env(None))
    assert_one_line_error(r, "process substitution", "not a regular file")


def test_a_file_removed_after_the_scan_is_one_line(folder):
    source = corpus_files(folder)
    (folder / "1.txt").unlink()
    with pytest.raises(UserError, match=r"1\.txt was removed after data.path was scanned"):
        source.digest()
    with pytest.raises(UserError, match=r"1\.txt was removed"):
        list(source.chunks())


def test_a_file_that_changes_after_it_was_hashed_is_one_line(folder):
    source = corpus_files(folder)
    source.digest()  # the token cache's key: these bytes, and no others, may be tokenised under it
    (folder / "1.txt").write_text("다른 내용으로 바뀐 문서입니다.\n" * 5, encoding="utf-8")
    with pytest.raises(UserError, match=r"1\.txt changed while it was being read"):
        list(source.chunks())


def test_names_that_are_not_utf8_reach_tensorboard_as_replacement_characters(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from training.reporting.tensorboard import RunLogger, flatten_hparams

    name = os.fsdecode(b"/corpora/\xff\xfe novels")
    flat = flatten_hparams({"data": {"path": name, "val_files": [os.fsdecode(b"a\xff.txt")]}})
    assert flat == {"data.path": "/corpora/\ufffd\ufffd novels", "data.val_files": '["a\ufffd.txt"]'}
    logger = RunLogger(tmp_path)
    assert isinstance(logger.writer, SummaryWriter)
    logger.hparams({"data": {"path": name}}, {"hparam/val_loss": 1.0}, 1)  # raised UnicodeEncodeError before
    logger.close()


@pytest.mark.slow
def test_a_folder_whose_name_is_not_utf8_trains_evaluates_and_exports(tmp_path):
    folder = os.fsencode(tmp_path) + b"/\xff\xfe docs"
    os.mkdir(folder)
    with open(folder + b"/a\xff.txt", "w", encoding="utf-8") as f:
        f.write(KOREAN * 8)
    path, run = os.fsdecode(folder), tmp_path / "run"
    r = cli("train.py", *TINY, f"data.path={path}", "train.max_steps=3", f"hydra.run.dir={run}")
    assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith("run: "), r.stderr[-2000:]
    r = cli("evaluate.py", f"ckpt={run}", f"data.path={path}", "device=cpu", "progress=false")
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["data"] == f"{tmp_path}/\ufffd\ufffd docs"
    pytest.importorskip("safetensors")
    r = cli("export.py", f"ckpt={run}", f"out={tmp_path / 'exported'}", "verify=false")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "\ufffd\ufffd docs" in (tmp_path / "exported" / "README.md").read_text(encoding="utf-8")
