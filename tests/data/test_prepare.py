"""data.prepare: checked, resumable downloads, tested against a local HTTP server and file:// URLs only."""

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from common.errors import UserError
from data.download import download
from data.prepare.fetching import KOCONOVEL, REGISTRY, CorpusSource, RemoteFile, prepare
from data.text import read_text
from tests.helpers import cli


class FileServer:
    """Serves `files` (url path -> bytes) on 127.0.0.1 with HTTP Range support, and can cut a response short."""

    def __init__(self, files: dict[str, bytes], ranges: bool = True):
        self.files = files
        self.ranges = ranges
        self.cut: dict[str, int] = {}  # url path -> bytes to send before dropping the connection (once)
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                path = self.path.split("?")[0]
                server.requests.append((path, self.headers.get("Range")))
                body = server.files.get(path)
                if body is None:
                    self.send_error(404)
                    return
                start, status = 0, 200
                rng = self.headers.get("Range")
                if rng and server.ranges:
                    start = int(rng.removeprefix("bytes=").split("-")[0])
                    if start >= len(body):
                        self.send_error(416)
                        return
                    status = 206
                self.send_response(status)
                self.send_header("Content-Length", str(len(body) - start))
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
                self.end_headers()
                payload = body[start:]
                if path in server.cut:
                    payload = payload[: server.cut.pop(path)]
                    self.wfile.write(payload)
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


BODY = ("한 줄의 시험용 문장입니다. " * 3000).encode("utf-8")  # ~120 KB, several read blocks
BODY_SHA = hashlib.sha256(BODY).hexdigest()


def test_download_checks_the_checksum(tmp_path):
    with FileServer({"/f.txt": BODY}) as srv:
        dest = tmp_path / "f.txt"
        assert download(srv.url + "/f.txt", dest, BODY_SHA) == BODY_SHA
        assert dest.read_bytes() == BODY
        bad = tmp_path / "bad.txt"
        with pytest.raises(UserError, match="checksum mismatch .* expected sha256 0000.*got " + BODY_SHA):
            download(srv.url + "/f.txt", bad, "0" * 64)
        assert not bad.exists() and not (tmp_path / "bad.txt.part").exists()


def test_interrupted_download_leaves_no_final_file_and_resumes(tmp_path):
    with FileServer({"/f.txt": BODY}) as srv:
        srv.cut["/f.txt"] = 50_001
        dest = tmp_path / "f.txt"
        with pytest.raises(UserError, match="run the same command again to resume"):
            download(srv.url + "/f.txt", dest, BODY_SHA)
        part = tmp_path / "f.txt.part"
        assert not dest.exists()
        assert part.read_bytes() == BODY[:50_001]
        assert download(srv.url + "/f.txt", dest, BODY_SHA) == BODY_SHA
        assert dest.read_bytes() == BODY and not part.exists()
        assert srv.requests == [("/f.txt", None), ("/f.txt", "bytes=50001-")]


def test_resume_from_a_server_without_range_support_starts_over(tmp_path):
    with FileServer({"/f.txt": BODY}, ranges=False) as srv:
        (tmp_path / "f.txt.part").write_bytes(BODY[:1000])
        assert download(srv.url + "/f.txt", tmp_path / "f.txt", BODY_SHA) == BODY_SHA
        assert (tmp_path / "f.txt").read_bytes() == BODY


def test_stale_partial_file_is_replaced(tmp_path):
    with FileServer({"/f.txt": BODY}) as srv:
        (tmp_path / "f.txt.part").write_bytes(b"x" * 1000)  # not a prefix of the file
        assert download(srv.url + "/f.txt", tmp_path / "f.txt", BODY_SHA) == BODY_SHA
        assert (tmp_path / "f.txt").read_bytes() == BODY
        (tmp_path / "g.txt.part").write_bytes(BODY + b"extra")  # longer than the file: HTTP 416
        assert download(srv.url + "/f.txt", tmp_path / "g.txt", BODY_SHA) == BODY_SHA


