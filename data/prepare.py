"""Download a public Korean corpus into a local cache and turn it into one training text file.

    python -m data.prepare koconovel [--cache-dir DIR] [--base-url URL] [--force]
    python -m data.prepare --list

Prints the `data.path=...` override to train on the prepared file (on stdout; progress goes to stderr).

Downloads are safe to interrupt: bytes go to `<file>.part`, a later run resumes it with an HTTP Range
request, and the file gets its final name (an atomic rename) only once complete and its SHA-256
checked. A registry entry may pin the SHA-256 of each file; where it does not (`sha256=None`), the first
download records it in `SHA256SUMS` beside the files (trust on first use) and every later download or
re-use is checked against that record. The prepared text is UTF-8, NFC, "\\n" line endings.
"""

from __future__ import annotations

from common.cli import run_cli

import argparse
import http.client
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.parse import quote
from urllib.request import Request, urlopen

from tqdm import tqdm

from common.errors import UserError
from data.corpus import file_sha256
from data.text import normalize

BASE_URL_ENV = "KOCHAR_CORPUS_BASE_URL"
TIMEOUT_SECONDS = 60
_BLOCK = 1 << 16


@dataclass(frozen=True)
class RemoteFile:
    path: str  # relative to the source's base URL; also where it is kept under the cache
    sha256: str | None = None  # None: recorded on first download


@dataclass(frozen=True)
class CorpusSource:
    name: str
    description: str
    license: str
    citation: str
    base_url: str
    files: tuple[RemoteFile, ...]
    extract: Callable[[str, str], str]  # (file path, file text) -> the plain text it holds
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
            parts.append(str(doc["text"]).strip("\n"))
        except (ValueError, KeyError, TypeError) as e:
            raise UserError(f"{path} line {n} is not a KoCoNovel text record ({e}); the source format changed, "
                            "or pass --force to download it again") from None
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
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kochar-gpt" / "corpora"


# -- downloading --------------------------------------------------------------------------------------
def download(url: str, dest: Path, expected_sha256: str | None = None, timeout: float = TIMEOUT_SECONDS) -> str:
    """Fetch `url` to `dest`, resuming `dest.part` if an earlier try left one; return the file's SHA-256.

    `dest` appears only complete and checked; a checksum mismatch deletes the download and raises.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "kochar-gpt (python urllib)"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        response = urlopen(Request(url, headers=headers), timeout=timeout)
    except HTTPError as e:
        if e.code == 416 and have:  # the partial file is not a prefix the server recognises: start over
            part.unlink()
            return download(url, dest, expected_sha256, timeout)
        raise UserError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
    except (URLError, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise UserError(f"cannot download {url}: {reason} (check the connection, or point --base-url at a mirror)") \
            from None
    with response:
        resumed = have > 0 and getattr(response, "status", None) == 206
        start = have if resumed else 0  # a server that ignores Range sends the whole file again
        length = response.headers.get("Content-Length")
        expected_size = start + int(length) if length and length.isdigit() else None
        written = start
        try:
            with part.open("ab" if resumed else "wb") as f:
                while block := response.read(_BLOCK):
                    f.write(block)
                    written += len(block)
        except (OSError, http.client.HTTPException) as e:  # reset, timeout, IncompleteRead: keep the bytes
            raise UserError(f"download of {url} was interrupted after {written} bytes ({type(e).__name__}); "
                            "run the same command again to resume it") from None
    if expected_size is not None and written != expected_size:
        raise UserError(f"download of {url} stopped at {written} of {expected_size} bytes; "
                        "run the same command again to resume it")
    digest = file_sha256(part)
    if expected_sha256 and digest != expected_sha256:
        part.unlink()
        if resumed:  # the old partial bytes may be what is wrong: try once from the start
            return download(url, dest, expected_sha256, timeout)
        raise UserError(f"checksum mismatch for {url}: expected sha256 {expected_sha256}, got {digest}; the "
                        "download was deleted (the file on the server changed, or it was corrupted on the way)")
    os.replace(part, dest)
    return digest


# -- checksums recorded on first download --------------------------------------------------------------
def _read_sums(path: Path) -> dict[str, str]:
    sums = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            digest, _, name = line.partition("  ")
            if digest and name:
                sums[name] = digest
    return sums


def _write_sums(path: Path, sums: dict[str, str]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{d}  {n}\n" for n, d in sorted(sums.items())), encoding="utf-8")
    os.replace(tmp, path)  # the format of `sha256sum`: check by hand with `sha256sum -c SHA256SUMS`


# -- preparing a corpus --------------------------------------------------------------------------------
def prepare(source: CorpusSource, cache_dir: str | Path | None = None, base_url: str | None = None,
            force: bool = False, progress: bool = True) -> Path:
    """Download (or re-use) every file of `source`, check it, and write the prepared text; return its path."""
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    folder = root / source.name
    raw = folder / "raw"
    try:
        raw.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create the corpus cache folder {folder}: {e.strerror or e} (pass --cache-dir)") \
            from None
    base = (base_url or os.environ.get(BASE_URL_ENV) or source.base_url).rstrip("/") + "/"
    sums_file = folder / "SHA256SUMS"
    sums = _read_sums(sums_file)
    output = folder / source.output
    texts, recorded = [], 0
    bar = tqdm(source.files, desc=f"{source.name}", unit="file", disable=not progress, file=sys.stderr,
               dynamic_ncols=True)
    for remote in bar:
        local = raw / remote.path
        expected = remote.sha256 or sums.get(remote.path)
        if force or not local.exists() or (expected and file_sha256(local) != expected):
            digest = download(base + quote(remote.path), local, expected)
            if not expected:
                sums[remote.path] = digest
                _write_sums(sums_file, sums)  # after each file: an interrupted run keeps what it verified
                recorded += 1
        elif not expected:
            sums[remote.path] = file_sha256(local)
            _write_sums(sums_file, sums)
        texts.append(source.extract(remote.path, local.read_text(encoding="utf-8-sig")))
    bar.close()
    if recorded:
        print(f"first download of {recorded} file(s) without a pinned checksum: their sha256 are recorded in "
              f"{sums_file}, and later downloads must match them", file=sys.stderr)
    text = normalize(source.separator.join(t.strip("\n") for t in texts)) + "\n"
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8", newline="\n")
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    (folder / "SOURCE.txt").write_text(
        f"{source.description}\n\nLicense: {source.license}\nCite: {source.citation}\nFrom: {base}\n", encoding="utf-8")
    return output


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m data.prepare", description=__doc__.split("\n\n")[0])
    p.add_argument("name", nargs="?", help=f"the corpus to prepare: {', '.join(REGISTRY)}")
    p.add_argument("--cache-dir", help=f"where corpora are kept (default {default_cache_dir()})")
    p.add_argument("--base-url", help=f"download from a mirror: http(s):// or file:// (or set {BASE_URL_ENV})")
    p.add_argument("--force", action="store_true", help="download every file again")
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
