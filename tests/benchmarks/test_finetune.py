"""benchmarks/finetune.py and benchmarks/corpus_start.py: their tables, their refusals, and a folder that
loads to exactly the ids of the same text in one file."""

from __future__ import annotations

import json

import pytest

from benchmarks.corpus_start import measure
from benchmarks.finetune import table
from tests.helpers import KOREAN, cli


def test_the_table_gives_the_gain_of_fine_tuning_over_seeds():
    results = [
        {"side": "finetune", "seed": 1, "steps": 10, "heldout_bpc": 4.0},
        {"side": "scratch", "seed": 1, "steps": 10, "heldout_bpc": 5.0},
        {"side": "finetune", "seed": 2, "steps": 12, "heldout_bpc": 4.2},
        {"side": "scratch", "seed": 2, "steps": 12, "heldout_bpc": 5.4},
    ]
    text = table(results)
    assert "| finetune | 2 | 4.100 | 11 |" in text and "| scratch | 2 | 5.200 | 11 |" in text
    assert "fine-tuning gains 1.100 bits per character" in text


def test_a_failed_side_is_left_out_of_the_means():
    text = table(
        [
            {"side": "finetune", "seed": 1, "error": "boom"},
            {"side": "scratch", "seed": 1, "steps": 3, "heldout_bpc": 5.0},
        ]
    )
    assert "| finetune | 0 | — | 0 |" in text and "gains" not in text


def test_finetune_refuses_missing_inputs_in_one_line(tmp_path):
    target = tmp_path / "t.txt"
    target.write_text(KOREAN, encoding="utf-8")
    for args in (
        ["--target", str(tmp_path / "nope.txt"), "--source-run", str(tmp_path)],
        ["--target", str(target)],
        ["--target", str(target), "--source-run", str(tmp_path), "--seconds", "0"],
    ):
        r = cli("-m", "benchmarks.finetune", *args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_a_folder_of_many_files_loads_to_the_ids_of_the_joined_file(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text(KOREAN * 6, encoding="utf-8")
    result = measure(corpus, 12, tmp_path / "out", repeat=1)
    assert result["same_ids"] and result["files"] == 12
    assert json.dumps(result)  # plain JSON values only


def test_the_hangul_comparison_groups_characters_by_how_often_training_saw_them():
    import math
    from collections import Counter

    from benchmarks.hangul_compare import breakdown

    r = breakdown([math.nan, 1.0, 2.0, 4.0], "가나xy", Counter({"가": 5, "x": 2, "y": 9}))
    ln2 = math.log(2)
    assert r["chars_all"] == 3 and r["bpc_all"] == pytest.approx(7 / 3 / ln2)  # the first has no context
    assert r["bpc_unseen"] == pytest.approx(1 / ln2) and r["chars_unseen_syllables"] == 1  # 나
    assert r["bpc_rare"] == pytest.approx(2 / ln2) and r["bpc_seen"] == pytest.approx(3 / ln2)
