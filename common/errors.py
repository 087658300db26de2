"""One error type for user mistakes, one for a stopping signal: entry scripts print each as one line with its exit
code (on a line of its own: `close_bars`); any other exception is our bug and keeps its traceback."""

from __future__ import annotations

import sys


class UserError(Exception):
    """A mistake the user can fix (a bad path or value, a foreign file): its message is one line saying how."""

    exit_code = 2


class ConfigError(UserError, ValueError):
    """A configuration value out of range. Also a ValueError, so Python callers that build a model or a
    config with a bad argument get the exception they expect."""


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM answered at once (training/guards/signals.py, during a wait that may be cut short): a
    KeyboardInterrupt, so whatever cleans up after Ctrl-C cleans up after it, with the signal's exit code and line."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.exit_code = 143 if signal_name == "SIGTERM" else 130
        self.line = "terminated" if signal_name == "SIGTERM" else "interrupted"


def close_bars() -> None:
    """Close every progress bar, so the line printed next starts its own line and no bar is drawn after it (one left
    open draws itself again as the process ends)."""
    tqdm = getattr(sys.modules.get("tqdm"), "tqdm", None)  # never imported here: without it there is no bar
    for bar in list(getattr(tqdm, "_instances", ())):
        bar.close()


_CAUSES = {
    "ENOSPC": "the disk is full",
    "EDQUOT": "the disk quota is used up",
    "EFBIG": "the file grew past the file system's or the process's file-size limit (the disk may be full)",
    "EROFS": "the file system is read-only",
    "EACCES": "permission denied",
    "EPERM": "permission denied",
    "ENOTDIR": "a part of the path is a file, not a folder",
    "ENAMETOOLONG": "a name in the path is too long for the file system",
    "ELOOP": "the path runs through a loop of symbolic links",
    "ENOENT": "it does not exist (any more)",
    "ENOTEMPTY": "the folder is not empty",
    "EEXIST": "it already exists",
}


def os_error_cause(e: BaseException) -> str:
    """A file-system failure in a few plain words ("the disk is full"), from its errno when it has one."""
    import errno
    import re

    code = getattr(e, "errno", None)
    if code is None:  # libraries written in Rust or C++ (safetensors, torch) put the errno in their message
        found = re.search(r"os error (\d+)|\[Errno (\d+)\]", str(e))
        code = int(next(g for g in found.groups() if g)) if found else None
    name = errno.errorcode.get(code, "") if code is not None else ""
    if name in _CAUSES:
        return _CAUSES[name]
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return first[:200]
