"""Every benchmark that takes arguments refuses a bad path or a bad number in one `error:` line with exit code 2 and
no traceback, in the same words (benchmarks/options.py's checks), before anything slow runs."""

from __future__ import annotations

import pytest

from tests.helpers import assert_one_line_error, cli, cli_all


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bench_args")
    text = folder / "text.txt"
    text.write_text("봄이 오면 강가에 벚꽃이 핀다.\n" * 4, encoding="utf-8")
    (folder / "nanoGPT").mkdir()
    (folder / "nanoGPT" / "model.py").write_text("", encoding="utf-8")  # what the check looks for, never imported
    return {
        "text": str(text),
        "missing": str(folder / "missing"),
        "folder": str(folder),
        "file_out": str(text),
        "nanogpt": str(folder / "nanoGPT"),
    }


MISSING, FOLDER, TEXT, FILE_OUT = "{missing}", "{folder}", "{text}", "{file_out}"
# (command, arguments, what the line says); a path in braces is the fixture's
CASES = [
    (["-m", "benchmarks.step_ops"], ["--nanogpt", MISSING], "--nanogpt {missing}: no model.py there"),
    (["-m", "benchmarks.cpu_check"], ["--corpus", MISSING], "--corpus {missing}: not found"),
    (["-m", "benchmarks.cpu_check"], ["--seconds", "0"], "--seconds=0 is invalid: it must be a finite number > 0"),
    (["-m", "benchmarks.gpu_check"], ["--nanogpt", TEXT], "--nanogpt {text}: no model.py there"),
    (["-m", "benchmarks.gpu_check"], ["--seconds", "nan"], "--seconds=nan is invalid: it must be a finite number > 0"),
    (["-m", "benchmarks.gpu_check"], ["--rounds", "0"], "--rounds=0 is invalid: it must be a positive integer"),
    (["-m", "benchmarks.time_budget"], ["--corpus", MISSING, "--run", "a="], "--corpus {missing}: not found"),
    (
        ["-m", "benchmarks.time_budget"],
        ["--corpus", TEXT, "--run", "a=", "--threads", "0"],
        "--threads=0 is invalid: it must be a positive integer",
    ),
    (
        ["-m", "benchmarks.time_budget"],
        ["--corpus", TEXT, "--run", "a=", "--out", FILE_OUT],
        "--out {file_out}: {file_out} is a file, not a folder",
    ),
    (
        ["benchmarks/time_budget.py"],
        ["--corpus", TEXT, "--run", "a=", "--seconds", "inf"],
        "--seconds=inf is invalid: it must be a finite number > 0",
    ),
    (["-m", "benchmarks.corpus_start"], ["--corpus", FOLDER], "--corpus {folder}: a directory, not a file"),
    (
        ["-m", "benchmarks.corpus_start"],
        ["--corpus", TEXT, "--files", "1"],
        "--files=1 is invalid: it must be an integer >= 2",
    ),
    (
        ["-m", "benchmarks.corpus_start"],
        ["--corpus", TEXT, "--out", FILE_OUT + "/sub"],
        "--out {file_out}/sub: {file_out} is a file, not a folder",
    ),
    (
        ["-m", "benchmarks.dropout_speed"],
        ["--dropout", "nan"],
        "--dropout=nan is invalid: it must be a finite number in (0, 1)",
    ),
    (["-m", "benchmarks.dropout_speed"], ["--batch", "-2"], "--batch=-2 is invalid: it must be a positive integer"),
    (["-m", "benchmarks.finetune"], ["--target", MISSING, "--source", TEXT], "--target {missing}: not found"),
    (
        ["-m", "benchmarks.finetune"],
        ["--target", TEXT, "--source-run", MISSING],
        "--source-run {missing}: no such run folder or checkpoint",
    ),
    (
        ["-m", "benchmarks.finetune"],
        ["--target", TEXT, "--source", TEXT, "--seeds", "0"],
        "--seeds=0 is invalid: it must be a positive integer",
    ),
    (["-m", "benchmarks.hangul_compare"], ["--corpus", "c=" + MISSING], "--corpus 'c={missing}': give NAME=PATH"),
    (
        ["-m", "benchmarks.hangul_compare"],
        ["--corpus", "c=" + TEXT, "--seeds", "1,x"],
        "--seeds=1,x is invalid: give comma-separated integers >= 0",
    ),
    (
        ["-m", "benchmarks.hangul_stages"],
        [MISSING, "--text", TEXT, "--train", TEXT],
        "RUN {missing}: no such run folder or checkpoint",
    ),
    (
        ["-m", "benchmarks.hangul_stages"],
        [FOLDER, "--text", TEXT, "--train", TEXT, "--chars", "0"],
        "--chars=0 is invalid: it must be a positive integer",
    ),
    (
        ["-m", "benchmarks.ladder"],
        ["--corpus", "c=" + TEXT, "--nanogpt", MISSING],
        "--nanogpt {missing}: no model.py there",
    ),
    (
        ["-m", "benchmarks.ladder"],
        ["--corpus", "c=" + TEXT, "--seeds", "-1"],
        "--seeds=-1 is invalid: it must be a positive integer",
    ),
    (["-m", "benchmarks.lever_speed"], ["--corpus", MISSING], "--corpus {missing}: not found"),
    (["-m", "benchmarks.lever_speed"], ["--steps", "0"], "--steps=0 is invalid: it must be a positive integer"),
    (
        ["-m", "benchmarks.nanogpt_peer"],
        ["--nanogpt", FOLDER, "--corpus", TEXT, "--heldout", TEXT],
        "--nanogpt {folder}: no model.py there",
    ),
    (
        ["benchmarks/nanogpt_peer.py"],
        ["--nanogpt", "{nanogpt}", "--corpus", TEXT, "--heldout", TEXT, "--steps", "0"],
        "--steps=0 is invalid: it must be a positive integer",
    ),
    (["-m", "benchmarks.reader_start"], ["--run", MISSING], "--run {missing}: no such run folder or checkpoint"),
    (["-m", "benchmarks.reader_start"], ["--repeat", "0"], "--repeat=0 is invalid: it must be a positive integer"),
    (
        ["-m", "benchmarks.row_scores"],
        ["--held", "1500,0"],
        "--held=1500,0 is invalid: give comma-separated integers >= 1",
    ),
    (["-m", "benchmarks.row_scores"], ["--reps", "nan"], "--reps=nan is invalid: it must be a positive integer"),
    (
        ["benchmarks/serve_stress.py"],
        ["--connections", "0"],
        "--connections=0 is invalid: it must be a positive integer",
    ),
    (["benchmarks/serve_stress.py"], ["--set", "nokey"], "--set 'nokey': give a serve.py setting as key=value"),
    (["bench.py"], ["--corpus", MISSING], "--corpus {missing}: not found"),
    (["bench.py"], ["--rounds", "0"], "--rounds=0 is invalid: it must be a positive integer"),
]


