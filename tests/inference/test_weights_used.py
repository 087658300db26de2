"""Every reader says which weights it used, and asking for a set that is not there is one line: the
rule is one for generate.py, evaluate.py, serve.py (the start-up line, the run list, the /api answers), export.py
(the folder's record and card) and train.init_from (train.init_weights). Checkpoints are built directly: an
"averaged" run holding an EMA of 7 updates beside its raw weights, and a "plain" run that kept no average."""

from __future__ import annotations

import json
import signal
import warnings
from pathlib import Path

import pytest
import torch

from inference.checkpoint import Checkpoint, TrainingState, load_checkpoint, save_checkpoint
from model import AttentionLanguageModel
from playground.app import create_app
from playground.config import ServeConfig
from tests.helpers import KOREAN, LineReader, assert_one_line_error, cli, cli_all, start, stderr_lines, train_job
from tokenizer import KoreanCharTokenizer

with warnings.catch_warnings():  # Starlette would rather have httpx2; httpx is what the project installs
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

AVERAGED = "averaged (train.average=ema, 7 updates)"
NO_AVERAGE = "the run kept no average: train.average=none"


def make_run(folder: Path, average: bool) -> Path:
    tok = KoreanCharTokenizer.from_text(KOREAN)
    torch.manual_seed(0)
    m = AttentionLanguageModel(
        vocab_size=tok.vocab_size, context_length=16, embedding_size=16, head_size=16, num_heads=2, num_blocks=1
    )
    raw = m.state_dict()
    averaged = {k: v + 0.01 if v.is_floating_point() else v for k, v in raw.items()} if average else None
    training = TrainingState(7, {}, {}, 3.0, 3.0, 1.0, {}, {}, 1, 7 if average else 0)
    config = {"train": {"average": "ema" if average else "none"}, "data": {"tokenizer": "char"}}
    folder.mkdir(parents=True, exist_ok=True)
    save_checkpoint(Checkpoint(m.config, raw, tok.to_dict(), 1.0, config, training, averaged), folder / "ckpt.pt")
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("weights") / "runs"
    make_run(root / "avg", True)
    make_run(root / "plain", False)
    (root.parent / "text.txt").write_text(KOREAN * 2, encoding="utf-8")
    return root


EVALUATED = {  # (run, weights=): (the JSON's weights, average_updates)
    ("avg", None): ("averaged", 7),
    ("avg", "raw"): ("raw", None),
    ("avg", "averaged"): ("averaged", 7),
    ("plain", None): ("raw", None),
    ("plain", "raw"): ("raw", None),
}


def test_evaluate_names_the_weights_it_scored_in_its_json(runs):
    text = runs.parent / "text.txt"
    cases = list(EVALUATED)
    results = cli_all(
        *[
            (
                "evaluate.py",
                f"ckpt={runs / run}",
                f"data.path={text}",
                "device=cpu",
                "progress=false",
                *([f"weights={w}"] if w else []),
            )
            for run, w in cases
        ]
    )
    scores = {}
    for case, r in zip(cases, results, strict=True):
        assert r.returncode == 0, r.stderr
        record = json.loads(r.stdout)
        assert (record["weights"], record["average_updates"]) == EVALUATED[case], case
        scores[case] = record["loss"]
    assert scores["avg", None] == scores["avg", "averaged"] != scores["avg", "raw"]


def test_weights_averaged_on_a_run_without_an_average_is_one_line_in_every_reader(runs, tmp_path):
    plain, text = runs / "plain", runs.parent / "text.txt"
    line = (
        f"error: weights=averaged: {plain / 'ckpt.pt'} holds no average ({NO_AVERAGE}); drop weights= (or pass "
        "weights=raw) to read its raw weights"
    )
    out = tmp_path / "exported"
    commands = [
        ("generate.py", f"ckpt={plain}", "device=cpu", "max_new_tokens=3", "weights=averaged"),
        ("evaluate.py", f"ckpt={plain}", f"data.path={text}", "device=cpu", "weights=averaged"),
        ("serve.py", f"ckpt={plain}", f"runs_dir={runs}", "device=cpu", "port=0", "weights=averaged"),
        ("export.py", f"ckpt={plain}", f"out={out}", "verify=false", "weights=averaged"),
    ]
    for r in cli_all(*commands):
        assert assert_one_line_error(r) == line
    assert not out.exists()  # nothing written


