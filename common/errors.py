"""One error type for user mistakes.

Entry scripts turn a `UserError` into one line on stderr and a non-zero exit; any other exception is our
bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix (bad path, bad config value, foreign checkpoint, ...).

    The message must fit on one line and say how to fix the problem.
    """

    exit_code = 2


class ConfigError(UserError, ValueError):
    """A configuration value out of range. Also a ValueError, so Python callers that build a model or a
    config with a bad argument get the exception they expect."""
