"""export.py end to end: a trained run exported, then generate.py, evaluate.py and the playground read the
folder as `ckpt=` and give what the run gives; mistakes are one line."""

from __future__ import annotations

import json

import pytest

from tests.helpers import TINY, cli

pytest.importorskip("transformers", reason="pip install -r requirements-dev.txt")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run and its export (trained once for the module)."""
    root = tmp_path_factory.mktemp("export")
    corpus = root / "corpus.txt"
    from tests.helpers import KOREAN

    corpus.write_text(KOREAN * 8, encoding="utf-8")
    run = root / "run"
    r = cli("train.py", *TINY, f"data.path={corpus}", "train.max_steps=30", f"hydra.run.dir={run}")
    assert r.returncode == 0, r.stderr[-2000:]
    out = root / "exported"
    r = cli("export.py", f"ckpt={run}", f"out={out}")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "stock transformers, gpt2" in r.stdout
    return run, out, corpus


def test_generate_and_evaluate_give_the_run_s_text_and_score(trained):
    run, out, corpus = trained
    args = ("prompt=봄이", "max_new_tokens=60", "seed=11")
    a, b = cli("generate.py", f"ckpt={run}", *args), cli("generate.py", f"ckpt={out}", *args)
    assert a.returncode == 0 and b.returncode == 0, b.stderr
    assert a.stdout == b.stdout and a.stdout.strip()
    ea = json.loads(cli("evaluate.py", f"ckpt={run}", f"data.path={corpus}", "progress=false").stdout)
    eb = json.loads(cli("evaluate.py", f"ckpt={out}", f"data.path={corpus}", "progress=false").stdout)
    assert ea["bpc"] == pytest.approx(eb["bpc"], abs=1e-6) and ea["tokens"] == eb["tokens"]


def test_the_playground_serves_the_folder(trained, tmp_path):
    from fastapi.testclient import TestClient

    from playground.app import create_app
    from playground.config import ServeConfig

    run, out, _ = trained
    body = {"prompt": "봄이", "max_new_tokens": 30, "seed": 3, "stream": False}
    with TestClient(create_app(ServeConfig(runs_dir=str(tmp_path), ckpt=str(out), device="cpu"))) as c:
        from_folder = c.post("/api/generate", json=body).json()
        listed = c.get("/api/runs").json()
    with TestClient(create_app(ServeConfig(runs_dir=str(run.parent), ckpt=str(run), device="cpu"))) as c:
        from_run = c.post("/api/generate", json=body).json()
    assert from_folder["text"] == from_run["text"]
    assert any(r.get("default") for r in (listed["runs"] if isinstance(listed, dict) else listed))


def test_the_model_card_records_the_commands(trained):
    _, out, corpus = trained
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "python train.py" in card and f"data.path={corpus}" in card and "python export.py ckpt=" in card


@pytest.mark.parametrize(
    "args,message",
    [
        ((), "pass the folder to write"),
        (("ckpt=/nonexistent/run", "out=/tmp/x"), "not found"),
    ],
)
def test_mistakes_are_one_line(args, message):
    r = cli("export.py", *args)
    assert r.returncode == 2 and "Traceback" not in r.stderr and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_a_folder_with_files_is_not_overwritten_by_accident(trained, tmp_path):
    run, _, _ = trained
    (tmp_path / "keep.txt").write_text("mine")
    r = cli("export.py", f"ckpt={run}", f"out={tmp_path}")
    assert r.returncode == 2 and "not empty" in r.stderr and (tmp_path / "keep.txt").read_text() == "mine"


HANGUL_AWARE = ("data.tokenizer=hangul", "model.embedding=jamo", "model.head=jamo", "recipe=modern")


@pytest.mark.parametrize("settings", [HANGUL_AWARE, ("data.tokenizer=jamo",)])
def test_other_tokenizers_and_layouts_round_trip_through_the_scripts(tmp_path, corpus, settings):
    run, out = tmp_path / "run", tmp_path / "exported"
    r = cli(
        "train.py",
        *TINY,
        f"data.path={corpus}",
        "train.max_steps=10",
        f"data.cache_dir={tmp_path / 'c'}",
        *settings,
        f"hydra.run.dir={run}",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    r = cli("export.py", f"ckpt={run}", f"out={out}")
    assert r.returncode == 0, r.stderr[-2000:]
    remote = "recipe=modern" in settings or "data.tokenizer=jamo" in settings
    assert ("trust_remote_code=True" in r.stdout) == remote, r.stdout
    args = ("prompt=봄이", "max_new_tokens=40", "seed=5")
    a, b = cli("generate.py", f"ckpt={run}", *args), cli("generate.py", f"ckpt={out}", *args)
    assert a.returncode == 0 and b.returncode == 0, b.stderr[-2000:]
    assert a.stdout == b.stdout and a.stdout.strip()