@pytest.mark.cpu_precision  # a start's output, on either CPU precision path (`make test` runs both)
def test_train_init_weights_follows_the_same_rule_and_names_its_key(runs, tmp_path):
    run = tmp_path / "new"
    r = cli(
        "train.py",
        f"train.init_from={runs / 'plain'}",
        "train.init_weights=averaged",
        "device=cpu",
        f"data.path={runs.parent / 'text.txt'}",
        f"hydra.run.dir={run}",
        f"data.cache_dir={tmp_path / 'cache'}",
    )
    assert assert_one_line_error(r) == (
        f"error: train.init_weights=averaged: {runs / 'plain' / 'ckpt.pt'} holds no average ({NO_AVERAGE}); drop "
        "train.init_weights= (or pass train.init_weights=raw) to read its raw weights"
    )
    assert not run.exists() and not (tmp_path / "cache").exists()
    r = cli("train.py", "train.init_weights=raw", "device=cpu", f"hydra.run.dir={run}")
    assert assert_one_line_error(r) == (
        "error: train.init_weights=raw cannot act in this run: it acts only with train.init_from=<run>, and this run "
        "has train.init_from=null; drop train.init_weights, or set train.init_from=<run>"
    )


@pytest.mark.parametrize("asked,kind", [(None, "averaged"), ("raw", "raw")])
def test_train_init_from_starts_from_the_weights_it_names(runs, tmp_path, asked, kind):
    from training.session import setup

    job = train_job(
        tmp_path,
        f"train.init_from={runs / 'avg'}",
        f"data.path={runs.parent / 'text.txt'}",
        "train.max_steps=1",
        "train.sample_prompts=['봄이']",
        *([f"train.init_weights={asked}"] if asked else []),
    )
    s, _ = setup(job, tmp_path / "run")
    source = load_checkpoint(runs / "avg" / "ckpt.pt")
    start = s.raw_model.state_dict()
    assert all(torch.equal(start[k], v) for k, v in source.weights(kind).items())
    assert s.init_record["weights"] == kind and s.init_record["average_updates"] == (7 if kind == "averaged" else None)
    s.logger.close()


@pytest.mark.parametrize(
    "run,asked,said",
    [("avg", None, AVERAGED), ("avg", "raw", "raw (weights=raw)"), ("plain", None, f"raw ({NO_AVERAGE})")],
)
def test_generate_says_the_weights_in_its_first_line(runs, run, asked, said):
    r = cli(
        "generate.py",
        f"ckpt={runs / run}",
        "device=cpu",
        "prompt=봄이",
        "max_new_tokens=5",
        *([f"weights={asked}"] if asked else []),
    )
    assert r.returncode == 0, r.stderr
    of_average = "; that val loss is the average's" if run == "avg" and asked == "raw" else ""
    assert (
        stderr_lines(r.stderr)[0]
        == f"weights: {said} from {runs / run / 'ckpt.pt'} (step 7, val loss 3.0000{of_average})"
    )
    assert r.stdout.startswith("봄이")  # stdout stays the sample alone


def test_serve_says_the_weights_in_its_first_line(runs):
    proc = start("serve.py", f"runs_dir={runs}", f"ckpt={runs / 'avg'}", "device=cpu", "port=0")
    reader = LineReader(proc)
    try:
        reader.wait_for("kochar-gpt playground")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    assert (
        reader.lines[0].strip()
        == f"run: avg (step 7) on cpu; weights: {AVERAGED} from {runs / 'avg' / 'ckpt.pt'} (step 7, val loss 3.0000)"
    )


def test_the_playground_lists_and_answers_with_the_weights(runs):
    with TestClient(create_app(ServeConfig(runs_dir=str(runs)), torch.device("cpu"))) as c:
        listed = {r["name"]: r for r in c.get("/api/runs").json()}
        assert (listed["avg"]["weights"], listed["avg"]["average_updates"]) == ("averaged", 7)
        assert (listed["plain"]["weights"], listed["plain"]["average_updates"]) == ("raw", None)
        answer = c.post("/api/generate", json={"run": "avg", "prompt": "봄", "max_new_tokens": 3, "stream": False})
        assert answer.status_code == 200 and answer.json()["weights"] == "averaged"
        seen = c.post("/api/attention", json={"run": "plain", "text": "봄이 오면"}).json()
        assert seen["model_weights"] == "raw" and isinstance(seen["weights"], list)  # `weights`: the attention's
    with TestClient(create_app(ServeConfig(runs_dir=str(runs), weights="averaged"), torch.device("cpu"))) as c:
        listed = {r["name"]: r for r in c.get("/api/runs").json()}
        assert listed["avg"]["weights"] == "averaged" and listed["plain"]["weights"] is None
        assert listed["plain"]["error"] == (
            f"weights=averaged: run 'plain' holds no average ({NO_AVERAGE}); drop "
            "weights= (or pass weights=raw) to read its raw weights"
        )
        refused = c.post("/api/generate", json={"run": "plain", "max_new_tokens": 3, "stream": False})
        assert refused.status_code == 400 and refused.json() == {"error": listed["plain"]["error"], "field": "run"}


