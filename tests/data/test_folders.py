"""Corpora that are folders or globs: the same tokens as the joined file, one cache for the set that notices
every change, whole documents held out, and one line for every way a folder can hold nothing usable."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from common.errors import UserError
from data.corpus import load_corpus
from data.corpus_files import corpus_files
from tests.helpers import KOREAN, SHARED_CORPUS, TINY, cli

DOCS = [KOREAN[i * 90 : (i + 1) * 90].strip("\n") + "\n" for i in range(4)]


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "docs"
    d.mkdir()
    for i, text in enumerate(DOCS):
        (d / f"{i:02d}.txt").write_text(text * 3, encoding="utf-8")
    return d


def test_novels_split_into_files_give_the_joined_files_tokens(tmp_path):
    if not SHARED_CORPUS.is_file():
        pytest.skip("../shared/corpora/koconovel_dev.txt is not present")
    text = SHARED_CORPUS.read_bytes().decode("utf-8").replace("\r\n", "\n")
    novels = text.rstrip("\n").split("\n\n")
    assert len(novels) == 42
    d = tmp_path / "novels"
    d.mkdir()
    for i, novel in enumerate(novels):  # CRLF lines inside the novels come back from the shared file's bytes
        (d / f"novel_{i:02d}.txt").write_text(novel + "\n", encoding="utf-8")
    one = load_corpus(SHARED_CORPUS, cache_dir=tmp_path / "c1")
    many = load_corpus(d, cache_dir=tmp_path / "c2")
    assert many.tokenizer.chars == one.tokenizer.chars
    assert np.array_equal(np.asarray(many.tokens), np.asarray(one.tokens))
    assert len(many.doc_starts) == 42 and many.doc_starts[0] == 0


def test_a_folder_reads_like_its_files_joined_by_blank_lines(folder, tmp_path):
    corpus = load_corpus(folder, cache_dir=tmp_path / "cache")
    joined = "\n\n".join(d.rstrip("\n") for d in (t * 3 for t in DOCS)) + "\n"
    assert corpus.tokenizer.decode(corpus.tokens) == joined
    assert corpus.files == ["00.txt", "01.txt", "02.txt", "03.txt"]
    starts = corpus.doc_starts
    assert corpus.tokenizer.decode(corpus.tokens[starts[2] : starts[3]]).startswith(DOCS[2][:10])


def test_adding_removing_or_changing_a_file_rebuilds_the_cache(folder, tmp_path):
    cache = tmp_path / "cache"
    first = load_corpus(folder, cache_dir=cache)
    (folder / "04.txt").write_text("새로 더한 문서.\n", encoding="utf-8")
    added = load_corpus(folder, cache_dir=cache)
    assert len(added.tokens) > len(first.tokens) and len(added.doc_starts) == 5
    (folder / "04.txt").write_text("새로 고친 문서!\n", encoding="utf-8")  # same size, other bytes
    changed = load_corpus(folder, cache_dir=cache)
    assert changed.tokenizer.decode(changed.tokens).endswith("새로 고친 문서!\n")
    (folder / "04.txt").unlink()
    assert np.array_equal(np.asarray(load_corpus(folder, cache_dir=cache).tokens), np.asarray(first.tokens))


def test_val_files_hold_out_whole_documents(folder, tmp_path):
    corpus = load_corpus(folder, cache_dir=tmp_path / "cache")
    train, val = corpus.split(0.1, 1)
    assert corpus.tokenizer.decode(val) == (DOCS[3] * 3).rstrip("\n") + "\n"
    train, val = corpus.split(0.1, ["01.txt"])
    assert corpus.tokenizer.decode(val) == (DOCS[1] * 3).rstrip("\n") + "\n\n"
    assert len(train) + len(val) == len(corpus.tokens)
    for bad, why in (
        (4, "between 1 and 3"),
        (["nope.txt"], "not among"),
        (["00.txt", "01.txt", "02.txt", "03.txt"], "not all"),
    ):
        with pytest.raises(UserError, match=why):
            corpus.split(0.1, bad)


def test_glob_takes_exactly_what_it_matches(folder):
    (folder / "notes.md").write_text("메모\n", encoding="utf-8")
    (folder / "sub").mkdir()
    (folder / "sub" / "deep.txt").write_text("깊은 곳\n", encoding="utf-8")
    assert [f.name for f in corpus_files(folder / "*.txt").files] == ["00.txt", "01.txt", "02.txt", "03.txt"]
    assert [f.name for f in corpus_files(str(folder) + "/**/*.txt").files][-1] == "deep.txt"
    assert "notes.md" in [f.name for f in corpus_files(folder).files]  # a folder: every text file


NOTHING = {
    "empty_folder": (lambda d: d.mkdir(), "holds nothing"),
    "binaries_only": (lambda d: (d.mkdir(), (d / "a.png").write_bytes(b"\x89PNG\0\0")), "none of them"),
    "binary_named_txt": (lambda d: (d.mkdir(), (d / "a.txt").write_bytes(b"\0\1\2\3" * 50)), "a.txt"),
    "glob_matches_nothing": (None, "matches no file"),
    "link_loop": (lambda d: os.symlink(d, d), "link loop"),
    "bad_byte_in_second_file": (
        lambda d: (
            d.mkdir(),
            (d / "a.txt").write_text("가나다\n", encoding="utf-8"),
            (d / "b.txt").write_bytes("라마".encode() + b"\xff\xfe" * 3 + b"\n"),
        ),
        "b.txt",
    ),
}


@pytest.mark.parametrize("case", sorted(NOTHING))
def test_folders_that_hold_nothing_usable_are_one_line(tmp_path, case):
    make, why = NOTHING[case]
    target = tmp_path / "corpus"
    if make is None:
        target = tmp_path / "nowhere" / "*.txt"
    else:
        make(target)
    r = cli(
        "train.py",
        *TINY,
        f"data.path={target}",
        f"hydra.run.dir={tmp_path / 'run'}",
        "train.max_steps=1",
        f"data.cache_dir={tmp_path / 'cache'}",
    )
    assert r.returncode == 2, r.stderr[-1500:]
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error:") and why in r.stderr, r.stderr


def test_a_folder_symlinked_into_itself_is_walked_once(folder):
    os.symlink(folder, folder / "loop")
    assert len(corpus_files(folder).files) == 4


@pytest.mark.slow
def test_train_and_evaluate_a_folder(folder, tmp_path):
    run = tmp_path / "run"
    r = cli(
        "train.py",
        *TINY,
        f"data.path={folder}",
        "data.val_files=1",
        f"hydra.run.dir={run}",
        "train.max_steps=3",
        f"data.cache_dir={tmp_path / 'cache'}",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    r = cli("evaluate.py", f"ckpt={run}", f"data.path={folder}", "device=cpu")
    assert r.returncode == 0, r.stderr[-2000:]
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["chars"] == len("\n\n".join(d.rstrip("\n") for d in (t * 3 for t in DOCS)) + "\n") - 1