def test_every_benchmark_refuses_a_bad_path_or_number_in_one_line(paths):
    commands = [(*command, *(a.format(**paths) for a in args)) for command, args, _ in CASES]
    wrong = []
    for (command, args, needle), r in zip(CASES, cli_all(*commands), strict=True):
        try:
            assert_one_line_error(r, needle.format(**paths))
        except AssertionError as e:
            wrong.append(f"{' '.join(command + args)}: {e}")
    assert not wrong, "\n\n".join(wrong)


def test_every_benchmark_with_arguments_is_checked_here():
    """A new `python -m benchmarks.X` that takes arguments gets a case above."""
    from tests.helpers import ROOT

    checked = {c[0][-1].removeprefix("benchmarks.").removeprefix("benchmarks/").removesuffix(".py") for c in CASES}
    parsing = {p.stem for p in (ROOT / "benchmarks").glob("*.py") if "add_argument(" in p.read_text(encoding="utf-8")}
    assert parsing - {"options"} <= checked


def test_a_spaced_number_is_shown_as_typed(paths):
    r = cli("-m", "benchmarks.corpus_start", "--corpus", paths["text"], "--repeat", "3 ")
    assert_one_line_error(r, "--repeat='3 ' is invalid: the spaces around it are part of the value; write --repeat=3")