def _export(runs: Path, out: Path, *args: str):
    pytest.importorskip("safetensors", reason="pip install -r requirements-dev.txt")
    r = cli("export.py", f"ckpt={runs / 'avg'}", f"out={out}", "verify=false", *args)
    assert r.returncode == 0, r.stderr
    return r, json.loads((out / "kochar.json").read_text(encoding="utf-8"))


def test_an_exported_folder_records_its_weights_and_refuses_the_other_set(runs, tmp_path):
    out = tmp_path / "m"
    r, record = _export(runs, out)
    assert r.stdout.strip().endswith(f"; weights: {AVERAGED}")
    assert (record["weights"], record["average_updates"]) == ("averaged", 7)
    assert (
        "- Weights / 가중치: averaged (train.average=ema, 7 updates; the one set this exported folder holds) / "
        "학습 중 평균 낸 가중치, 갱신 7회"
    ) in (out / "README.md").read_text(encoding="utf-8")
    text = runs.parent / "text.txt"
    asked_raw, default = cli_all(
        ("evaluate.py", f"ckpt={out}", f"data.path={text}", "device=cpu", "weights=raw"),
        ("evaluate.py", f"ckpt={out}", f"data.path={text}", "device=cpu"),
    )
    assert assert_one_line_error(asked_raw) == (
        f"error: weights=raw: {out} holds only the averaged weights (an exported folder keeps one set); drop "
        "weights=, or export the run again with weights=raw"
    )
    assert json.loads(default.stdout)["weights"] == "averaged"


def test_an_export_of_the_raw_weights_says_so(runs, tmp_path):
    out = tmp_path / "m"
    _, record = _export(runs, out, "weights=raw")
    assert (record["weights"], record["average_updates"]) == ("raw", None)
    r = cli("generate.py", f"ckpt={out}", "device=cpu", "max_new_tokens=3", "weights=averaged")
    assert assert_one_line_error(r) == (
        f"error: weights=averaged: {out} holds only the raw weights (an exported folder keeps one set); drop "
        "weights=, or export the run again with weights=averaged"
    )


def test_a_folder_exported_before_the_record_said_is_read_as_unknown(runs, tmp_path):
    out = tmp_path / "m"
    _, record = _export(runs, out)
    for key in ("weights", "average_updates"):
        record.pop(key)
    (out / "kochar.json").write_text(json.dumps(record), encoding="utf-8")
    default, asked = cli_all(
        ("generate.py", f"ckpt={out}", "device=cpu", "max_new_tokens=3"),
        ("generate.py", f"ckpt={out}", "device=cpu", "max_new_tokens=3", "weights=averaged"),
    )
    assert default.returncode == 0, default.stderr
    assert stderr_lines(default.stderr)[0] == (
        "weights: not recorded (exported before kochar-gpt recorded which set a folder holds) from "
        f"{out / 'kochar.json'} (exported from {runs / 'avg' / 'ckpt.pt'}: step 7, val loss 3.0000)"
    )
    assert assert_one_line_error(asked) == (
        f"error: weights=averaged: {out} does not record which weights it holds (exported by an older kochar-gpt); "
        "drop weights= to read it as it is, or export the run again"
    )


def test_a_folder_exported_again_keeps_what_its_record_says(runs, tmp_path):
    first, second = tmp_path / "m", tmp_path / "m2"
    _export(runs, first)
    r = cli("export.py", f"ckpt={first}", f"out={second}", "verify=false")
    assert r.returncode == 0, r.stderr
    record = json.loads((second / "kochar.json").read_text(encoding="utf-8"))
    assert (record["weights"], record["average_updates"]) == ("averaged", 7)
    refused = cli("export.py", f"ckpt={first}", f"out={tmp_path / 'm3'}", "verify=false", "weights=raw")
    assert assert_one_line_error(refused).startswith(f"error: weights=raw: {first} holds only the averaged weights")
    assert not (tmp_path / "m3").exists()
