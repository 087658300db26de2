"""The corpora `python -m data.prepare` knows (where each file lives, what it must hold, how to read it); downloading
their files into the cache, validating them, and writing the prepared text (docs/en/corpora.md).

Design choices:
- Every source is pinned to one commit, so its bytes (and recorded checksums) never change under us.
- `extract` turns a downloaded file into its plain text, or raises `BadContent`: nothing is trusted before that.
- Nothing is kept or recorded before it validates as what it claims to be (`CorpusSource.extract`).
- An unpinned file's first download that validates is recorded in `SHA256SUMS` (trust on first use); every later
  download or re-use must match, so a file changing on the server is noticed.
- `--force` trusts anew what validates (with a warning), because the user asked; a pinned checksum never changes.
"""

from __future__ import annotations

import json
import os
import re
import sys
import unicodedata
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from tqdm import tqdm

from common.atomic_files import atomic_write, file_sha256, user_cache_dir
from common.config_checks import environment
from common.errors import UserError, os_error_cause
from data.download import MIN_SPEED, BadContent, Limits, base_url_of, download
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
    documents: bool = True  # each file is one document: `--files` writes them one file each
    max_file_mb: float = 32  # a file larger than this is not the corpus's (an endless or wrong body): refused


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


# The 50 novels in the corpus's own order (list_of_novels.csv), at the commit that added the text.jsonl files.
_KOCONOVEL_NOVELS = (
    "1_Ms._B_and_Love_Letters",
    "2_A_Sweetheart",
    "3_A_Fictional_Rogue_Girl",
    "4_Wedding",
    "5_Kyung-hee",
    "6_A_Strange_Monk",
    "7_The_Woman",
    "8_Dark_Moon",
    "9_A_Field_of_Beans_Where_Gold_is_Buried",
    "10_Rich_Mine",
    "11_The_Daedong_River_Whispers",
    "12_City_and_Ghost",
    "13_Ddaraji",
    "14_Manmubang",
    "15_When_the_Sun_Rises",
    "16_When_Buckwheat_Flowers_Blossom",
    "17_Good_Sentences",
    "18_The_Unknown_Woman",
    "19_The_Mother_and_the_Son",
    "20_Anemone",
    "21_The_Death_of_Park_Chum-ji",
    "22_The_Mute_Samurai",
    "23_Spring_Spring",
    "24_The_Father_and_the_Son",
    "25_Fire",
    "26_A_Poverty-Stricken_Wife",
    "27_The_Son-in-Law",
    "28_A_Boy_s_Woes",
    "29_The_Calf",
    "30_Purehearted_Prince_Hodong",
    "31_Society_Authorizing_Alcohol",
    "32_The_Newspaper_and_the_Cage",
    "33_Miracles_of_Coincidence",
    "34_A_Lucky_Day",
    "35_Enemies_to_Benefactors",
    "36_Presence",
    "37_Girl_of_Doubt",
    "38_Eisig_and_Doseung",
    "39_The_Rose_is_Diseased",
    "40_Passionate_Princess_Nangnang",
    "41_Jeong-hee",
    "42_Youth",
    "43_The_Bachelor_and_the_Blind_Eel",
    "44_Escape_Chronicles",
    "45_Break_at_Dawn",
    "46_Sunrise",
    "47_Floral_Tribute",
    "48_The_Bull_and_the_Goblin",
    "49_Later_Baekje_Chronicles",
    "50_Baptism_of_Soil",
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

NSMC_HEADER = "id\tdocument\tlabel"


def _nsmc_text(path: str, raw: str) -> str:
    """NSMC's ratings.txt: a header, then `id<TAB>document<TAB>label` rows -> one review per line, whitespace
    folded, empty reviews and exact duplicates (after folding) dropped, in the file's order."""
    lines = raw.splitlines()
    if not lines or lines[0].strip() != NSMC_HEADER:
        raise BadContent(f"{path} does not start with NSMC's header line (id, document, label separated by tabs)")
    seen: set[str] = set()
    reviews = []
    for n, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 3 or not fields[0].strip().isdigit() or fields[-1].strip() not in ("0", "1"):
            raise BadContent(f"{path} line {n} is not an NSMC row (id, review, label 0 or 1, separated by tabs)")
        review = unicodedata.normalize("NFC", " ".join("\t".join(fields[1:-1]).split()))
        if review and review not in seen:
            seen.add(review)
            reviews.append(review)
    if not reviews:
        raise BadContent(f"{path} holds no review")
    return "\n".join(reviews)


NSMC = CorpusSource(
    name="nsmc",
    description="Naver Sentiment Movie Corpus v1.0: about 200,000 Korean movie reviews (informal, with "
    "emoticons and jamo-only laughter), one review per line, duplicates dropped",
    license="CC0 1.0 (https://creativecommons.org/publicdomain/zero/1.0/)",
    citation="Lucy Park (2016), Naver Sentiment Movie Corpus v1.0. https://github.com/e9t/nsmc",
    base_url="https://raw.githubusercontent.com/e9t/nsmc/e25115d10dc8eb9f9ea8b42b750ca13832deed57/",
    files=(RemoteFile("ratings.txt"),),
    extract=_nsmc_text,
    output="nsmc.txt",
    separator="\n",
    max_file_mb=128,  # ratings.txt is about 19 MB
    documents=False,
)

REGISTRY: dict[str, CorpusSource] = {s.name: s for s in (KOCONOVEL, NSMC)}


def default_cache_dir() -> Path:
    return user_cache_dir("corpora")


_DIGEST = re.compile(r"[0-9a-f]{64}")


def _read_sums(path: Path) -> dict[str, str]:
    """The records of `SHA256SUMS` (in `sha256sum`'s format, so `sha256sum -c SHA256SUMS` checks them by hand);
    damaged lines are skipped, so their files are checked as if new."""
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
        raise UserError(
            f"cannot write {path}: {os_error_cause(e)}; free space there or pass --cache-dir=<a writable "
            "folder on another disk>"
        ) from None


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
        raise UserError(f"{local} matches its recorded checksum but {e}; pass --force to download it again") from None


def _fetch(
    source: CorpusSource, remote: RemoteFile, url: str, local: Path, expected: str | None, limits: Limits
) -> tuple[str, str]:
    """Download `remote` to `local`; return (its text, its sha256)."""
    found: list[str] = []
    hint = "; pass --force to accept the new file" if expected and not remote.sha256 else ""
    digest = download(
        url,
        local,
        expected,
        validate=lambda part: found.append(_content(source, remote, part)),
        mismatch_hint=hint,
        limits=limits,
    )
    return found[-1], digest


def _base_url(source: CorpusSource, base_url: str | None) -> str:
    if base_url:
        return base_url_of(base_url)
    if environment(BASE_URL_ENV):  # spaces around it: one line (common/config_checks.py)
        return base_url_of(os.environ[BASE_URL_ENV], BASE_URL_ENV)
    return source.base_url.rstrip("/") + "/"


def _fetch_all(
    source: CorpusSource, folder: Path, base: str, force: bool, limits: Limits, progress: bool
) -> tuple[list[str], dict[str, int]]:
    """Every file of `source` re-used or downloaded and validated, in order, its checksum recorded in
    SHA256SUMS as it comes: (the texts, how many checksums were new or replaced)."""
    sums_file = folder / "SHA256SUMS"
    sums, texts, counts = _read_sums(sums_file), [], {"new": 0, "replaced": 0}
    bar = tqdm(
        source.files, desc=f"{source.name}", unit="file", disable=not progress, file=sys.stderr, dynamic_ncols=True
    )
    for remote in bar:
        local = folder / "raw" / remote.path
        recorded = sums.get(remote.path)
        expected = remote.sha256 or recorded
        text, digest = None if force else _reuse(source, remote, local, expected), None
        if text is None:  # --force trusts anew what validates, unless the registry pins it
            text, digest = _fetch(
                source, remote, base + quote(remote.path), local, remote.sha256 if force else expected, limits
            )
        elif not expected:
            digest = file_sha256(local)  # a kept copy never recorded, which has just validated
        if digest and not remote.sha256 and digest != recorded:
            counts["new" if recorded is None else "replaced"] += 1
            sums[remote.path] = digest  # saved after each file: an interrupted run keeps what it verified
            _write(sums_file, "".join(f"{d}  {n}\n" for n, d in sorted(sums.items())))
        texts.append(text)
    bar.close()
    return texts, counts


def prepare(
    source: CorpusSource,
    cache_dir: str | Path | None = None,
    base_url: str | None = None,
    force: bool = False,
    progress: bool = True,
    files: bool = False,
    min_speed_kb: float | None = None,
    max_file_mb: float | None = None,
) -> Path:
    """Download (or re-use) and validate every file of `source`, then write the prepared text; returns its path."""
    limits = Limits(
        max_bytes=int((max_file_mb or source.max_file_mb) * (1 << 20)),
        min_speed=(min_speed_kb * 1024) if min_speed_kb is not None else MIN_SPEED,
    )
    if files and not source.documents:
        raise UserError(
            f"{source.name} is one stream of short texts, not documents: --files is for corpora of "
            "documents (koconovel); drop --files"
        )
    folder = (Path(cache_dir).expanduser() if cache_dir else default_cache_dir()) / source.name
    try:
        (folder / "raw").mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(
            f"cannot create the corpus cache folder {folder}: {e.strerror or e} (pass --cache-dir)"
        ) from None
    base = _base_url(source, base_url)
    texts, counts = _fetch_all(source, folder, base, force, limits, progress)
    sums_file = folder / "SHA256SUMS"
    if counts["new"]:
        print(
            f"first download of {counts['new']} file(s) without a pinned checksum: they validated, and their "
            f"sha256 are recorded in {sums_file}; later downloads must match them",
            file=sys.stderr,
        )
    if counts["replaced"]:
        warnings.warn(
            f"--force: the recorded sha256 of {counts['replaced']} file(s) in {sums_file} changed to "
            "those of the new downloads, which validated",
            stacklevel=2,
        )
    output = write_documents(folder, source, texts) if files else folder / source.output
    if not files:
        _write(output, normalize(source.separator.join(t.strip("\n") for t in texts)) + "\n")
    _write(
        folder / "SOURCE.txt",
        f"{source.description}\n\nLicense: {source.license}\nCite: {source.citation}\nFrom: {base}\n",
    )
    return output


def write_documents(folder: Path, source: CorpusSource, texts: list[str]) -> Path:
    """One file per document under `folder/files/`, named so that sorted path order is the source's order."""
    out = folder / "files"
    out.mkdir(parents=True, exist_ok=True)
    width = len(str(len(texts)))
    for i, (remote, text) in enumerate(zip(source.files, texts, strict=True), 1):
        name = Path(remote.path).parent.name or Path(remote.path).stem
        _write(out / f"{i:0{width}d}_{name}.txt", normalize(text.strip("\n")) + "\n")
    return out
