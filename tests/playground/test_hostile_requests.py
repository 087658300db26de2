"""The playground's API against values and folder states nobody planned for: every request is answered by a
JSON error (`error`, `field`) with a 4xx or by a correct 200, never a 500 or bare text, every stream ends
with `done` or `error`, no answer holds NaN, and the server stays healthy after each. One app serves them all.
"""

import json
import math
import os
import warnings

import pytest
import torch

from inference.checkpoint import Checkpoint, save_checkpoint
from model import AttentionLanguageModel
from playground.runs import RunRegistry
from tests.playground.test_api import TEXT, app_for, make_run, parse_sse
from tokenizer import KoreanCharTokenizer, KoreanJamoTokenizer

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

NOT_UTF8 = b"\xc7\xd1\xb1\xdb"  # 한글 in CP949: a folder made on another machine


def _nan_run(folder):
    tok = KoreanCharTokenizer.from_text(TEXT)
    m = AttentionLanguageModel(
        vocab_size=tok.vocab_size, context_length=16, embedding_size=16, head_size=16, num_heads=2, num_blocks=1
    )
    state = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in m.state_dict().items()}
    folder.mkdir(parents=True)
    save_checkpoint(Checkpoint(m.config, state, tok.to_dict()), folder / "ckpt.pt")


def hostile_folders(root):
    """Every state a folder under runs_dir can be in that the run list must survive."""
    weird = os.fsdecode(bytes(root) + b"/" + NOT_UTF8)
    make_run(root / "elsewhere_placeholder", 5)
    os.rename(root / "elsewhere_placeholder", weird)
    (root / "loop").mkdir()
    (root / "loop" / "ckpt.pt").symlink_to(root / "loop" / "ckpt.pt")
    (root / "pingpong").mkdir()
    (root / "pingpong" / "ckpt.pt").symlink_to(root / "pingpong" / "other.pt")
    (root / "pingpong" / "other.pt").symlink_to(root / "pingpong" / "ckpt.pt")
    (root / "dangling").mkdir()
    (root / "dangling" / "ckpt.pt").symlink_to(root / "nowhere" / "ckpt.pt")
    (root / "dir" / "ckpt.pt").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "empty" / "ckpt.pt").write_bytes(b"")
    (root / "garbage").mkdir()
    (root / "garbage" / "ckpt.pt").write_bytes(os.urandom(4096))
    (root / "fifo").mkdir()
    os.mkfifo(root / "fifo" / "ckpt.pt")
    (root / "json").mkdir()
    (root / "json" / "ckpt.pt").write_text(json.dumps({"model": "nope"}))
    _nan_run(root / "nan")
    (root / "name with spaces & 한글").mkdir()
    make_run(root / "name with spaces & 한글" / "inner", 6)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile") / "runs"
    make_run(root / "a", 0)
    make_run(root / "jamo", 2, KoreanJamoTokenizer)
    hostile_folders(root)
    with TestClient(app_for(root), raise_server_exceptions=False) as c:
        yield c, root


def healthy(c) -> None:
    r = c.post("/api/generate", json={"run": "a", "prompt": "옛날", "max_new_tokens": 3, "stream": False})
    assert r.status_code == 200 and r.json()["completion"], r.text


def strict_json(text: str):
    """JSON as the standard has it: NaN and Infinity are not JSON (browsers' JSON.parse refuses them)."""
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in an answer: {text[:200]}"))


def answered(r, allowed=(200, 400, 404, 413, 422)) -> dict | list:
    """The response's JSON, checked: an allowed status, a JSON body, the error shape when it is an error."""
    assert r.status_code in allowed, (r.status_code, r.text[:300])
    body = strict_json(r.text)
    if r.status_code >= 400:
        assert set(body) == {"error", "field"} and body["error"] and "\n" not in body["error"], body
        assert "/tmp" not in body["error"] and "/home" not in body["error"], body  # no server paths
    return body


def check(r) -> None:
    """A JSON answer (see `answered`) or a stream of `char` events ending in `done` or `error`."""
    if r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"):
        events = parse_sse(r.text)
        assert events[-1][0] in ("done", "error") and all(k == "char" for k, _ in events[:-1])
        for line in r.text.split("\n"):  # SSE splits lines at line breaks only (not at U+2028)
            if line.startswith("data: "):
                strict_json(line[len("data: ") :])
        for _, e in events[:-1]:
            assert 0 < e["prob"] <= 1 and math.isfinite(e["prob"])
    else:
        answered(r)


GENERATE = [
    {"run": "a" * 300},
    {"run": "a" * 5000},
    {"run": "a/" * 3000},
    {"run": "\ud800"},
    {"run": "a\ud800"},
    {"run": "\udcc7\udcd1"},
    {"run": "a\x00b"},
    {"run": "/etc"},
    {"run": "//"},
    {"run": "~"},
    {"run": "~root"},
    {"run": "%2e%2e"},
    {"run": ".."},
    {"run": "./a"},
    {"run": "a/"},
    {"run": "a//"},
    {"run": "loop"},
    {"run": "pingpong"},
    {"run": "dangling"},
    {"run": "dir"},
    {"run": "empty"},
    {"run": "garbage"},
    {"run": "fifo"},
    {"run": "json"},
    {"run": "nan"},
    {"run": "한글"},
    {"run": 5},
    {"run": ["a"]},
    {"run": {}},
    {"prompt": "\ud800"},
    {"prompt": "가\udfff"},
    {"prompt": "\x00" * 50},
    {"prompt": "\r\n\t\u2028"},
    {"prompt": "🐯" * 200},
    {"prompt": "ᄀ" * 30},
    {"prompt": "\u0301"},
    {"prompt": "\ufeff\ufffe\uffff"},
    {"prompt": None},
    {"top_p": 1e-320},
    {"top_p": 5e-324},
    {"top_p": 1e-45},
    {"top_p": 1e-300, "top_k": 1},
    {"top_k": 10**30},
    {"top_k": 2**63},
    {"temperature": 1e-320},
    {"temperature": 1e-38},
    {"temperature": 1e308},
    {"temperature": 1e-30, "top_p": 1e-30},
    {"max_new_tokens": 0},
    {"max_new_tokens": 10**40},
    {"seed": 2**64},
    {"seed": 2**63 - 1},
    {"seed": 1.5},
    {"stream": None},
    {"\ud800": 1},
    {"": 1},
]


