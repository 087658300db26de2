"""Range checks shared by the config dataclasses' `__post_init__` (types are Hydra's job), naming the key.

Design choices:
- A refused value is shown as typed (`shown_value`): `cpu ` is never shown as `cpu`, so never advised.
- Surrounding spaces are refused, never dropped, for every key and environment variable: Hydra drops unquoted ones,
  so those left were quoted on purpose, and dropping them in some places only made the rule unpredictable.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Container

from common.errors import ConfigError, UserError

DEVICES = ("auto", "cpu", "cuda", "mps")
MAX_SEED = 2**63 - 1


def is_whole(value: object, low: int = 0) -> bool:
    """An int (never a bool) of at least `low`."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def is_numeric(value: object) -> bool:
    """An int or a float, never a bool (a number in YAML's or JSON's sense)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_positive(value: object) -> bool:
    """A finite number above 0."""
    return is_numeric(value) and math.isfinite(value) and value > 0


def shown_value(value: object) -> str:
    """`value` as a message shows it, as typed: bare, or quoted (Python's repr) where it has any whitespace, is empty,
    or holds a character a line cannot show."""
    text = str(value)
    if isinstance(value, str) and (not text or not text.isprintable() or any(c.isspace() for c in text)):
        return repr(text)
    return text


def refusal(key: str, value: object, need: str, accepted: Container[str] | Callable[[str], bool] = ()) -> ConfigError:
    """The one line refusing `value` for `key` (`need`: what it takes); where the value without its surrounding
    spaces is `accepted` (words, or a test), the line says the spaces are the fault."""
    text = str(value)
    bare = text.strip()
    fits = accepted(bare) if callable(accepted) else bare in accepted
    if isinstance(value, str) and bare != text and fits:
        return ConfigError(
            f"{key}={shown_value(value)} is invalid: the spaces around it are part of the value; write {key}={bare}"
        )
    return ConfigError(f"{key}={shown_value(value)} is invalid: {need}")


def environment(name: str, choices: dict[str, str] | None = None) -> str:
    """The environment variable `name` ("" where unset). A value with surrounding spaces, or one not in `choices`
    ({value: what it does}, where given), is one UserError showing it as set and what it may be."""
    value = os.environ.get(name, "")
    bare = value.strip()
    if value == bare and (choices is None or value in choices or not value):
        return value
    spaces = ": the spaces around it are part of the value" if value != bare else ""
    if choices:
        ways = [f"{name}={v} ({what})" if v else f"leave it unset ({what})" for v, what in choices.items()]
        use = "use " + (f"{', '.join(ways[:-1])} or {ways[-1]}" if len(ways) > 1 else ways[0])
    else:
        use = f"write {name}={bare}" if bare else f"unset {name}"
    raise UserError(f"{name}={shown_value(value)} is not understood{spaces}; {use}")


def positive_int(key: str, value: int | None, minimum: int = 1, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not is_whole(value, minimum):
        need = {0: "an integer >= 0", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")
        raise ConfigError(
            f"{key}={shown_value(value)} is invalid: it must be {need}" + (" (or null)" if optional else "")
        )


def number_in(
    key: str,
    value: float | None,
    low: float,
    high: float,
    *,
    low_open: bool = False,
    high_open: bool = False,
    optional: bool = False,
) -> None:
    """`value` finite and within [low, high] (ends open where asked); None allowed when optional."""
    if value is None and optional:
        return
    ok = is_numeric(value) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        if high == math.inf:
            span = f"{'>' if low_open else '>='} {low}"
        else:
            span = f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ConfigError(
            f"{key}={shown_value(value)} is invalid: it must be a finite number {span}"
            + (" (or null)" if optional else "")
        )


def one_of(key: str, value: str | None, choices: tuple[str, ...], optional: bool = False) -> None:
    if value is None and optional:
        return
    if value not in choices:
        raise refusal(key, value, f"use one of {', '.join(choices)}" + (" (or null)" if optional else ""), choices)


def is_device(value: str) -> bool:
    base, _, index = str(value).partition(":")
    return base in DEVICES and (not index or base == "cuda" and index.isdigit())


def device_name(key: str, value: str) -> None:
    if not is_device(value):
        raise refusal(key, value, f"use one of {', '.join(DEVICES)} (or cuda:N)", is_device)


def seed(key: str, value: int) -> None:
    if not is_whole(value) or value > MAX_SEED:
        raise ConfigError(f"{key}={shown_value(value)} is invalid: it must be an integer in [0, 2**63 - 1]")


BOOLEAN_WORDS = ("true", "false", "yes", "no", "on", "off")


def field_type(schema: type, dotted_key: str) -> object | None:
    """The annotated type of `a.b.c` in a tree of dataclasses (None when the key is not in it)."""
    import dataclasses  # here, not at the top: cli.entry reads environment variables before anything slow
    import typing

    node: object = schema
    for part in dotted_key.split("."):
        if not dataclasses.is_dataclass(node):
            return None
        hints = typing.get_type_hints(node)
        if part not in hints:
            return None
        node = hints[part]
    return node


def boolean_overrides(schema: type, overrides: list[str]) -> None:
    """OmegaConf reads any integer as a boolean (2 means true); a boolean key takes only YAML's words. A number or a
    boolean quoted with spaces inside the quotes is refused as a word is (`refusal`), where OmegaConf drops them."""
    import typing

    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        kind = field_type(schema, key) if sep else None
        quoted = len(value) > 1 and value[0] == value[-1] and value[0] in "'\""
        inner = value[1:-1] if quoted else value
        if kind is bool:
            fits, need = (lambda w: w.lower() in BOOLEAN_WORDS), "it must be true or false (yes/no, on/off)"
        elif kind in (int, float) or set(typing.get_args(kind)) - {type(None)} in ({int}, {float}):
            fits, need = _is_number, "it must be a number"
        else:
            continue
        if inner != inner.strip() or not fits(inner) and kind is bool:
            raise refusal(key, inner if quoted else value, need, fits)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
