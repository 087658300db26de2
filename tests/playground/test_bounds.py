"""The playground's bounds (configs/serve.yaml): request body size, time to send a request, connections,
generations in progress, and the Host check on every bind address. The body and slot limits go through the
ASGI app directly; what needs connections runs a real uvicorn on the loopback, with short timeouts."""

import asyncio
import json
import socket
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn

from playground.app import create_app
from playground.config import ServeConfig
from playground.guard import allowed_host_names, server_config
from tests.playground.test_api import CPU, Samples, app_for, make_run

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

FAST = {"header_timeout_s": 0.6, "body_timeout_s": 0.6, "keep_alive_s": 0.6}


def two_runs(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bounds") / "runs"
    make_run(root / "a", 0)
    make_run(root / "b", 1)
    return root


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    return two_runs(tmp_path_factory)


@contextmanager
def real_server(root, host="127.0.0.1", names=None, **cfg):
    """A real uvicorn serving the app as serve.py does, on `host` and a free port; yields (app, port)."""
    app = create_app(ServeConfig(runs_dir=str(root), **cfg), CPU, allowed_hosts=names)
    conf = app.state.playground.cfg
    config = server_config(app, conf.header_timeout_s, conf.keep_alive_s, conf.max_connections)
    config.host, config.port = host, 0
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield app, server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)


def raw(port, data: bytes, host="127.0.0.1", family=socket.AF_INET) -> socket.socket:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect((host, port))
    if data:
        s.sendall(data)
    return s


