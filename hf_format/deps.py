"""The optional libraries export needs, imported on demand with a one-line error when missing."""

from __future__ import annotations

import importlib
from types import ModuleType

from common.errors import UserError

INSTALL = 'pip install "transformers>=4.45" "safetensors>=0.4" "tokenizers>=0.20"'


def require(module: str) -> ModuleType:
    """`import module`, or one UserError naming the command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        top = module.split(".")[0]
        raise UserError(
            f"{top} is not installed; it is needed to export or read Hugging Face folders: "
            f"{INSTALL} (or: pip install -r requirements-dev.txt)"
        ) from None
