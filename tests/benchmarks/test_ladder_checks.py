"""The ladder checks everything before its first run (benchmarks/ladder_checks.py): every variant's
overrides against train.py's schema, budgets and the held-out fraction as the single-run scripts check them, one
budget per campaign, each corpus as train.py reads it, and the rows already in --out; a run that fails makes the
exit non-zero. Each refusal is one line, exit 2, and nothing written (no --out)."""

from __future__ import annotations

import json

import pytest

from benchmarks.runs import corpus_fingerprint
from tests.helpers import KOREAN, assert_one_line_error, cli, cli_all


@pytest.fixture
def corpus(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text("\n".join([KOREAN] * 4), encoding="utf-8")
    return p


REFUSED = {  # extra arguments: the one line
    (
        "--variant",
        "modern+x=modern:train.nope=1",
    ): "error: --variant modern+x cannot run: unknown config key train.nope; check its spelling (--help lists every "
    "key); nothing was run",
    (
        "--variant",
        "modern+x=modern:train.lr=abc",
    ): "error: --variant modern+x cannot run: train.lr=abc is invalid: it must be a number; nothing was run",
    (
        "--variant",
        "lecture+dip=lecture:train.muon_weight_decay_schedule=dip",
    ): "error: --variant lecture+dip cannot run: train.muon_weight_decay_schedule=dip cannot act in this run: it acts "
    "only with train.optimizer=muon, and this run has train.optimizer=adamw; drop "
    "train.muon_weight_decay_schedule, or set train.optimizer=muon; nothing was run",
    (
        "--set",
        "model.num_heads=3",
    ): "error: the rung lecture with --set 'model.num_heads=3' cannot run: model.head_size=128 is not divisible by "
    "model.num_heads=3; pick a head_size that is a multiple of num_heads; nothing was run",
    ("--seconds", "inf"): "error: --seconds=inf is invalid: it must be a finite number > 0",
    ("--seconds", "nan"): "error: --seconds=nan is invalid: it must be a finite number > 0",
    ("--steps", "0"): "error: --steps=0 is invalid: it must be a positive integer",
    ("--heldout", "1.5"): "error: --heldout=1.5 is invalid: it must be a finite number in (0, 1)",
    ("--heldout", "0"): "error: --heldout=0 is invalid: it must be a finite number in (0, 1)",
    (
        "--seconds",
        "60",
        "--steps",
        "10",
    ): "error: --seconds 60 and --steps 10 are two budgets; give one (every run of a campaign gets the same)",
    (
        "--set",
        "train.max_steps=5",
    ): "error: --set 'train.max_steps=5' sets train.max_steps, a second budget beside the campaign's (--seconds or "
    "--steps); give the budget once, with --seconds or --steps",
    (
        "--variant",
        "modern+long=modern:train.max_seconds=900",
    ): "error: --variant modern+long sets train.max_seconds, a second budget beside the campaign's",
    ("--set", "seed=3"): "error: --set 'seed=3' sets seed, which the ladder sets for each run",
}


def _ladder(corpus, out, *extra: str) -> tuple[str, ...]:
    return (
        "-m",
        "benchmarks.ladder",
        "--corpus",
        f"c={corpus}",
        "--rungs",
        "lecture",
        "--seeds",
        "1",
        "--out",
        str(out),
        *extra,
    )


def test_every_mistake_is_one_line_before_the_first_run(corpus, tmp_path):
    cases = list(REFUSED)
    results = cli_all(*[_ladder(corpus, tmp_path / f"out{i}", *extra) for i, extra in enumerate(cases)])
    for i, (extra, r) in enumerate(zip(cases, results, strict=True)):
        line = assert_one_line_error(r)
        assert line.startswith(REFUSED[extra]), (extra, line)
        assert not (tmp_path / f"out{i}").exists(), extra


def test_two_corpora_under_one_name_and_other_campaigns_fractions_are_refused(corpus, tmp_path):
    twice, finetune, hangul = cli_all(
        (*_ladder(corpus, tmp_path / "out"), "--corpus", f"c={corpus}"),
        ("-m", "benchmarks.finetune", "--source-run", str(tmp_path), "--target", str(corpus), "--heldout", "2"),
        ("-m", "benchmarks.hangul_compare", "--corpus", f"c={corpus}", "--seconds", "inf"),
    )
    assert assert_one_line_error(twice) == "error: --corpus: the name c is given 2 times; give each corpus its own"
    assert assert_one_line_error(finetune) == "error: --heldout=2 is invalid: it must be a finite number in (0, 1)"
    assert assert_one_line_error(hangul) == "error: --seconds=inf is invalid: it must be a finite number > 0"
    assert not (tmp_path / "out").exists()


def test_a_corpus_train_py_refuses_is_refused_the_same_way(tmp_path):
    cut = tmp_path / "cut.txt"
    cut.write_bytes(("\n".join([KOREAN] * 4)).encode("utf-8") + "봄".encode()[:2])  # cut mid-character
    r = cli(*_ladder(cut, tmp_path / "out"))
    line = assert_one_line_error(r, str(cut))
    assert "UTF-8" in line and "Traceback" not in r.stderr and "failed in" not in line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "row,needle",
    [
        (
            {"heldout": 0.1},
            "measured with --heldout 0.1 on a text of fingerprint {print}; this campaign asks --heldout "
            "0.05 of a text of fingerprint {print}",
        ),
        ({"corpus_sha256": "0123456789ab"}, "on a text of fingerprint 0123456789ab; this campaign asks"),
        ({"heldout": None}, "that do not record their held-out fraction and corpus fingerprint"),
    ],
)
def test_a_continued_campaign_on_another_split_is_refused(corpus, tmp_path, row, needle):
    out = tmp_path / "out"
    out.mkdir()
    fingerprint = corpus_fingerprint(corpus)
    old = {
        "corpus": "c",
        "rung": "lecture",
        "seed": 1337,
        "budget": "300 s",
        "set": "",
        "heldout": 0.05,
        "corpus_sha256": fingerprint,
        "heldout_bpc": 4.0,
        "steps": 10,
        **row,
    }
    (out / "results.jsonl").write_text(json.dumps({k: v for k, v in old.items() if v is not None}) + "\n")
    r = cli(*_ladder(corpus, out))
    assert_one_line_error(r, f"--out {out} holds results of the corpus 'c'", needle.format(print=fingerprint))
    assert sorted(p.name for p in out.iterdir()) == ["results.jsonl"]  # no split, no run


def test_a_run_that_fails_makes_the_exit_non_zero(tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("봄이 왔다.\n여름이다.\n", encoding="utf-8")  # too short for model=tiny's context
    out = tmp_path / "out"
    r = cli(*_ladder(short, out, "--steps", "1", "--heldout", "0.5", "--set", "model=tiny"), timeout=600)
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert (
        last.startswith(
            "error: 1 run(s) failed, so the table lacks them: the first, lecture seed 1337 on c: the corpus "
        )
        and "is too short" in last
    )
    row = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert row["error"].startswith("error: the corpus") and row["heldout"] == 0.5 and row["budget"] == "1 steps"
    assert row["corpus_sha256"] == corpus_fingerprint(short)