def test_http_errors_are_user_errors(tmp_path):
    with FileServer({}) as srv:
        with pytest.raises(UserError, match="HTTP 404"):
            download(srv.url + "/missing.txt", tmp_path / "m.txt")
    with pytest.raises(UserError, match="cannot download"):
        download("http://127.0.0.1:9/nothing", tmp_path / "n.txt", timeout=5)


def test_file_url(tmp_path):
    src = tmp_path / "src.txt"
    src.write_bytes(BODY)
    assert download(src.as_uri(), tmp_path / "out" / "f.txt", BODY_SHA) == BODY_SHA


# -- a whole corpus: a fake KoCoNovel tree of our own sentences --------------------------------------------
def _jsonl(novel: int) -> bytes:
    docs = [
        {"doc_id": f"{novel}_{i}", "text": f'{novel}번째 이야기의 {i}번째 단락이다.\n"그래요?" 하고 물었다.'}
        for i in range(2)
    ]
    return "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs).encode("utf-8")


def _fake_koconovel() -> dict[str, bytes]:
    return {"/" + f.path: _jsonl(n) for n, f in enumerate(KOCONOVEL.files, 1)}


def _expected_text() -> str:
    novels = [
        "\n".join(f'{n}번째 이야기의 {i}번째 단락이다.\n"그래요?" 하고 물었다.' for i in range(2)) for n in range(1, 51)
    ]
    return "\n\n".join(novels) + "\n"


def test_registry_entry_is_the_real_koconovel_repository():
    assert REGISTRY["koconovel"] is KOCONOVEL and len(KOCONOVEL.files) == 50
    assert KOCONOVEL.base_url.startswith("https://raw.githubusercontent.com/storidient/KoCoNovel/")
    assert "CC BY-SA 4.0" in KOCONOVEL.license and "2404.01140" in KOCONOVEL.citation
    assert [f.path.split("/")[2].split("_")[0] for f in KOCONOVEL.files] == [str(n) for n in range(1, 51)]


def test_prepare_records_checksums_refuses_a_changed_file_until_forced(tmp_path):
    files = _fake_koconovel()
    with FileServer(dict(files)) as srv:
        out = prepare(KOCONOVEL, tmp_path, base_url=srv.url, progress=False)
        assert out == tmp_path / "koconovel" / "koconovel.txt"
        assert read_text(out) == _expected_text() == out.read_text(encoding="utf-8")
        sums = (tmp_path / "koconovel" / "SHA256SUMS").read_text().splitlines()
        assert len(sums) == 50
        first = next(s for s in sums if s.endswith("/1_Ms._B_and_Love_Letters/text.jsonl"))
        assert first.split("  ")[0] == hashlib.sha256(files["/" + KOCONOVEL.files[0].path]).hexdigest()
        assert "CC BY-SA 4.0" in (tmp_path / "koconovel" / "SOURCE.txt").read_text()

        n = len(srv.requests)
        prepare(KOCONOVEL, tmp_path, base_url=srv.url, progress=False)  # all cached and checked: no download
        assert len(srv.requests) == n

        local = tmp_path / "koconovel" / "raw" / KOCONOVEL.files[3].path
        local.write_bytes(b"corrupted")  # a damaged cached file is fetched again
        prepare(KOCONOVEL, tmp_path, base_url=srv.url, progress=False)
        assert local.read_bytes() == files["/" + KOCONOVEL.files[3].path]

        sums_file = tmp_path / "koconovel" / "SHA256SUMS"
        recorded = sums_file.read_text()
        srv.files["/" + KOCONOVEL.files[3].path] = b"<!DOCTYPE html><html><body>Moved</body></html>\n"
        with pytest.raises(UserError, match="did not send a usable file: it is an HTML or XML page"):
            prepare(KOCONOVEL, tmp_path, base_url=srv.url, force=True, progress=False)
        assert local.read_bytes() == files["/" + KOCONOVEL.files[3].path]  # the verified copy is kept
        assert sums_file.read_text() == recorded and read_text(out) == _expected_text()

        srv.files["/" + KOCONOVEL.files[3].path] = _jsonl(99)  # the server's copy changes
        local.write_bytes(b"corrupted")
        with pytest.raises(UserError, match="checksum mismatch .* pass --force to accept the new file"):
            prepare(KOCONOVEL, tmp_path, base_url=srv.url, progress=False)
        assert sums_file.read_text() == recorded and read_text(out) == _expected_text()
        with pytest.warns(UserWarning, match="--force: the recorded sha256 of 1 file"):
            prepare(KOCONOVEL, tmp_path, base_url=srv.url, force=True, progress=False)  # the user trusts it anew
        assert local.read_bytes() == _jsonl(99)
        assert f"{hashlib.sha256(_jsonl(99)).hexdigest()}  {KOCONOVEL.files[3].path}" in sums_file.read_text()
        assert "99번째 이야기" in read_text(out)


