"""Downloads that cost too much: a disk that fills up is named with what to free, a mirror that trickles is
given up on (--min-speed), and a body larger than the corpus can be, or endless, is refused (--max-file-mb).
A local HTTP server on 127.0.0.1 only."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from common.errors import UserError
from data.download import Limits, download
from data.prepare.fetching import prepare
from tests.data.test_downloads import GOOD, MINI
from tests.data.test_prepare import BODY, FileServer
from tests.helpers import cli, small_disk


class Trickle(FileServer):  # its start and stop
    """Serves `/f` as `length` bytes (announced, or not when `announce` is false) sent `step` bytes every
    `every` seconds, for at most `seconds` before it drops the connection."""

    def __init__(self, length: int, step: int, every: float, seconds: float, announce: bool = True):
        settings = (length, step, every, seconds, announce)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                length, step, every, seconds, announce = settings
                self.send_response(200)
                if announce:
                    self.send_header("Content-Length", str(length))
                self.end_headers()
                sent, ends = 0, time.monotonic() + seconds
                try:
                    while sent < length and time.monotonic() < ends:
                        self.wfile.write(b"x" * step)
                        self.wfile.flush()
                        sent += step
                        time.sleep(every)
                except OSError:
                    pass  # the client gave up
                self.close_connection = True

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/f"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)


def test_a_mirror_that_trickles_is_given_up_on_and_the_bytes_kept(tmp_path):
    dest = tmp_path / "f.txt"
    started = time.monotonic()
    with Trickle(100_000, 10, 0.05, seconds=8) as srv, pytest.raises(UserError) as e:
        download(srv.url, dest, limits=Limits(min_speed=1000, slow_seconds=1.0))
    message = str(e.value)
    assert "slower than" in message and "--min-speed" in message and "resume" in message, message
    assert time.monotonic() - started < 6 and (tmp_path / "f.txt.part").stat().st_size > 0 and not dest.exists()


def test_a_file_larger_than_the_corpus_can_be_is_refused(tmp_path):
    with FileServer({"/big.txt": BODY}) as srv, pytest.raises(UserError) as e:
        download(f"{srv.url}/big.txt", tmp_path / "big.txt", limits=Limits(max_bytes=10_000))
    assert f"is {len(BODY):,} bytes, more than the 10,000" in str(e.value) and "--max-file-mb" in str(e.value)
    assert not list(tmp_path.iterdir())  # nothing was downloaded


def test_an_endless_body_is_stopped_at_the_bound(tmp_path):
    with Trickle(10**12, 65536, 0.0, seconds=30, announce=False) as srv, pytest.raises(UserError) as e:
        download(srv.url, tmp_path / "f.txt", limits=Limits(max_bytes=1_000_000))
    assert "sent more than 1,000,000 bytes" in str(e.value)
    assert not list(tmp_path.iterdir())


def test_a_full_disk_is_named_with_what_to_free(tmp_path):
    with small_disk(tmp_path / "disk", "64k") as disk:
        with FileServer({"/big.txt": BODY}) as srv, pytest.raises(UserError) as e:
            download(f"{srv.url}/big.txt", disk / "big.txt")
    message = str(e.value)
    assert "the disk is full" in message and "more bytes are needed" in message, message
    assert "--cache-dir" in message and "\n" not in message


def test_the_bounds_are_keys_of_the_command(tmp_path):
    with FileServer(dict(GOOD)) as srv:
        with pytest.raises(UserError, match="more than the 10 a file of this corpus can be"):
            prepare(MINI, tmp_path / "c", base_url=srv.url, progress=False, max_file_mb=10 / (1 << 20))
        assert prepare(MINI, tmp_path / "c", base_url=srv.url, progress=False, min_speed_kb=0.5).is_file()
    r = cli("-m", "data.prepare", "koconovel", "--min-speed", "0", "--cache-dir", str(tmp_path / "c2"))
    assert r.returncode == 2 and r.stderr.strip() == "error: --min-speed 0 is invalid: it must be a positive number"
