"""Fetch one file over http(s):// or file://, resumably, and give it its final name only once it is sound.

Design choices:
- Bytes go to `<file>.part`, resumed with an HTTP Range request; a body short of its Content-Length is kept to resume.
- `Limits` bound the size (an endless body stops) and the speed over each `slow_seconds` (the socket's timeout only
  catches a mirror that sends nothing); a full disk is named with what to free, not "run again".
- `validate`, then a pinned SHA-256, before the atomic final name; a body that fails is deleted, and a resumed one
  fetched once more from the start (the old partial bytes may be what is wrong).
"""

from __future__ import annotations

import errno
import http.client
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit
from urllib.request import Request, urlopen

from common.atomic_files import atomic_rename, file_sha256
from common.errors import UserError, os_error_cause

TIMEOUT_SECONDS = 60
MIN_SPEED = 1024  # bytes per second: a mirror slower than this for SLOW_SECONDS is given up on (--min-speed)
SLOW_SECONDS = 60
_BLOCK = 1 << 16
SCHEMES = ("http", "https", "file")
DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}


@dataclass(frozen=True)
class Limits:
    """What a download may cost: its size, and how slow a mirror may be before it is given up on."""

    max_bytes: int | None = None  # a body larger than this is refused (None: no bound)
    min_speed: float = MIN_SPEED  # bytes per second, averaged over each `slow_seconds`
    slow_seconds: float = SLOW_SECONDS


class BadContent(ValueError):
    """A downloaded or cached file is not what it claims to be; the message says why, in a few words."""


def base_url_of(text: str, option: str = "--base-url") -> str:
    """`text` as a base URL ending in "/": an http(s):// or file:// URL, or an existing local folder."""
    scheme = urlsplit(text).scheme.lower()
    if scheme in SCHEMES:
        return text.rstrip("/") + "/"
    folder = Path(text).expanduser()
    if folder.is_dir():
        return folder.resolve().as_uri() + "/"
    if len(scheme) > 1:  # one letter is a Windows drive, not a scheme
        raise UserError(
            f"{option} {text}: {scheme}:// is not supported; use http://, https://, file:// or a local folder"
        )
    raise UserError(
        f"{option} {text} is neither a URL nor an existing folder; pass an http(s):// or file:// "
        "URL, or the folder that holds the files"
    )


def download(
    url: str,
    dest: Path,
    expected_sha256: str | None = None,
    timeout: float = TIMEOUT_SECONDS,
    validate: Callable[[Path], object] | None = None,
    mismatch_hint: str = "",
    limits: Limits = Limits(),
) -> str:
    """Fetch `url` to `dest`, resuming `dest.part`; return its SHA-256. A body that `validate` refuses (raising
    `BadContent`) or that does not match `expected_sha256` is deleted, and one UserError raised."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    resumed = _fetch(url, part, timeout, limits)
    try:
        if validate is not None:
            try:
                validate(part)
            except BadContent as e:
                raise UserError(
                    f"{url} did not send a usable file: {e}; it was deleted and nothing was recorded "
                    "(check --base-url, or try again later)"
                ) from None
        digest = file_sha256(part)
        if expected_sha256 and digest != expected_sha256:
            raise UserError(
                f"checksum mismatch for {url}: expected sha256 {expected_sha256}, got {digest}; the "
                "download was deleted (the file on the server changed, or it was corrupted on the "
                f"way){mismatch_hint}"
            )
    except UserError:
        part.unlink(missing_ok=True)
        if resumed:  # the old partial bytes may be what is wrong: try once from the start
            return download(url, dest, expected_sha256, timeout, validate, mismatch_hint, limits)
        raise
    atomic_rename(part, dest)
    return digest


def _fetch(url: str, part: Path, timeout: float, limits: Limits) -> bool:
    """Complete `part` from `url`; return whether earlier bytes were kept (a resumed download)."""
    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "kochar-gpt (python urllib)"}
    if have:
        headers["Range"] = f"bytes={have}-"
    try:
        response = urlopen(Request(url, headers=headers), timeout=timeout)
    except HTTPError as e:
        if e.code == 416 and have:  # the partial file is not a prefix the server recognises: start over
            part.unlink()
            return _fetch(url, part, timeout, limits)
        raise UserError(f"cannot download {url}: HTTP {e.code} {e.reason}") from None
    except (URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        raise UserError(
            f"cannot download {url}: {reason} (check the connection, or point --base-url at a mirror)"
        ) from None
    with response:
        resumed = have > 0 and getattr(response, "status", None) == 206
        start = have if resumed else 0  # a server that ignores Range sends the whole file again
        length = response.headers.get("Content-Length")
        expected_size = start + int(length) if length and length.isdigit() else None
        if limits.max_bytes is not None and expected_size is not None and expected_size > limits.max_bytes:
            part.unlink(missing_ok=True)
            raise UserError(
                f"{url} is {expected_size:,} bytes, more than the {limits.max_bytes:,} a file of this "
                "corpus can be (--max-file-mb); nothing was downloaded (check --base-url)"
            )
        written = _receive(url, response, part, start, resumed, expected_size, limits)
    if expected_size is not None and written != expected_size:
        raise UserError(
            f"download of {url} stopped at {written} of {expected_size} bytes (a Content-Length of "
            f"{expected_size:,}): it was cut short; run the same command again to resume it"
        )
    return resumed


def _receive(
    url: str, response, part: Path, start: int, resumed: bool, expected_size: int | None, limits: Limits
) -> int:
    """Append the body to `part` (from `start`) within `limits`; the bytes written in all."""
    read = getattr(response, "read1", None) or response.read  # read1: whatever arrived, so a trickle is timed
    written = start
    window = (time.monotonic(), written)  # start of the current speed window: (time, bytes by then)
    try:
        with part.open("ab" if resumed else "wb") as f:
            while block := read(_BLOCK):
                f.write(block)
                written += len(block)
                if limits.max_bytes is not None and written > limits.max_bytes:
                    f.close()
                    part.unlink(missing_ok=True)
                    raise UserError(
                        f"{url} sent more than {limits.max_bytes:,} bytes, more than a file of this "
                        "corpus can be (--max-file-mb); it was deleted (check --base-url)"
                    )
                window = _check_speed(url, window, written, limits)
    except (OSError, http.client.HTTPException) as e:  # reset, timeout, IncompleteRead: keep the bytes
        if getattr(e, "errno", None) in DISK_ERRORS:
            more = f" ({expected_size - written:,} more bytes are needed)" if expected_size else ""
            raise UserError(
                f"cannot save the download of {url} in {part.parent}: {os_error_cause(e)} after "
                f"{written:,} bytes{more}; free space there or pass --cache-dir=<a folder on another "
                "disk>, then run the same command again to resume it"
            ) from None
        raise UserError(
            f"download of {url} was interrupted after {written} bytes ({type(e).__name__}); "
            "run the same command again to resume it"
        ) from None
    return written


def _check_speed(url: str, window: tuple[float, int], written: int, limits: Limits) -> tuple[float, int]:
    """The speed window, restarted when `limits.slow_seconds` have passed at a good speed; UserError if not."""
    since, at = window
    elapsed = time.monotonic() - since
    if elapsed < limits.slow_seconds:
        return window
    if (written - at) / elapsed < limits.min_speed:
        raise UserError(
            f"{url} sent only {written - at:,} bytes in the last {elapsed:.0f} s, slower than "
            f"{limits.min_speed / 1024:g} KB/s (--min-speed): gave up; the {written:,} bytes received "
            "are kept, so run the same command again to resume it, or point --base-url at a mirror"
        )
    return time.monotonic(), written
