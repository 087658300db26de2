"""An unexpected failure as one line: what failed, where, and the file that holds the full traceback.

Design choices:
- The traceback goes whole to a file the line names (the run folder, else the temp folder): a bug report needs it.
- A file-system error while Hydra makes the run folder is the user's to fix: a line naming the path, no file."""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACEBACK_NAME = "traceback.txt"


def _script() -> str:
    return Path(sys.argv[0]).name or "kochar-gpt"


def write_traceback(text: str, folder: str | Path | None = None) -> str:
    """Write `text` into `folder` (when it is an existing folder) or a new file in the temp folder -> its path."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    places = [Path(folder) / TRACEBACK_NAME] if folder and Path(folder).is_dir() else []
    places.append(Path(tempfile.gettempdir()) / f"kochar-gpt-traceback-{stamp}-{os.getpid()}.txt")
    for path in places:
        try:
            path.write_text(text, encoding="utf-8")
            return str(path)
        except OSError:
            continue
    return "nowhere (the temp folder is not writable; set KOCHAR_DEBUG=1 to see it here)"


def _where(exc: BaseException) -> str:
    """` in <file>:<line> (<function>)` for the innermost frame of this project's own code, if any."""
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if Path(f.filename).resolve().is_relative_to(ROOT) and ".venv" not in Path(f.filename).parts
    ]
    if not frames:
        return ""
    f = frames[-1]
    return f" in {Path(f.filename).resolve().relative_to(ROOT)}:{f.lineno} ({f.name})"


def unexpected_error_line(exc: BaseException, folder: str | Path | None = None) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    detail = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return f"{_script()} failed{_where(exc)} ({detail}); the full traceback is in {write_traceback(text, folder)}"


_OS_ERROR = re.compile(r"^(\w+Error): \[Errno (\d+)\] ([^:\n]+): '([^\n]*)'$", re.MULTILINE)
_LAST_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit)): ?(.*)$", re.MULTILINE)


def fold_traceback_report(report: str) -> str:
    """Hydra's printed traceback (a failure before the job ran) as one line."""
    oserror = list(_OS_ERROR.finditer(report))
    if oserror:
        _, _, reason, path = oserror[-1].groups()
        return (
            f"cannot create or write {path}: {reason}; choose a folder you can write to "
            f"(hydra.run.dir=...), or check the disk"
        )
    exceptions = list(_LAST_EXCEPTION.finditer(report))
    detail = f"{exceptions[-1].group(1)}: {exceptions[-1].group(2).strip()}" if exceptions else "see the traceback"
    return f"{_script()} failed before it started ({detail}); the full traceback is in {write_traceback(report)}"
