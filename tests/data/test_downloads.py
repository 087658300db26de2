"""Downloads that lie: nothing is recorded as trusted until it validates as what it claims to be, `--force`
always recovers, and `--base-url` takes a local folder (data.prepare, data.download). A local HTTP server
on 127.0.0.1 and file:// URLs only; no real network."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from common.errors import UserError
from data.prepare.fetching import BASE_URL_ENV, KOCONOVEL, CorpusSource, RemoteFile, prepare
from tests.data.test_prepare import FileServer, _expected_text, _fake_koconovel
from tests.helpers import cli


def _record(n: int) -> bytes:
    docs = [
        {"doc_id": f"{n}_{i}", "text": f"{n}번 편지의 {i}번째 줄: 잘 지내니? 이곳은 벌써 눈이 온다."} for i in range(3)
    ]
    return "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs).encode("utf-8")


GOOD = {"/a.jsonl": _record(1), "/b.jsonl": _record(2)}
MINI = CorpusSource(
    "mini",
    "test",
    "CC0",
    "nobody",
    "https://example.invalid/",
    (RemoteFile("a.jsonl"), RemoteFile("b.jsonl")),
    KOCONOVEL.extract,
    "mini.txt",
)

BAD_BODIES = {  # name: (body served for b.jsonl, what the one error line says)
    "html_page": (
        b"<!DOCTYPE html>\n<html><head><title>404</title></head><body>Not Found</body></html>\n",
        "it is an HTML or XML page",
    ),
    "html_no_doctype": (b"\n  <html><body>Mirror under maintenance</body></html>", "it is an HTML or XML page"),
    "truncated_mid_record": (_record(2)[: _record(2).index(b'"text"', 100)], "b.jsonl line 2 is not a KoCoNovel"),
    "truncated_mid_character": (_record(2)[:-30], "it ends in the middle of a character"),
    "binary": (bytes(range(256)) * 8, "it is not UTF-8 text (byte 128"),
    "gzip_body": (b"\x1f\x8b\x08\x00" + bytes(200), "it is not UTF-8 text (byte 1"),
    "empty": (b"", "the file is empty"),
    "blank_lines": (b"\n\n\n", "holds no KoCoNovel text record"),
    "json_array": (b"[1, 2, 3]\n", "line 1 is not a KoCoNovel text record"),
    "json_without_text": (b'{"doc_id": "2_0"}\n', "line 1 is not a KoCoNovel text record (KeyError"),
    "text_not_a_string": (b'{"doc_id": "2_0", "text": 5}\n', "its text is not a string"),
}


def _mini_text() -> str:
    return (
        "\n\n".join(
            "\n".join(json.loads(line)["text"] for line in body.decode().splitlines()) for body in GOOD.values()
        )
        + "\n"
    )


def _sums(cache: Path) -> str:
    f = cache / "mini" / "SHA256SUMS"
    return f.read_text() if f.exists() else ""


@pytest.mark.parametrize("name", BAD_BODIES)
def test_a_lying_mirror_is_refused_and_nothing_is_recorded(tmp_path, name):
    body, needle = BAD_BODIES[name]
    cache = tmp_path / "cache"
    with FileServer({**GOOD, "/b.jsonl": body}) as bad:
        with pytest.raises(UserError) as info:
            prepare(MINI, cache, base_url=bad.url, progress=False)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{bad.url}/b.jsonl did not send a usable file"), message
    assert needle in message and "nothing was recorded" in message
    raw = cache / "mini" / "raw"
    assert not (raw / "b.jsonl").exists() and not (raw / "b.jsonl.part").exists()
    assert "b.jsonl" not in _sums(cache) and not (cache / "mini" / "mini.txt").exists()
    with FileServer(dict(GOOD)) as good:  # a good mirror afterwards just works, no --force needed
        out = prepare(MINI, cache, base_url=good.url, progress=False)
    assert out.read_text(encoding="utf-8") == _mini_text()
    assert f"{hashlib.sha256(GOOD['/b.jsonl']).hexdigest()}  b.jsonl" in _sums(cache)


def test_a_body_shorter_than_its_content_length_is_cut_short_and_resumed(tmp_path):
    cache = tmp_path / "cache"
    with FileServer(dict(GOOD)) as srv:
        srv.cut["/b.jsonl"] = 40
        with pytest.raises(UserError, match=r"stopped at 40 of \d+ bytes .* it was cut short"):
            prepare(MINI, cache, base_url=srv.url, progress=False)
        assert "b.jsonl" not in _sums(cache) and not (cache / "mini" / "raw" / "b.jsonl").exists()
        assert prepare(MINI, cache, base_url=srv.url, progress=False).read_text(encoding="utf-8") == _mini_text()
        assert srv.requests[-1] == ("/b.jsonl", "bytes=40-")


def test_a_resumed_download_that_does_not_validate_starts_over(tmp_path):
    raw = tmp_path / "cache" / "mini" / "raw"
    raw.mkdir(parents=True)
    (raw / "b.jsonl.part").write_bytes(b"<html>")  # left by an earlier try against a bad mirror
    with FileServer(dict(GOOD)) as srv:
        prepare(MINI, tmp_path / "cache", base_url=srv.url, progress=False)
        assert (raw / "b.jsonl").read_bytes() == GOOD["/b.jsonl"]
        assert [r for r in srv.requests if r[0] == "/b.jsonl"] == [("/b.jsonl", "bytes=6-"), ("/b.jsonl", None)]


def test_force_recovers_from_a_bad_file_an_older_version_recorded(tmp_path):
    """Before validation existed, a lying mirror's body could be recorded; --force replaces it with one that
    validates. Without --force the record is kept and the one line says to pass --force."""
    raw = tmp_path / "cache" / "mini" / "raw"
    raw.mkdir(parents=True)
    html = BAD_BODIES["html_page"][0]
    (raw / "a.jsonl").write_bytes(html)
    (tmp_path / "cache" / "mini" / "SHA256SUMS").write_text(f"{hashlib.sha256(html).hexdigest()}  a.jsonl\n")
    with FileServer(dict(GOOD)) as srv:
        with pytest.raises(UserError, match="a.jsonl matches its recorded checksum but it is an HTML .* pass --force"):
            prepare(MINI, tmp_path / "cache", base_url=srv.url, progress=False)
        with pytest.warns(UserWarning, match="--force: the recorded sha256 of 1 file"):
            out = prepare(MINI, tmp_path / "cache", base_url=srv.url, force=True, progress=False)
    assert out.read_text(encoding="utf-8") == _mini_text()
    assert f"{hashlib.sha256(GOOD['/a.jsonl']).hexdigest()}  a.jsonl" in _sums(tmp_path / "cache")
    pinned = CorpusSource(
        "mini",
        "t",
        "CC0",
        "x",
        "https://example.invalid/",
        (RemoteFile("a.jsonl", hashlib.sha256(_record(7)).hexdigest()),),
        KOCONOVEL.extract,
        "m.txt",
    )
    with FileServer(dict(GOOD)) as srv, pytest.raises(UserError, match="checksum mismatch") as info:
        prepare(pinned, tmp_path / "cache", base_url=srv.url, force=True, progress=False)
    assert "--force" not in str(info.value)  # --force never overrides a checksum the registry pins


def test_a_local_folder_works_as_base_url(tmp_path, monkeypatch):
    mirror = tmp_path / "my mirror"
    mirror.mkdir()
    for name, body in GOOD.items():
        (mirror / name.lstrip("/")).write_bytes(body)
    out = prepare(MINI, tmp_path / "c1", base_url=str(mirror), progress=False)
    assert out.read_text(encoding="utf-8") == _mini_text()
    monkeypatch.chdir(tmp_path)
    assert (
        prepare(MINI, tmp_path / "c2", base_url="my mirror/", progress=False).read_text(encoding="utf-8")
        == _mini_text()
    )
    monkeypatch.setenv(BASE_URL_ENV, str(mirror))
    assert prepare(MINI, tmp_path / "c3", progress=False).exists()


@pytest.mark.parametrize(
    "base,needle",
    [
        ("no/such/folder", "--base-url no/such/folder is neither a URL nor an existing folder"),
        ("ftp://mirror.example/corpora", "ftp:// is not supported"),
        ("", None),
    ],
)
def test_a_base_url_that_is_neither_url_nor_folder_is_one_line(tmp_path, monkeypatch, base, needle):
    monkeypatch.chdir(tmp_path)
    if needle is None:  # an empty --base-url means the registry's own URL, as before
        monkeypatch.setenv(BASE_URL_ENV, "also/missing")
        with pytest.raises(UserError, match=f"{BASE_URL_ENV} also/missing is neither"):
            prepare(MINI, tmp_path / "c", base_url=base, progress=False)
        return
    with pytest.raises(UserError, match=needle):
        prepare(MINI, tmp_path / "c", base_url=base, progress=False)


def test_cli_with_a_folder_and_with_a_missing_path(tmp_path):
    mirror = tmp_path / "mirror"
    for path, body in _fake_koconovel().items():
        (mirror / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (mirror / path.lstrip("/")).write_bytes(body)
    r = cli(
        "-m",
        "data.prepare",
        "koconovel",
        "--cache-dir",
        str(tmp_path / "c"),
        "--base-url",
        str(mirror),
        "--quiet",
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert (
        Path(r.stdout.strip().splitlines()[-1].removeprefix("data.path=")).read_text(encoding="utf-8")
        == _expected_text()
    )
    r = cli(
        "-m",
        "data.prepare",
        "koconovel",
        "--cache-dir",
        str(tmp_path / "c"),
        "--base-url",
        str(tmp_path / "nowhere"),
        "--quiet",
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert (
        r.stderr.strip() == f"error: --base-url {tmp_path / 'nowhere'} is neither a URL nor an existing folder; "
        "pass an http(s):// or file:// URL, or the folder that holds the files"
    )
