"""Run names in the playground: one canonical name per run, error messages relative to runs_dir (no server
path), and the walk of runs_dir done off the event loop and reused for a short while."""

import asyncio
import warnings

import pytest

from playground import runs as runs_module
from tests.playground.test_api import app_for, make_run

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    root = tmp_path_factory.mktemp("names") / "runs"
    make_run(root / "a", 0)
    make_run(root / "sweep" / "1", 1)
    (root / "broken").mkdir()
    (root / "broken" / "ckpt.pt").write_bytes(b"not a checkpoint")
    (root / "alias").symlink_to(root / "a")
    with TestClient(app_for(root)) as c:
        yield c, root


@pytest.mark.parametrize(
    "spelling,canonical",
    [
        ("./a", "a"),
        ("a/", "a"),
        ("a//", "a"),
        ("./a/", "a"),
        ("alias", "a"),
        ("sweep//1", "sweep/1"),
        ("./sweep/./1", "sweep/1"),
        ("sweep/1/", "sweep/1"),
    ],
)
def test_a_run_is_reported_under_one_name(named, spelling, canonical):
    c, _ = named
    for body in ({"run": spelling}, {"run": canonical}, {"run": spelling}):
        got = c.post("/api/generate", json={**body, "max_new_tokens": 2, "stream": False}).json()
        assert got["run"] == canonical
    got = c.post("/api/attention", json={"run": spelling, "text": "옛날"}).json()
    assert got["run"] == canonical


@pytest.mark.parametrize(
    "body,status",
    [
        ({"run": "broken"}, 400),
        ({"run": "nope"}, 404),
        ({"run": "../a"}, 404),
        ({"run": "a" * 4000}, 404),
        ({"run": "sweep/2"}, 404),
    ],
)
def test_error_messages_name_runs_relative_to_runs_dir(named, body, status):
    c, root = named
    r = c.post("/api/generate", json={**body, "max_new_tokens": 1})
    assert r.status_code == status and r.json()["field"] == "run"
    message = r.json()["error"]
    assert str(root) not in message and str(root.parent) not in message and len(message) < 400
    listed = {r["name"]: r for r in c.get("/api/runs").json()}
    assert str(root) not in listed["broken"]["error"] and "broken" in listed["broken"]["error"]


def test_no_runs_yet_names_no_path(tmp_path):
    with TestClient(app_for(tmp_path / "empty")) as c:
        r = c.post("/api/generate", json={})
    assert r.status_code == 404 and str(tmp_path) not in r.json()["error"]


def test_discovery_runs_off_the_event_loop_and_is_reused_briefly(tmp_path, monkeypatch):
    make_run(tmp_path / "runs" / "a", 0)
    walks = []
    real_walk = runs_module.walk_checkpoints

    def walk(*args):
        try:
            asyncio.get_running_loop()
            walks.append("on the event loop")
        except RuntimeError:
            walks.append("in a worker thread")
        return real_walk(*args)

    monkeypatch.setattr(runs_module, "walk_checkpoints", walk)
    app = app_for(tmp_path / "runs")
    with TestClient(app) as c:
        for _ in range(3):
            assert c.post("/api/generate", json={"max_new_tokens": 1, "stream": False}).json()["run"] == "a"
            assert [r["name"] for r in c.get("/api/runs").json()] == ["a"]
        assert walks == ["in a worker thread"]  # reused within its lifetime
        make_run(tmp_path / "runs" / "b", 1)
        app.state.playground.registry.ttl = 0  # the lifetime has passed: the next request walks again
        assert c.post("/api/generate", json={"max_new_tokens": 1, "stream": False}).json()["run"] == "b"
    assert set(walks) == {"in a worker thread"} and len(walks) >= 2
