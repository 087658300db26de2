"""Range checks shared by the config dataclasses' `__post_init__` methods, with messages that name the key.

Types are Hydra's job (the dataclasses are its schema); these check what a type cannot say.
"""

from __future__ import annotations

import math

from common.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda", "mps")
MAX_SEED = 2**63 - 1


def positive_int(key: str, value: int | None, minimum: int = 1, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        need = {0: "an integer >= 0", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")
        raise ConfigError(f"{key}={value} is invalid: it must be {need}" + (" (or null)" if optional else ""))


def number_in(key: str, value: float | None, low: float, high: float, *, low_open: bool = False,
              high_open: bool = False, optional: bool = False) -> None:
    """`value` finite and within [low, high] (ends open where asked); None allowed when optional."""
    if value is None and optional:
        return
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        span = f"> {low}" if high == math.inf and low_open else f">= {low}" if high == math.inf else \
            f"in {lo}{low}, {high}{hi}"
        raise ConfigError(f"{key}={value} is invalid: it must be a finite number {span}"
                          + (" (or null)" if optional else ""))


def one_of(key: str, value: str | None, choices: tuple[str, ...], optional: bool = False) -> None:
    if value is None and optional:
        return
    if value not in choices:
        raise ConfigError(f"{key}={value} is invalid: use one of {', '.join(choices)}"
                          + (" (or null)" if optional else ""))


def device_name(key: str, value: str) -> None:
    base, _, index = str(value).partition(":")
    if base not in DEVICES or (index and not (base == "cuda" and index.isdigit())):
        raise ConfigError(f"{key}={value} is invalid: use one of {', '.join(DEVICES)} (or cuda:N)")


def seed(key: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ConfigError(f"{key}={value} is invalid: it must be an integer in [0, 2**63 - 1]")


BOOLEAN_WORDS = ("true", "false", "yes", "no", "on", "off")


def field_type(schema: type, dotted_key: str) -> object | None:
    """The annotated type of `a.b.c` in a tree of dataclasses (None when the key is not in it)."""
    import dataclasses
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
    """OmegaConf reads any integer as a boolean (2 means true); a boolean key takes only YAML's words."""
    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        if sep and field_type(schema, key) is bool and value.strip().strip("'\"").lower() not in BOOLEAN_WORDS:
            raise ConfigError(f"{key}={value} is invalid: it must be true or false (yes/no, on/off)")
