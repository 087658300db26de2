"""Downloading a corpus's files into the cache, validating them, and writing the prepared text (docs/en/corpora.md).

Design choices:
- Nothing is kept or recorded before it validates as what it claims to be (`CorpusSource.extract`).
- An unpinned file's first download that validates is recorded in `SHA256SUMS` (trust on first use); every later
  download or re-use must match, so a file changing on the server is noticed.
- `--force` trusts anew what validates (with a warning), because the user asked; a pinned checksum never changes.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path
from urllib.parse import quote

from tqdm import tqdm

from common.atomic_files import atomic_write, file_sha256, user_cache_dir
from common.config_checks import environment
from common.errors import UserError, os_error_cause
from data.download import MIN_SPEED, BadContent, Limits, base_url_of, download
from data.prepare.catalog import CorpusSource, RemoteFile
from data.text import normalize

BASE_URL_ENV = "KOCHAR_CORPUS_BASE_URL"


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
