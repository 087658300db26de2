"""Export's libraries are optional: a missing one is one line naming the command that installs it, and the
scripts that do not export never import them."""

import subprocess
import sys

import pytest

from common.errors import UserError
from hf_format.deps import INSTALL, require
from tests.helpers import ROOT


def test_a_missing_library_is_one_line_naming_the_install_command():
    with pytest.raises(UserError) as e:
        require("safetensors_that_is_not_installed.torch")
    assert INSTALL in str(e.value) and "\n" not in str(e.value)


def test_training_and_sampling_never_import_transformers():
    code = (
        "import sys, train, generate, evaluate, serve, inference.loading, playground.app; "
        "print(sorted(m for m in ('transformers', 'safetensors', 'tokenizers') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr[-1000:]
