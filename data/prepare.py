"""Download a public Korean corpus into a local cache and turn it into one training text file.

    python -m data.prepare koconovel [--cache-dir DIR] [--base-url URL|FOLDER] [--force]
    python -m data.prepare --list

Prints the `data.path=...` override to train on the prepared file (on stdout; progress goes to stderr).

Design choices:
- Downloads (`data.download`) are safe to interrupt and resume, and a file gets its final name only once
  complete and valid.
- Nothing is trusted before it is validated as what it claims to be: UTF-8 text in the source's format
  (for KoCoNovel, every line a JSON record with a "text" string), not empty, not an HTML page. A mirror
  that answers with anything else is refused in one line, and nothing of it is kept or recorded.
- A registry entry may pin the SHA-256 of each file. Where it does not, the first download that validates
  is recorded in `SHA256SUMS` beside the files (trust on first use), and every later download or re-use
  must match that record, so a file changing on the server is noticed.
- `--force` downloads every file again and always recovers: a new file that validates replaces an unpinned
  record (with one warning), because the user asked to trust the source again; one that does not validate
  changes nothing (the verified copy and its record stay). Pinned checksums are never overridden.
- `--base-url` takes an http(s):// or file:// URL or a local folder holding the files.
- The prepared text is UTF-8, NFC, "\\n" line endings, written atomically.
"""

from __future__ import annotations

from common.cli import run_cli

import argparse
import json
import os
import re
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from tqdm import tqdm

from common.errors import UserError
from common.fsutil import atomic_write, file_sha256, user_cache_dir
from data.download import BadContent, base_url_of, download
from data.text import normalize

BASE_URL_ENV = "KOCHAR_CORPUS_BASE_URL"


@dataclass(frozen=True)
class RemoteFile:
    path: str  # relative to the source's base URL; also where it is kept under the cache
    sha256: str | None = None  # None: recorded on the first download that validates


@dataclass(frozen=True)
class CorpusSource:
    name: str
    description: str
    license: str
    citation: str
    base_url: str
    files: tuple[RemoteFile, ...]
    extract: Callable[[str, str], str]  # (file path, file text) -> the plain text it holds; BadContent if not
    output: str  # name of the prepared text file
    separator: str = "\n\n"  # between the texts of two files (a blank line between two novels)


def _koconovel_text(path: str, raw: str) -> str:
    """A KoCoNovel text.jsonl: one {"doc_id", "text"} object per line, in reading order."""
    parts = []
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            if not isinstance(doc["text"], str):
                raise TypeError("its text is not a string")
            parts.append(doc["text"].strip("\n"))
        except (ValueError, KeyError, TypeError) as e:
            raise BadContent(f"{path} line {n} is not a KoCoNovel text record ({type(e).__name__}: {e})") from None
    if not parts:
        raise BadContent(f"{path} holds no KoCoNovel text record")
    return "\n".join(parts)


# The 50 novels in the corpus's own order (list_of_novels.csv). Pinned to the commit that added the
# text.jsonl files, so the bytes, and hence their checksums, never change under us.
_KOCONOVEL_NOVELS = (
    "1_Ms._B_and_Love_Letters", "2_A_Sweetheart", "3_A_Fictional_Rogue_Girl", "4_Wedding", "5_Kyung-hee",
    "6_A_Strange_Monk", "7_The_Woman", "8_Dark_Moon", "9_A_Field_of_Beans_Where_Gold_is_Buried", "10_Rich_Mine",
    "11_The_Daedong_River_Whispers", "12_City_and_Ghost", "13_Ddaraji", "14_Manmubang", "15_When_the_Sun_Rises",
    "16_When_Buckwheat_Flowers_Blossom", "17_Good_Sentences", "18_The_Unknown_Woman", "19_The_Mother_and_the_Son",
    "20_Anemone", "21_The_Death_of_Park_Chum-ji", "22_The_Mute_Samurai", "23_Spring_Spring",
    "24_The_Father_and_the_Son", "25_Fire", "26_A_Poverty-Stricken_Wife", "27_The_Son-in-Law", "28_A_Boy_s_Woes",
    "29_The_Calf", "30_Purehearted_Prince_Hodong", "31_Society_Authorizing_Alcohol", "32_The_Newspaper_and_the_Cage",
    "33_Miracles_of_Coincidence", "34_A_Lucky_Day", "35_Enemies_to_Benefactors", "36_Presence", "37_Girl_of_Doubt",
    "38_Eisig_and_Doseung", "39_The_Rose_is_Diseased", "40_Passionate_Princess_Nangnang", "41_Jeong-hee", "42_Youth",
    "43_The_Bachelor_and_the_Blind_Eel", "44_Escape_Chronicles", "45_Break_at_Dawn", "46_Sunrise",
    "47_Floral_Tribute", "48_The_Bull_and_the_Goblin", "49_Later_Baekje_Chronicles", "50_Baptism_of_Soil",
)

