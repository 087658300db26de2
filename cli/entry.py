"""How entry scripts start and report user mistakes: one line, a non-zero exit, no traceback (that is for our bugs)."""

from __future__ import annotations

from cli.interrupts import debug_enabled, from_interrupt, held, release  # first: Ctrl-C is one line from here

import functools
import io
import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import TypeVar

from cli.overrides import prepare_overrides, shell_path  # noqa: F401 - shell_path re-exported for train.py
from common.errors import UserError, close_bars

T = TypeVar("T")


def _refuse_spaced_debug() -> None:
    """KOCHAR_DEBUG with spaces around it (' 0' would turn tracebacks on) is one line, as for every variable."""
    from common.config_checks import environment

    try:
        environment("KOCHAR_DEBUG")
    except UserError as e:
        fail(str(e))


def fail(message: str, code: int = 2) -> None:
    from common.names import shown_name  # a file name that is not UTF-8 shows U+FFFD, as everywhere else

    print(f"error: {shown_name(message)}", file=sys.stderr, flush=True)
    sys.exit(code)


def one_line_warning(message, category, filename, lineno, line=None) -> str:
    from common.names import shown_name

    return "warning: " + shown_name(" ".join(str(message).split())) + "\n"


class _HeldStderr:
    """Stderr held until the job starts, so `run_hydra` can fold Hydra's many-line report of a mistake into one line."""

    def __init__(self, real):
        self.real, self.buffer, self.held = real, io.StringIO(), True

    def write(self, text: str) -> int:
        return (self.buffer if self.held else self.real).write(text)

    def flush(self) -> None:
        if not self.held:
            self.real.flush()

    def __getattr__(self, name):  # isatty, fileno, encoding, ... of the real stream
        return getattr(self.real, name)

    def release(self, keep: bool = True) -> None:
        if self.held:
            self.held = False
            if keep and self.buffer.getvalue():
                self.real.write(self.buffer.getvalue())
                self.real.flush()
        if sys.stderr is self:
            sys.stderr = self.real


_held_stderr: _HeldStderr | None = None


def hydra_report_line(text: str, argv: list[str] | None = None) -> str:
    """Hydra's multi-line error report as one line; `argv`: the overrides it is about (default: the command line's)."""
    argv = sys.argv[1:] if argv is None else argv
    if "Traceback (most recent call last)" in text:  # not a message: a failure before the job started
        from cli.crash_report import fold_traceback_report

        return fold_traceback_report(text)
    parts: list[str] = []
    listing = False
    for line in text.splitlines():
        if not line.strip() or line.startswith("Set the environment variable HYDRA_FULL_ERROR"):
            continue
        if line.startswith("Config search path"):
            break
        if line[0].isspace():  # an option under "Available options in ...:", or a detail we drop
            if listing:
                parts[-1] += (" " if parts[-1].endswith(":") else ", ") + line.strip()
            continue
        parts.append(line.strip().rstrip("."))
        listing = line.rstrip().endswith(":")
    unknown = re.search(r"Could not (?:override|append to config)[^']*'([^']+)'", text) or re.search(
        r"Key '[^']+' not in '\w+'\s+full_key: (\S+)", text
    )
    if unknown and ("is not in struct" in text or "not in '" in text):  # the usual case: a misspelt key
        return f"unknown config key {unknown.group(1).lstrip('+')}; check its spelling (--help lists every key)"
    if typed := _type_error(text, argv):
        return typed
    grammar = re.search(r"\s*See (https://hydra\.cc/\S+override_grammar\S*)", text)
    bad = _unparsable_override(argv) if grammar else None
    if bad is not None:
        reason = "; ".join(p for p in parts if not p.startswith("See https://"))
        return (
            f"cannot parse the override {bad!r} ({reason}); quote values that hold brackets, commas, spaces "
            f"or quotes, e.g. key='[a, b]' (see {grammar.group(1)})"
        )
    return ("; ".join(parts) or "invalid command line") + " (--help lists the config groups and keys)"