def test_pinned_checksum_in_the_registry_is_enforced(tmp_path):
    src = tmp_path / "mirror" / "a.jsonl"
    src.parent.mkdir()
    src.write_bytes(_jsonl(1))
    good = hashlib.sha256(_jsonl(1)).hexdigest()
    base = (tmp_path / "mirror").as_uri()
    source = CorpusSource(
        "mini",
        "test",
        "CC0",
        "nobody",
        "https://example.invalid/",
        (RemoteFile("a.jsonl", good),),
        KOCONOVEL.extract,
        "mini.txt",
    )
    assert prepare(source, tmp_path / "cache", base_url=base, progress=False).read_text().startswith("1번째")
    wrong = CorpusSource(
        "mini2",
        "test",
        "CC0",
        "nobody",
        "https://example.invalid/",
        (RemoteFile("a.jsonl", "f" * 64),),
        KOCONOVEL.extract,
        "mini2.txt",
    )
    with pytest.raises(UserError, match="checksum mismatch"):
        prepare(wrong, tmp_path / "cache", base_url=base, progress=False)
    assert not (tmp_path / "cache" / "mini2" / "mini2.txt").exists()


def test_malformed_source_file_is_a_user_error(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "a.jsonl").write_text("not json\n", encoding="utf-8")
    source = CorpusSource(
        "bad", "t", "CC0", "x", "https://example.invalid/", (RemoteFile("a.jsonl"),), KOCONOVEL.extract, "bad.txt"
    )
    with pytest.raises(UserError, match="a.jsonl line 1 is not a KoCoNovel text record"):
        prepare(source, tmp_path / "c", base_url=(tmp_path / "m").as_uri(), progress=False)


def test_cli_prints_the_data_path_to_train_on(tmp_path):
    with FileServer(_fake_koconovel()) as srv:
        r = cli("-m", "data.prepare", "koconovel", "--cache-dir", str(tmp_path), "--base-url", srv.url, timeout=120)
        assert r.returncode == 0, r.stderr
        line = r.stdout.strip().splitlines()[-1]
        assert line == f"data.path={tmp_path / 'koconovel' / 'koconovel.txt'}"
        assert Path(line.removeprefix("data.path=")).read_text(encoding="utf-8") == _expected_text()
        assert "CC BY-SA 4.0" in r.stderr
    r = cli("-m", "data.prepare", "nope", "--cache-dir", str(tmp_path))
    assert r.returncode == 2 and r.stderr.startswith("error: unknown corpus 'nope'")
    r = cli(
        "-m",
        "data.prepare",
        "koconovel",
        "--cache-dir",
        str(tmp_path / "new"),
        "--base-url",
        "http://127.0.0.1:9",
        "--quiet",
    )
    assert r.returncode == 2 and r.stderr.startswith("error: cannot download http://127.0.0.1:9/data/jsonl/")
    assert "Traceback" not in r.stderr
