"""The Makefile: `make help` documents every target, and TORCH=cpu installs from PyTorch's CPU index."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def make(*args: str) -> subprocess.CompletedProcess:
    # Under `make test` the outer make's flags would reach this one through the environment.
    outer = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "TORCH", "TORCH_SPEC")
    env = {k: v for k, v in os.environ.items() if k not in outer}
    return subprocess.run(
        ["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env
    )


def defined_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    # `name:` at the start of a line, but not `NAME := value` and not file targets such as $(VENV)/.installed
    return set(re.findall(r"^([a-z][a-z-]*):(?!=)", text, flags=re.M))


def test_help_is_the_default_and_lists_every_target_and_variable():
    out = make().stdout
    assert out == make("help").stdout
    targets = defined_targets()
    assert {"help", "setup", "train", "test", "bench"} <= targets
    listed = set(re.findall(r"^  ([a-z][a-z-]*) ", out, flags=re.M))
    assert targets <= listed, f"not in make help: {targets - listed}"
    variables = set(re.findall(r"^([A-Z_]+)\s*\?=", (ROOT / "Makefile").read_text(), flags=re.M))
    assert {"TORCH", "TORCH_SPEC", "VENV", "ARGS", "PYTHON"} <= variables
    for var in variables:
        assert re.search(rf"^  {var} ", out, flags=re.M), f"variable {var} is not in make help"
    assert "$(" not in out  # make variables are not printed unexpanded


def test_torch_cpu_installs_from_the_cpu_index_before_the_requirements(tmp_path):
    venv = f"VENV={tmp_path / 'venv'}"  # a fresh path: a dry run of an existing .venv would print nothing
    lines = make("-n", "setup", "TORCH=cpu", venv).stdout.splitlines()
    torch_line = next(i for i, line in enumerate(lines) if CPU_INDEX in line)
    assert "--index-url" in lines[torch_line] and '"torch"' in lines[torch_line]
    requirements = next(i for i, line in enumerate(lines) if "-r requirements-dev.txt" in line)
    assert torch_line < requirements
    pinned = make("-n", "setup", "TORCH=cpu", "TORCH_SPEC=torch==2.13.0", venv).stdout
    assert f'--index-url {CPU_INDEX} "torch==2.13.0"' in pinned


def test_default_install_and_torch_spec_do_not_use_the_cpu_index(tmp_path):
    venv = f"VENV={tmp_path / 'venv'}"
    assert CPU_INDEX not in make("-n", "setup", venv).stdout
    ci = make("-n", "setup", "TORCH_SPEC=torch==2.13.0", venv).stdout  # what .ci/run installs
    assert 'pip install -q "torch==2.13.0"' in ci and CPU_INDEX not in ci


def test_unknown_torch_build_is_one_error():
    proc = make("help", "TORCH=gpu")
    assert proc.returncode != 0
    assert "TORCH=gpu is not a known build" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "target,marks",
    [("test", "cpu_precision and not serial"), ("test-fast", "cpu_precision and not slow and not serial")],
)
def test_the_tests_run_again_on_the_cpu_precision_path_this_machine_does_not_take(tmp_path, target, marks):
    """Both CPU precision paths are proven on any machine (docs/en/training.md#precision-and-compile)."""
    lines = make("-n", target, f"VENV={tmp_path / 'venv'}").stdout.splitlines()
    tests = [line for line in lines if "-m pytest" in line]
    assert len(tests) == 3 and "--cpu-bf16=other" in tests[1] and f'-m "{marks}"' in tests[1]
    assert "$(grep -rl cpu_precision tests --include='test_*.py')" in tests[1]  # only the files that use the marker
    assert "--cpu-bf16" not in tests[0] + tests[2]
    assert "$(grep" not in make("-n", target, f"VENV={tmp_path / 'venv'}", "ARGS=-k x").stdout  # ARGS choose
