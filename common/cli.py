"""How entry scripts report user mistakes: one line on stderr, a non-zero exit, no traceback.

Tracebacks are for our bugs; set KOCHAR_DEBUG=1 (or HYDRA_FULL_ERROR=1) to see them for user errors too.
"""

from __future__ import annotations

import os
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
