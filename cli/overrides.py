"""Command-line overrides made ready for Hydra's grammar before Hydra reads them, and paths printed to paste back.

Design choices:
- Hydra refuses what users type (`prompt=안녕`, `~/novels.txt`, spaces in a path): argv is rewritten, not users taught.
- Only `PATH_KEYS` are expanded and quoted: a path is never a list, number or interpolation; `-m` commas still split.
- A printed path is quoted only where bash needs it, so it pastes back into `ckpt=` or `train.resume=` as it stands."""

from __future__ import annotations

import os
import re
import shlex

PATH_KEYS = frozenset(
    {"data.path", "data.cache_dir", "ckpt", "train.resume", "hydra.run.dir", "hydra.sweep.dir", "runs_dir"}
)
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_./+@%:-]+")  # what Hydra reads, unquoted, as exactly this text
_TYPED_VALUE = re.compile(r"[-+]?[\d._]*(e[-+]?\d+)?|true|false|null|[-+]?(nan|inf)", re.IGNORECASE)  # not text
_OVERRIDE = re.compile(r"([+~]{0,2})([\w./@-]+)=(.*)", re.DOTALL)
_SWEEP_FUNCTIONS = ("choice(", "range(", "glob(", "interval(", "tag(", "shuffle(", "sort(")


def _quote(value: str) -> str:
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def hydra_quote(value: str) -> str:
    """`value` as a single-quoted Hydra string that parses back to exactly `value`: a quote is escaped, and so
    is a run of backslashes before a quote or at the end; `${` is escaped so a path is never interpolated."""
    text = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, value)
    return "'" + text.replace("'", "\\'").replace("${", "\\${") + "'"


def _unquote(value: str) -> str | None:
    """The text of a Hydra-quoted value (`'a b'`, `"a b"`), or None when `value` is not one quoted string."""
    if len(value) < 2 or value[0] not in "'\"" or value[-1] != value[0]:
        return None
    body = value[1:-1]
    if re.search(rf"(?<!\\)(\\\\)*{value[0]}", body):  # an unescaped quote inside: not a single string
        return None
    return re.sub(r"\\(\\|'|\")", r"\1", body)


def _path_value(value: str) -> str:
    """One path value, expanded, and quoted for Hydra when its grammar would not read it as typed."""
    if value in ("", "null") or value.startswith(_SWEEP_FUNCTIONS):
        return value
    text = _unquote(value)
    if text is None and value[0] in "'\"":
        return value  # malformed quoting: let Hydra's own error name it
    # `~`, `~user`, `$HOME` and `${HOME}` at the start of a path, as the shell would have expanded them
    path = os.path.expanduser(re.sub(r"^\$(HOME\b|\{HOME\})", "~", value if text is None else text))
    plain = _PLAIN_VALUE.fullmatch(path) and not _TYPED_VALUE.fullmatch(path)
    return path if plain else hydra_quote(path)


def _prepared(arg: str, multirun: bool) -> str:
    """One override made ready for Hydra: a `PATH_KEYS` value expanded, and quoted where Hydra would not read it as
    typed; then a non-ASCII value (`prompt=안녕`) quoted; under `-m` each comma-separated sweep value on its own."""
    m = _OVERRIDE.fullmatch(arg)
    if arg.startswith("-") or m is None:
        return arg
    prefix, key, value = m.groups()
    if key in PATH_KEYS and prefix != "~":
        parts = value.split(",") if multirun and _unquote(value) is None else [value]
        value = ",".join(_path_value(p) for p in parts)
    if value and value[0] not in "'\"[(" and not value.isascii():
        value = ",".join(_quote(p) for p in (value.split(",") if multirun else [value]))
    return f"{prefix}{key}={value}"


def prepare_overrides(argv: list[str]) -> list[str]:
    """Everything an entry script does to its argv before Hydra parses it: paths, then Hangul values."""
    multirun = any(a in ("-m", "--multirun") for a in argv)
    return [_prepared(arg, multirun) for arg in argv]


def shell_path(path: object) -> str:
    text = str(path)
    return text if re.fullmatch(r"[\w@%+=:,./-]+", text) else shlex.quote(text)