KOCONOVEL = CorpusSource(
    name="koconovel",
    description="KoCoNovel: 50 Korean novels and short stories of the 1910s-1930s (public domain, from Korean "
                "Wikisource, spelling modernised), one sentence per line, a blank line between novels",
    license="CC BY-SA 4.0 (https://creativecommons.org/licenses/by-sa/4.0/)",
    citation='Kyuhee Kim, Surin Lee and Sangah Lee (2024), "KoCoNovel: Annotated Dataset of Character '
             'Coreference in Korean Novels", arXiv:2404.01140. https://github.com/storidient/KoCoNovel',
    base_url="https://raw.githubusercontent.com/storidient/KoCoNovel/806e3f0f0c1df80c5ba28bdd9f25804d04f41933/",
    files=tuple(RemoteFile(f"data/jsonl/{novel}/text.jsonl") for novel in _KOCONOVEL_NOVELS),
    extract=_koconovel_text,
    output="koconovel.txt",
)

REGISTRY: dict[str, CorpusSource] = {s.name: s for s in (KOCONOVEL,)}


def default_cache_dir() -> Path:
    return user_cache_dir("corpora")


# -- checksums recorded on first download --------------------------------------------------------------
_DIGEST = re.compile(r"[0-9a-f]{64}")


def _read_sums(path: Path) -> dict[str, str]:
    """The records of `SHA256SUMS`; damaged lines are skipped, so their files are checked as if new."""
    sums = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            digest, _, name = line.partition("  ")
            if _DIGEST.fullmatch(digest) and name:
                sums[name] = digest
    return sums


def _write(path: Path, data: str) -> None:
    try:
        atomic_write(path, data)
    except OSError as e:
        raise UserError(f"cannot write {path}: {e.strerror or e} (pass --cache-dir=<a writable folder>)") from None


def _write_sums(path: Path, sums: dict[str, str]) -> None:
    # the format of `sha256sum`: check by hand with `sha256sum -c SHA256SUMS`
    _write(path, "".join(f"{d}  {n}\n" for n, d in sorted(sums.items())))


# -- one file: re-used, or downloaded and validated ----------------------------------------------------
def _content(source: CorpusSource, remote: RemoteFile, file: Path) -> str:
    """The text `file` holds, if it is what `remote` claims to be; else BadContent saying why."""
    data = file.read_bytes()
    if not data:
        raise BadContent("the file is empty")
    try:
        raw = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        if e.end == len(data) and "end of data" in e.reason:
            raise BadContent(f"it ends in the middle of a character (byte {e.start}), so it is cut short") from None
        raise BadContent(f"it is not UTF-8 text (byte {e.start}: {e.reason}), maybe a binary file") from None
    if re.match(r"\s*<(!doctype|html|head|body|\?xml)", raw[:512], re.IGNORECASE):
        raise BadContent(f"it is an HTML or XML page, not {remote.path}")
    return source.extract(remote.path, raw)


def _reuse(source: CorpusSource, remote: RemoteFile, local: Path, expected: str | None) -> str | None:
    """The text of the kept copy `local` when it is sound, else None (download it again)."""
    if not local.is_file() or (expected and file_sha256(local) != expected):
        return None
    try:
        return _content(source, remote, local)
    except BadContent as e:
        if not expected:
            return None  # never recorded: it was never trusted, fetch it again
        raise UserError(f"{local} matches its recorded checksum but {e}; pass --force to download it again") \
            from None


def _fetch(source: CorpusSource, remote: RemoteFile, url: str, local: Path, expected: str | None) -> tuple[str, str]:
    """Download `remote` to `local`; return (its text, its sha256)."""
    found: list[str] = []
    hint = "; pass --force to accept the new file" if expected and not remote.sha256 else ""
    digest = download(url, local, expected, validate=lambda part: found.append(_content(source, remote, part)),
                      mismatch_hint=hint)
    return found[-1], digest


