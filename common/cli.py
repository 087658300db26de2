"""How entry scripts report user mistakes: one line on stderr, a non-zero exit, no traceback.

Tracebacks are for our bugs; set KOCHAR_DEBUG=1 (or HYDRA_FULL_ERROR=1) to see them for user errors too.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import TypeVar

from common.errors import UserError

T = TypeVar("T")


def debug_enabled() -> bool:
    return os.environ.get("KOCHAR_DEBUG", "") not in ("", "0") or os.environ.get("HYDRA_FULL_ERROR") == "1"


def fail(message: str, code: int = 2) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def _quote(value: str) -> str:
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def quote_non_ascii_overrides(argv: list[str]) -> list[str]:
    """Hydra's override grammar rejects unquoted Hangul (`prompt=안녕`); quote such values for it.

    Values already quoted, and ASCII values, pass unchanged. In a multirun (`-m`) a comma separates
    sweep values, so each one is quoted on its own.
    """
    multirun = any(a in ("-m", "--multirun") for a in argv)
    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if (not sep or arg.startswith("-") or not value or value[0] in "'\"[(" or value.isascii()
                or not re.fullmatch(r"[+~]{0,2}[\w./@-]+", key)):
            out.append(arg)
            continue
        parts = value.split(",") if multirun else [value]
        out.append(key + "=" + ",".join(_quote(p) for p in parts))
    return out


def run_cli(fn: Callable[[], T]) -> T:
    """Run `fn`; turn a UserError into `error: <message>` and its exit code."""
    try:
        return fn()
    except UserError as e:
        if debug_enabled():
            raise
        fail(" ".join(str(e).split()), e.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
