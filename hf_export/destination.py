"""Where an export goes: the folder `out=` names, checked before any work, assembled beside it, renamed in.

Design choices (docs/en/export.md, "What `out=` may be"):
- `overwrite=true` replaces only an empty folder or a previous export holding nothing else, as `git clone` refuses a
  folder that is not empty; a link is refused (a rename would replace the link, not its target).
- Assembled in a short-named hidden sibling, renamed in one step (a replaced one aside first): old or new, never a mix.
- One export per `out` at a time (an `flock`); the final rename never replaces a folder filled meanwhile. Modes are
  the umask's (mkdtemp and safetensors make them private).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common.errors import UserError, os_error_cause
from hf_format import FORMAT, RECORD

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no lock, the no-replace rename still protects
    fcntl = None

PREFIX = ".kochar-export."
# What an export writes (a newer record also lists its files: `files`).
EXPORT_FILES = {
    "README.md",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    RECORD,
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "configuration_kochar.py",
    "modeling_kochar.py",
    "tokenization_kochar.py",
    "kochar_vocab.json",
}


def fault(action: str, path: Path, e: BaseException, nothing: str = "nothing was written") -> UserError:
    """One line for a file-system failure: what failed, on which path, why, what is left."""
    return UserError(
        f"cannot {action} {path}: {os_error_cause(e)}; {nothing} (free space, fix the folder, or pass another out=)"
    )


def _name_max(folder: Path) -> int:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255


def _foreign_entries(out: Path) -> list[str] | None:
    """None when `out` holds no export record; else the entries an export does not write (empty: only its own)."""
    record = out / RECORD
    try:
        rec = json.loads(record.read_text(encoding="utf-8")) if record.is_file() and not record.is_symlink() else None
    except (OSError, ValueError):
        rec = None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        return None
    listed = rec.get("files")
    own = EXPORT_FILES | ({f for f in listed if isinstance(f, str)} if isinstance(listed, list) else set())
    return sorted(e.name for e in os.scandir(out) if e.name not in own or not e.is_file(follow_symlinks=False))


def _check_replaceable(out: Path, shown: str, overwrite: bool) -> None:
    if not any(out.iterdir()):
        return
    if not overwrite:
        raise UserError(
            f"out={shown} is not empty; pass another folder, or overwrite=true to replace a previous export there"
        )
    foreign = _foreign_entries(out)
    if foreign is None:
        raise UserError(
            f"out={shown} holds files but no export (no {RECORD} of a kochar-gpt export): overwrite=true "
            "replaces only a previous export or an empty folder; pass another folder"
        )
    if foreign:
        listed = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise UserError(
            f"out={shown} holds an export and also what an export never writes ({listed}); "
            "overwrite=true would delete them: move them away or pass another folder"
        )


def checked_destination(out: Path, source: Path | None, overwrite: bool) -> Path:
    """`out` made absolute, once every reason to refuse it has been ruled out; its parent exists."""
    shown, out = str(out), Path(os.path.abspath(out))
    if len(os.fsencode(out.name)) > _name_max(out.parent):
        raise UserError(
            f"out={shown}: the name {out.name[:40]}... is {len(os.fsencode(out.name))} bytes, more than "
            f"the file system allows ({_name_max(out.parent)}); pass a shorter name"
        )
    for above in reversed(out.parents):
        if above.exists() and not above.is_dir():
            raise UserError(f"out={shown} is below {above}, which is a file, not a folder; pass another folder")
    if out.is_symlink():
        raise UserError(
            f"out={shown} is a symbolic link (to {os.readlink(out)}); pass the folder itself or a new "
            "name: export neither writes through a link nor replaces one"
        )
    if out.exists() and not out.is_dir():
        raise UserError(f"out={shown} is a file; pass a folder to export into")
    if source is not None:
        held = source.resolve()
        if out.resolve() == held or out.resolve() in held.parents:
            raise UserError(
                f"out={shown} holds the run being exported ({source}); pass another folder: export "
                "never replaces its own source"
            )
    try:
        if out.is_dir():
            _check_replaceable(out, shown, overwrite)
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise fault("use the folder", Path(e.filename or out), e) from None
    return out


def remove_stale(parent: Path) -> None:
    """Delete the hidden folders of exports into `parent` whose process no longer runs."""
    for entry in parent.glob(PREFIX + "*"):
        pid = entry.name[len(PREFIX) :].split(".")[0]
        if not pid.isdigit() or int(pid) == os.getpid() or not entry.is_dir() or entry.is_symlink():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass  # another user's process: alive


@contextmanager
def export_lock(out: Path) -> Iterator[None]:
    """Held while one export writes `out`; a second export of the same `out` is refused."""
    if fcntl is None:
        yield
        return
    path = out.parent / f"{PREFIX}lock.{hashlib.sha256(os.fsencode(out.name)).hexdigest()[:16]}"
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            raise fault("create a lock file in", out.parent, e) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise UserError(
                f"another export is writing out={out} right now; wait for it to end, or pass another folder"
            ) from None
        if path.exists() and os.fstat(fd).st_ino == os.stat(path).st_ino:
            break
        os.close(fd)  # its last holder removed the file between our open and our lock: lock the new one
    try:
        yield
    finally:
        path.unlink(missing_ok=True)  # still locked here, so no one can lock a file about to vanish
        os.close(fd)


@contextmanager
def temporary_folder(out: Path) -> Iterator[Path]:
    """A new hidden folder beside `out`, removed on the way out whatever happens."""
    tmp = out.parent / f"{PREFIX}{os.getpid()}.{secrets.token_hex(4)}"
    try:
        tmp.mkdir(mode=0o777)  # the umask decides, as for any folder
    except OSError as e:
        raise fault("create a folder in", out.parent, e) from None
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _public_modes(folder: Path) -> None:
    mask = os.umask(0o022)  # the umask is read by setting it: put it back at once
    os.umask(mask)
    for f in folder.iterdir():
        f.chmod(0o666 & ~mask)
    folder.chmod(0o777 & ~mask)


def commit(tmp: Path, out: Path, overwrite: bool) -> None:
    """Name the complete folder `tmp` `out`, replacing a previous export (checked again: it may have changed)."""
    try:
        _public_modes(tmp)
        if out.is_symlink() or (out.exists() and not out.is_dir()):
            raise UserError(f"out={out} became a link or a file while the export was written; nothing was written")
        if out.is_dir() and any(out.iterdir()):
            _check_replaceable(out, str(out), overwrite)
            aside = tmp.with_name(tmp.name + ".old")
            out.rename(aside)
            try:
                tmp.rename(out)
            except BaseException:
                aside.rename(out)  # put the previous export back
                raise
            shutil.rmtree(aside, ignore_errors=True)
            return
        tmp.rename(out)  # POSIX: replaces an empty folder, never a filled one
    except OSError as e:
        if getattr(e, "errno", None) in (errno.ENOTEMPTY, errno.EEXIST):  # filled meanwhile
            raise UserError(
                f"out={out} was filled by something else while the export was written; nothing was "
                "replaced: pass another folder"
            ) from None
        raise fault("write the export to", out, e) from None
