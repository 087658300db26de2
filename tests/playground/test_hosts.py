"""The playground's Host check: header parsing for every address family, a check on every bind address
(a network bind needs `allowed_hosts`), and a real uvicorn on the loopback refusing other names."""

import socket

import pytest

from common.errors import ConfigError
from playground.guard import allowed_host_names, host_of
from tests.playground.test_bounds import json_of, raw, read_all, real_server, two_runs


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory):
    return two_runs(tmp_path_factory)


@pytest.mark.parametrize(
    "header,name",
    [
        (b"localhost", "localhost"),
        (b"LOCALHOST:8000", "localhost"),
        (b"localhost.", "localhost"),
        (b"127.0.0.1:80", "127.0.0.1"),
        (b"[::1]:8000", "::1"),
        (b"[::1]", "::1"),
        (b"[0:0:0:0:0:0:0:1]", "::1"),
        (b"evil.com", "evil.com"),
        (b"evil.com:8000", "evil.com"),
        (b"::1", None),
        (b"[::1", None),
        (b"[::1]x", None),
        (b"a:b", None),
        (b"localhost:80:80", None),
        (b"", None),
        (b"\xff", None),
        (b"[::1]:", "::1"),
        (b"localhost:", "localhost"),
    ],
)
def test_host_headers_are_parsed_for_every_address_family(header, name):
    assert host_of(header) == name


@pytest.mark.parametrize("bind", ["127.0.0.1", "::1", "localhost", "127.0.0.2", "0.0.0.0", "::", "192.168.1.20"])
def test_every_bind_address_has_a_host_check(bind):
    loopback = bind in ("127.0.0.1", "::1", "localhost", "127.0.0.2")
    if not loopback:
        with pytest.raises(ConfigError, match="allowed_hosts"):
            allowed_host_names(bind, [])
    names = allowed_host_names(bind, ["mybox.lan"])
    assert names is not None and {"localhost", "127.0.0.1", "::1", "mybox.lan"} <= names
    assert "evil.com" not in names and allowed_host_names(bind, ["*"]) is None


@pytest.mark.parametrize("bind,family", [("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)])
def test_a_real_server_refuses_other_host_names(runs_root, bind, family):
    names = allowed_host_names(bind, ["mybox.lan"])
    with real_server(runs_root, host=bind, names=names) as (_, port):
        for host, status in (
            (b"evil.com", 400),
            (b"evil.com:%d" % port, 400),
            (b"[::1]:%d" % port, 200),
            (b"localhost:%d" % port, 200),
            (b"127.0.0.1", 200),
            (b"mybox.lan", 200),
            (b"MyBox.Lan.:1", 200),
            (b"127.0.0.1.evil.com", 400),
        ):
            s = raw(
                port,
                b"GET /api/runs HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n",
                host=bind,
                family=family,
            )
            got = read_all(s)
            assert got.startswith(b"HTTP/1.1 %d" % status), (host, got[:200])
            if status == 400:
                assert json_of(got)[1]["field"] is None


def test_serve_py_refuses_a_network_bind_without_host_names(tmp_path):
    from tests.helpers import cli

    r = cli("serve.py", "host=0.0.0.0", "port=0", f"runs_dir={tmp_path}")
    assert r.returncode != 0 and "allowed_hosts" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