def _type_error(text: str, argv: list[str]) -> str | None:
    """A value the schema's type refuses (`train.lr=abc`, `model.num_heads=2.5`), as one line naming the key."""
    full_key = re.search(r"full_key: (\S+)", text)
    reason = re.search(
        r"(Value '.*' (?:of type '\w+' )?could not be converted to \w+|"
        r"Value '.*' is not a valid \w+|field '.*' is not Optional|"
        r"Non optional field cannot be assigned None)",
        text,
    )
    if not (full_key and reason):
        return None
    key = full_key.group(1)
    if "None" in reason.group(1) or "Optional" in reason.group(1):
        return f"{key} cannot be null: give it a value (--help shows its default)"
    boolean = "true or false (yes/no, on/off)"
    need = {"Integer": "an integer", "Float": "a number", "Boolean": boolean, "bool": boolean, "String": "text"}.get(
        re.search(r"(?:converted to|is not a valid) (\w+)", reason.group(1)).group(1), ""
    )
    value = next((a.split("=", 1)[1] for a in reversed(argv) if a.lstrip("+~").split("=", 1)[0] == key), None)
    shown = f"{key}={value}" if value is not None else key
    return f"{shown} is invalid: it must be {need or 'of the type ' + reason.group(1)}"


def config_object(cfg, cls: type[T]) -> T:
    """The composed config as its schema dataclass (`__post_init__` checks ranges); a failing value: one UserError."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from common.config_checks import boolean_overrides

    release()  # Hydra's start-up is over: a Ctrl-C held during it ends the command here, inside the job
    # the job's overrides as typed; none when composing outside a job, as tests do
    boolean_overrides(cls, list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else [])
    try:
        obj = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{key + ': ' if key else ''}{first}") from None
    if not isinstance(obj, cls):
        raise TypeError(f"expected a {cls.__name__} config, got {type(obj).__name__}")
    return obj


def _unparsable_override(argv: list[str]) -> str | None:
    """The first command-line override Hydra's grammar rejects (its own message does not always say which)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for arg in argv:
        if arg.startswith("-"):
            continue
        try:
            parser.parse_override(arg)
        except Exception:  # noqa: BLE001 - any parse failure marks the culprit
            return arg
    return None


def run_hydra(main: Callable[[], object]) -> None:
    """Call a `@hydra.main` function so that Hydra's own errors end as one `error:` line and exit code 2, as ours do."""
    global _held_stderr
    _refuse_spaced_debug()
    with held():  # a Ctrl-C while Hydra starts the job is raised once the job has its config (config_object)
        if debug_enabled():
            os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra prints the whole traceback only when asked this way
            main()
            return
        _held_stderr = stderr = _HeldStderr(sys.stderr)
        sys.stderr = stderr
        try:
            main()
        except SystemExit as e:
            if stderr.held and e.code not in (0, None):
                report = stderr.buffer.getvalue()
                stderr.release(keep=False)
                fail(hydra_report_line(report))
            raise
        finally:
            stderr.release()


def run_cli(fn: Callable[[], T], traceback_dir: str | os.PathLike | None = None) -> T:
    """Run `fn`: a UserError becomes `error: <message>`, any other exception a line naming its traceback's file."""
    if _held_stderr is not None:
        _held_stderr.release()  # the job has started: from here on stderr is live
    _refuse_spaced_debug()
    if not debug_enabled():
        warnings.formatwarning = one_line_warning
    try:
        return fn()
    except KeyboardInterrupt as e:  # Ctrl-C; or training/guards/signals.py's Interrupted, SIGTERM's included
        close_bars()
        print(getattr(e, "line", "interrupted"), file=sys.stderr)
        sys.exit(getattr(e, "exit_code", 130))
    except Exception as e:  # noqa: BLE001 - a user's mistake, or our bug: one line here, the traceback in a file
        if debug_enabled():
            raise
        close_bars()
        if isinstance(e, UserError):
            fail(" ".join(str(e).split()), e.exit_code)
        if from_interrupt(e):
            print("interrupted", file=sys.stderr)
            sys.exit(130)
        from cli.crash_report import unexpected_error_line

        fail(unexpected_error_line(e, traceback_dir), 1)


def hydra_script(name: str, schema: type[T], run: Callable[[T], object], summary: str, examples: Sequence[str]) -> None:
    """Run an entry script: argv made ready for Hydra, configs/<name>.yaml composed into `schema` for `run`."""
    import hydra

    from cli.help_text import CONFIGS, register_help

    register_help(name, summary, examples)

    @hydra.main(config_path=str(CONFIGS), config_name=name, version_base="1.3")
    @functools.wraps(run)  # Hydra names the job after the file that defines the function: the script's name
    def main(cfg) -> None:
        run_cli(lambda: run(config_object(cfg, schema)))

    sys.argv[1:] = prepare_overrides(sys.argv[1:])
    run_hydra(main)