# -- preparing a corpus --------------------------------------------------------------------------------
def _base_url(source: CorpusSource, base_url: str | None) -> str:
    if base_url:
        return base_url_of(base_url)
    if os.environ.get(BASE_URL_ENV):
        return base_url_of(os.environ[BASE_URL_ENV], BASE_URL_ENV)
    return source.base_url.rstrip("/") + "/"


def prepare(source: CorpusSource, cache_dir: str | Path | None = None, base_url: str | None = None,
            force: bool = False, progress: bool = True) -> Path:
    """Download (or re-use) every file of `source`, validate it, and write the prepared text; return its path."""
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    folder = root / source.name
    raw = folder / "raw"
    try:
        raw.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the corpus cache folder {folder}: {e.strerror or e} (pass --cache-dir)") \
            from None
    base = _base_url(source, base_url)
    sums_file = folder / "SHA256SUMS"
    sums = _read_sums(sums_file)
    texts, counts = [], {"new": 0, "replaced": 0}
    bar = tqdm(source.files, desc=f"{source.name}", unit="file", disable=not progress, file=sys.stderr,
               dynamic_ncols=True)
    for remote in bar:
        local = raw / remote.path
        recorded = sums.get(remote.path)
        expected = remote.sha256 or recorded
        text, digest = None if force else _reuse(source, remote, local, expected), None
        if text is None:  # --force trusts anew what validates, unless the registry pins it
            text, digest = _fetch(source, remote, base + quote(remote.path), local,
                                  remote.sha256 if force else expected)
        elif not expected:
            digest = file_sha256(local)  # a kept copy never recorded, which has just validated
        if digest and not remote.sha256 and digest != recorded:
            counts["new" if recorded is None else "replaced"] += 1
            sums[remote.path] = digest
            _write_sums(sums_file, sums)  # after each file: an interrupted run keeps what it verified
        texts.append(text)
    bar.close()
    if counts["new"]:
        print(f"first download of {counts['new']} file(s) without a pinned checksum: they validated, and their "
              f"sha256 are recorded in {sums_file}; later downloads must match them", file=sys.stderr)
    if counts["replaced"]:
        warnings.warn(f"--force: the recorded sha256 of {counts['replaced']} file(s) in {sums_file} changed to "
                      "those of the new downloads, which validated", stacklevel=2)
    output = folder / source.output
    _write(output, normalize(source.separator.join(t.strip("\n") for t in texts)) + "\n")
    _write(folder / "SOURCE.txt",
           f"{source.description}\n\nLicense: {source.license}\nCite: {source.citation}\nFrom: {base}\n")
    return output


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m data.prepare", description=__doc__.split("\n\n")[0])
    p.add_argument("name", nargs="?", help=f"the corpus to prepare: {', '.join(REGISTRY)}")
    p.add_argument("--cache-dir", help=f"where corpora are kept (default {default_cache_dir()})")
    p.add_argument("--base-url", help="download from a mirror: an http(s):// or file:// URL, or a local folder "
                                      f"(or set {BASE_URL_ENV})")
    p.add_argument("--force", action="store_true",
                   help="download every file again, and trust anew each one that validates")
    p.add_argument("--list", action="store_true", help="list the corpora this command knows")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    if args.list:
        for s in REGISTRY.values():
            print(f"{s.name}: {s.description}\n    license: {s.license}\n    cite: {s.citation}")
        return
    if not args.name:
        raise UserError(f"name the corpus to prepare: python -m data.prepare {'|'.join(REGISTRY)} (or --list)")
    if args.name not in REGISTRY:
        raise UserError(f"unknown corpus {args.name!r}; known: {', '.join(REGISTRY)} (python -m data.prepare --list)")
    source = REGISTRY[args.name]
    path = prepare(source, args.cache_dir, args.base_url, args.force, progress=not args.quiet)
    print(f"{source.name}: {path} ({path.stat().st_size:,} bytes). License {source.license}; "
          f"cite {source.citation}", file=sys.stderr)
    print(f"data.path={path}")


if __name__ == "__main__":
    run_cli(main)