def read_all(s: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a timeout here fails the test)."""
    chunks = []
    while chunk := s.recv(65536):
        chunks.append(chunk)
    s.close()
    return b"".join(chunks)


def json_of(response: bytes) -> tuple[int, dict]:
    head, _, body = response.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


# -- request bodies ------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1025, 10_000, 300_000_000, 10**30])
def test_a_declared_body_over_the_limit_is_refused_before_it_is_read(runs_root, size):
    app = app_for(runs_root, max_body_bytes=1024)
    sent = []

    async def receive():
        sent.append("read")
        return {"type": "http.request", "body": b"x" * 100, "more_body": True}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/generate",
        "headers": [(b"content-length", str(size).encode()), (b"content-type", b"application/json")],
        "query_string": b"",
    }
    asyncio.run(app(scope, receive, send))
    assert "read" not in sent and sent[0]["status"] == 413
    assert set(json.loads(sent[1]["body"])) == {"error", "field"}


@pytest.mark.parametrize("chunks", [[b"{" + b" " * 2000 + b"}"], [b" " * 600] * 3, [b" " * 100] * 100])
def test_a_chunked_body_over_the_limit_is_refused(runs_root, chunks):
    async def main():
        transport = httpx.ASGITransport(app=app_for(runs_root, max_body_bytes=1024))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:

            async def body():
                for chunk in chunks:
                    yield chunk

            return await c.post("/api/generate", content=body(), headers={"content-type": "application/json"})

    r = asyncio.run(main())
    assert r.status_code == 413 and r.json()["field"] is None and "max_body_bytes" in r.json()["error"]


def test_bodies_within_the_limit_are_served(runs_root):
    with TestClient(app_for(runs_root, max_body_bytes=300)) as c:
        r = c.post("/api/generate", json={"run": "a", "max_new_tokens": 2, "stream": False, "prompt": "옛" * 20})
        assert r.status_code == 200
        assert c.post("/api/generate", json={"run": "a", "prompt": "옛" * 200}).status_code == 413


def test_a_body_that_never_ends_is_refused_in_time_over_a_socket(runs_root):
    with real_server(runs_root, **FAST) as (_, port):
        started = time.monotonic()
        s = raw(
            port,
            b"POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"run": ',
        )
        status, body = json_of(read_all(s))
        assert status == 408 and "body_timeout_s" in body["error"] and time.monotonic() - started < 5
        huge = raw(port, b"POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 300000000\r\n\r\n")
        huge.sendall(b"x" * 100_000)
        assert json_of(read_all(huge))[0] == 413


# -- connections ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "partial",
    [
        b"",
        b"G",
        b"GET / HTTP/1.1\r\n",
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n",
        b"POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le",
    ],
)
def test_a_connection_slow_to_send_its_request_head_is_closed(runs_root, partial):
    with real_server(runs_root, **FAST) as (_, port):
        started = time.monotonic()
        s = raw(port, partial)
        assert read_all(s) == b"" and time.monotonic() - started < 5


def test_a_slow_loris_after_a_first_request_is_closed_too(runs_root):
    with real_server(runs_root, **FAST) as (_, port):
        s = raw(port, b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert s.recv(65536).startswith(b"HTTP/1.1 200")
        started, closed = time.monotonic(), False
        while not closed and time.monotonic() - started < 5:
            try:  # a byte at a time, each in time for an idle timer, the head never complete
                s.sendall(b"G")
                time.sleep(0.1)
            except OSError:
                closed = True
        assert closed and time.monotonic() - started < 3
        s.close()


def test_half_open_connections_are_dropped_while_others_are_served(runs_root):
    """The CI-sized version of benchmarks/serve_stress.py (300 connections there)."""
    with real_server(runs_root, **FAST) as (_, port):
        idle = [raw(port, b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n") for _ in range(80)]
        started = time.monotonic()
        r = httpx.post(
            f"http://127.0.0.1:{port}/api/generate", timeout=10, json={"run": "a", "max_new_tokens": 3, "stream": False}
        )
        assert r.status_code == 200 and time.monotonic() - started < 2
        for s in idle:
            assert read_all(s) == b""
        assert time.monotonic() - started < 10


def test_connections_beyond_the_limit_get_a_json_503(runs_root):
    with real_server(runs_root, max_connections=10, header_timeout_s=1.5, keep_alive_s=1.5) as (_, port):
        idle = [raw(port, b"") for _ in range(10)]
        time.sleep(0.2)
        extra = raw(port, b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        status, body = json_of(read_all(extra))
        assert status == 503 and "max_connections" in body["error"]
        for s in idle:
            assert read_all(s) == b""  # closed by the head timeout: room again
        assert httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=10).status_code == 200


# -- generations in progress ---------------------------------------------------------------------------


def test_generations_beyond_the_limits_get_a_json_503(runs_root):
    app = app_for(runs_root, max_generations=2, max_generations_per_run=1)
    slots = app.state.playground.slots

    async def main():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=60) as c:
            await c.post("/api/generate", json={"run": "a", "max_new_tokens": 1})
            await c.post("/api/generate", json={"run": "b", "max_new_tokens": 1})
            assert not slots.busy
            locks = [entry.lock for entry in app.state.playground.cache._runs.values()]
            for lock in locks:
                lock.acquire()  # both models busy: the next requests hold their slots
            first = asyncio.create_task(c.post("/api/generate", json={"run": "a", "max_new_tokens": 2}))
            await asyncio.sleep(0.3)
            same_run = await c.post("/api/generate", json={"run": "a", "max_new_tokens": 2})
            attention = await c.post("/api/attention", json={"run": "a", "text": "옛날"})
            second = asyncio.create_task(
                c.post("/api/generate", json={"run": "b", "max_new_tokens": 2, "stream": False})
            )
            await asyncio.sleep(0.3)
            third = await c.post("/api/generate", json={"run": "b", "max_new_tokens": 2})
            runs = await c.get("/api/runs")
            for lock in locks:
                lock.release()
            return same_run, attention, third, runs, await first, await second

    same_run, attention, third, runs, first, second = asyncio.run(main())
    assert same_run.status_code == attention.status_code == 503 and same_run.json()["field"] == "run"
    assert third.status_code == 503 and "max_generations" in third.json()["error"]
    assert same_run.headers["retry-after"] == "1" and runs.status_code == 200
    assert first.status_code == second.status_code == 200 and not slots.busy  # every slot given back


def test_the_stress_script_reports_the_bounds_holding():
    """benchmarks/serve_stress.py, CI-sized (the 300-connection figures are in docs/en/playground.md)."""
    from tests.helpers import cli

    r = cli("benchmarks/serve_stress.py", "--connections", "40", "--set", "header_timeout_s=1", timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["while_open_max_s"] < 2 and got["half_open_all_closed_s"] < 10 and got["body_300mb_status"] == 413
    assert got["server_peak_rss_mb"] is None or got["server_peak_rss_mb"] < 1024


def test_a_client_that_stops_reading_its_stream_is_dropped_and_its_slot_given_back(runs_root, monkeypatch):
    app = app_for(runs_root, send_timeout_s=0.3, max_new_tokens_limit=100_000)
    pg, samples = app.state.playground, Samples(monkeypatch)
    payload = json.dumps({"run": "a", "max_new_tokens": 100_000}).encode()
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/generate",
        "raw_path": b"/api/generate",
        "query_string": b"",
        "root_path": "",
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 80),
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
    }
    sent, inbox = [], [{"type": "http.request", "body": payload, "more_body": False}]
    never = asyncio.Event()

    async def receive():
        if inbox:
            return inbox.pop()
        await never.wait()

    async def send(message):
        sent.append(message)
        if len(sent) > 3:  # the client's buffers are full: nothing more is taken
            await never.wait()

    async def main():
        await asyncio.wait_for(app(scope, receive, send), timeout=30)

    started = time.monotonic()
    asyncio.run(main())
    deadline = time.monotonic() + 10
    while (samples.active or pg.slots.busy) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert time.monotonic() - started < 10 and not pg.slots.busy and samples.active == 0
    assert sent[0]["status"] == 200 and samples.tokens < 100_000


H = b"Host: 127.0.0.1\r\n"
POST = b"POST /api/generate HTTP/1.1\r\n" + H
MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"GET /\xff\xfe HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /static/%ff HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /static/%2e%2e/serve.py HTTP/1.1\r\n" + H + b"\r\n",
    POST + b"Content-Length: abc\r\n\r\n",
    POST + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"GET /api/runs HTTP/1.0\r\n\r\n",
    b"GET /api/runs HTTP/1.1\r\n" + H + b"Host: evil.com\r\n\r\n",
    b"GET http://evil.com/api/runs HTTP/1.1\r\n" + H + b"\r\n",
    POST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /api/runs HTTP/1.1\r\n" + H + b"X: a\x00b\r\n\r\n",
    b"GET /api/runs?\xff=1 HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /api/runs HTTP/1.1\r\n" + H + b"Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    b"GET /api/runs HTTP/1.1\r\nHost: \xff\xfe\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\n" + H + b"\r\n",
    b"DELETE /api/runs HTTP/1.1\r\n" + H + b"\r\n",
    b"GET /api/runs HTTP/1.1\r\nHost: evil.com\r\n\r\n",
]


def test_malformed_http_is_answered_in_json_over_a_socket(runs_root):
    with real_server(runs_root, names=allowed_host_names("127.0.0.1", []), **FAST) as (_, port):
        for data in MALFORMED:
            got = read_all(raw(port, data))
            status, body = int(got.split()[1]), json.loads(got.partition(b"\r\n\r\n")[2] or b"null")
            if status != 200:
                assert 400 <= status < 500 and set(body) == {"error", "field"}, (data, got[:300])
            r = httpx.get(f"http://127.0.0.1:{port}/api/runs", timeout=2)  # healthy after each
            assert r.status_code == 200
