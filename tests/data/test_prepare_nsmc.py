"""`python -m data.prepare nsmc` and `koconovel --files`, against a local HTTP server and a local folder only.

The reviews below are written for this test (no text of the real corpus)."""

from __future__ import annotations

import pytest

from common.errors import UserError
from data.download import BadContent
from data.prepare.fetching import NSMC, REGISTRY, _nsmc_text, prepare
from tests.data.test_prepare import FileServer, _fake_koconovel
from tests.helpers import cli

ROWS = [
    "id\tdocument\tlabel",
    "101\t정말   재밌어요 ㅋㅋㅋ\t1",
    "102\t\t0",  # an empty review: dropped
    "103\t배우들 연기가 어색했다\t0",
    "104\t정말 재밌어요 ㅋㅋㅋ\t1",  # the same review once whitespace is folded: dropped
    "105\t또 보고 싶은 영화\t1",
    "106\t한번 더 ᄇ\u1169ᆫ다\t1",  # NFD Hangul: becomes NFC (본다)
]
RATINGS = ("\n".join(ROWS) + "\n").encode("utf-8")


def test_registry_pins_one_commit_and_records_the_license():
    assert REGISTRY["nsmc"] is NSMC and NSMC.files[0].path == "ratings.txt"
    assert "e9t/nsmc/" in NSMC.base_url and len(NSMC.base_url.rstrip("/").rsplit("/", 1)[-1]) == 40
    assert NSMC.license.startswith("CC0 1.0")


def test_reviews_one_per_line_folded_deduplicated_nfc(tmp_path):
    with FileServer({"/ratings.txt": RATINGS}) as srv:
        out = prepare(NSMC, tmp_path, srv.url, progress=False)
    assert out == tmp_path / "nsmc" / "nsmc.txt"
    assert out.read_text(encoding="utf-8").splitlines() == [
        "정말 재밌어요 ㅋㅋㅋ",
        "배우들 연기가 어색했다",
        "또 보고 싶은 영화",
        "한번 더 본다",
    ]
    assert "CC0 1.0" in (tmp_path / "nsmc" / "SOURCE.txt").read_text(encoding="utf-8")
    assert "ratings.txt" in (tmp_path / "nsmc" / "SHA256SUMS").read_text()  # trust on first use, then checked


@pytest.mark.parametrize(
    "body, why",
    [
        ("<!DOCTYPE html><html>rate limited</html>", "HTML"),
        ("document\tlabel\n1\t0\n", "header"),
        ("id\tdocument\tlabel\nabc\t리뷰\t1\n", "line 2"),
        ("id\tdocument\tlabel\n7\t리뷰\t5\n", "line 2"),
        ("id\tdocument\tlabel\n7\t\t1\n", "no review"),
    ],
)
def test_a_bad_file_is_refused_and_not_kept(tmp_path, body, why):
    with FileServer({"/ratings.txt": body.encode("utf-8")}) as srv, pytest.raises(UserError, match=why):
        prepare(NSMC, tmp_path, srv.url, progress=False)
    assert not (tmp_path / "nsmc" / "raw" / "ratings.txt").exists()
    assert not (tmp_path / "nsmc" / "SHA256SUMS").exists()


def test_extract_reports_the_bad_line():
    with pytest.raises(BadContent, match="line 3"):
        _nsmc_text("ratings.txt", "id\tdocument\tlabel\n1\t좋다\t1\nbroken row\n")


def test_cli_prints_the_data_path_and_refuses_files(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "ratings.txt").write_bytes(RATINGS)
    r = cli("-m", "data.prepare", "nsmc", "--cache-dir", str(tmp_path / "c"), "--base-url", str(mirror), "--quiet")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"data.path={tmp_path / 'c' / 'nsmc' / 'nsmc.txt'}"
    r = cli("-m", "data.prepare", "nsmc", "--files", "--cache-dir", str(tmp_path / "c"), "--base-url", str(mirror))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--files" in r.stderr


def test_koconovel_files_writes_one_file_per_novel_in_order(tmp_path):
    with FileServer(_fake_koconovel()) as srv:
        joined = prepare(REGISTRY["koconovel"], tmp_path, srv.url, progress=False)
        folder = prepare(REGISTRY["koconovel"], tmp_path, srv.url, progress=False, files=True)
    files = sorted(folder.iterdir())
    assert len(files) == 50 and files[0].name == "01_1_Ms._B_and_Love_Letters.txt"
    texts = [f.read_text(encoding="utf-8").rstrip("\n") for f in files]
    assert "\n\n".join(texts) + "\n" == joined.read_text(encoding="utf-8")  # the same novels, in the same order