@pytest.mark.parametrize("body", GENERATE, ids=[json.dumps(b)[:40] for b in GENERATE])
@pytest.mark.parametrize("stream", [False, True])
def test_every_generate_value_is_answered_in_json(hostile, body, stream):
    c, _ = hostile
    payload = {"run": "a", "max_new_tokens": 4, "stream": stream, **body}
    check(c.post("/api/generate", content=json.dumps(payload), headers={"content-type": "application/json"}))
    healthy(c)


def test_a_filter_that_keeps_nothing_falls_back_to_the_most_probable_character(hostile):
    c, _ = hostile
    base = {"run": "a", "prompt": "옛날", "max_new_tokens": 6, "stream": False}
    greedy = c.post("/api/generate", json={**base, "temperature": 0}).json()
    for top_p in (1e-320, 5e-324, 1e-45):
        got = c.post("/api/generate", json={**base, "top_p": top_p}).json()
        assert got["text"] == greedy["text"] and all(e["prob"] == 1.0 for e in got["tokens"])


def test_a_run_of_broken_weights_is_refused_when_it_loads(hostile):
    c, _ = hostile  # weights that are not numbers are refused at load, streamed or not, in one line
    for path, body in (
        ("/api/generate", {"run": "nan", "max_new_tokens": 3}),
        ("/api/generate", {"run": "nan", "max_new_tokens": 3, "stream": False}),
        ("/api/attention", {"run": "nan", "text": "옛날"}),
    ):
        r = c.post(path, json=body)
        assert r.status_code == 400 and answered(r)["field"] == "run" and "not finite" in answered(r)["error"]


ATTENTION = [
    {"text": "\ud800"},
    {"text": ""},
    {"text": None},
    {"text": 1},
    {"text": "가", "position": 10**30},
    {"text": "가", "position": -(10**30)},
    {"text": "가", "position": 1.0},
    {"text": "가", "position": "0"},
    {"text": "🐯"},
    {"text": "가" * 7000},
    {"run": "\ud800", "text": "가"},
    {"run": "loop", "text": "가"},
    {"run": "a" * 5000, "text": "가"},
    {"run": "jamo", "text": "옛날", "position": 5},
    {"run": "jamo", "text": "ᄀ"},
]


@pytest.mark.parametrize("body", ATTENTION, ids=[json.dumps(b)[:40] for b in ATTENTION])
def test_every_attention_value_is_answered_in_json(hostile, body):
    c, _ = hostile
    r = c.post("/api/attention", content=json.dumps({"run": "a", **body}), headers={"content-type": "application/json"})
    answered(r)
    healthy(c)


RAW = [
    b"",
    b"{",
    b"null",
    b"[]",
    b'"x"',
    b"1e999",
    b'{"run": "a", "run": "b"}',
    b'{"prompt": "\\ud800"}',
    b'{"prompt": "\xff\xfe"}',
    b"\xef\xbb\xbf{}",
    b'{"max_new_tokens": 1e400}',
    b'{"top_p": -0.0}',
    b"{" * 10000,
    b"[" * 100000,
]


@pytest.mark.parametrize("content", RAW, ids=[repr(r[:20]) for r in RAW])
@pytest.mark.parametrize("content_type", ["application/json", "text/plain", None])
def test_raw_bodies_are_answered_in_json(hostile, content, content_type):
    c, _ = hostile
    headers = {"content-type": content_type} if content_type else {}
    check(c.post("/api/generate", content=content, headers=headers))
    healthy(c)


def test_other_paths_and_methods_answer_in_the_same_shape(hostile):
    c, _ = hostile
    for method, path in (
        ("GET", "/nope"),
        ("PUT", "/api/runs"),
        ("GET", "/api/generate"),
        ("DELETE", "/api/attention"),
        ("GET", "/static/../serve.py"),
        ("GET", "/static/%00"),
    ):
        answered(c.request(method, path), allowed=(404, 405))
    healthy(c)


def test_the_run_list_skips_what_it_cannot_read_and_logs_it_once(hostile, caplog):
    c, root = hostile
    registry = RunRegistry(root, ttl=0)  # a new one (the app's has logged already); walks on every call
    with caplog.at_level("WARNING", logger="kochar.playground"):
        for _ in range(3):
            registry.list_runs()
    skipped = [r.getMessage() for r in caplog.records]  # this registry's (the app's may log its own below, once)
    names = {r["name"]: r for r in answered(c.get("/api/runs"))}
    assert {"a", "jamo", "name with spaces & 한글/inner", "empty", "garbage", "json", "nan"} <= set(names)
    assert not {"loop", "pingpong", "dangling", "dir", "fifo"} & set(names)
    assert all(names[n]["error"] and "/tmp" not in names[n]["error"] for n in ("empty", "garbage", "json"))
    assert len(skipped) == len(set(skipped)) and any("not UTF-8" in m for m in skipped)
    assert any("loop" in m for m in skipped)
