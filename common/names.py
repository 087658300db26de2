"""Names as they can be shown: a file name that is not valid UTF-8 reaches Python as lone surrogates (os.fsdecode).

Design choice: shown as U+FFFD wherever a name is written for people or programs (as `ls` and `git` do); the
original string is kept wherever the name opens the file."""

from __future__ import annotations


def shown_name(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (unchanged when it has none)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:  # every surrogate one that `surrogateescape` made from a byte (U+DC80..U+DCFF)?
        escaped = all(not 0xD800 <= ord(c) <= 0xDFFF or 0xDC80 <= ord(c) <= 0xDCFF for c in text)
        return text.encode("utf-8", "surrogateescape" if escaped else "surrogatepass").decode("utf-8", "replace")


def shown_names(value):
    """`shown_name` through dicts, lists and tuples (a config or a JSON result), other values as they are."""
    if isinstance(value, str):
        return shown_name(value)
    if isinstance(value, dict):
        return {shown_names(k): shown_names(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(shown_names(v) for v in value)
    return value
