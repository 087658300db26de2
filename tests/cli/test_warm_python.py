"""The warm interpreter (tests/warm_python.py) runs a command as a fresh `python` would: the same argv, `__name__`,
sys.path[0], working folder, environment, empty stdin, output (newlines translated as subprocess's text mode does),
exit code, signal and timeout; none of this project's modules imported before the script imports them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import _env
from tests.warm_python import WarmPython

PROBE = """\
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
print("argv", sys.argv[1:], "name", __name__, "path0", sys.path[0] == here or sys.path[0] == os.getcwd())
print("cwd", os.getcwd(), "env", os.environ.get("PROBE_VALUE"), "stdin", repr(sys.stdin.read()))
print("pid", os.getpid(), "parent", os.getppid(), "test", os.environ.get("PYTEST_CURRENT_TEST"))
print("ours imported", [m for m in ("model", "training", "inference", "tests") if m in sys.modules])
print("진행 50%\\r진행 100%\\r\\n끝", file=sys.stderr, flush=True)
mode = sys.argv[1]
if mode == "raise":
    raise ValueError("boom")
if mode == "signal":
    os.kill(os.getpid(), 15)
if mode == "interrupt":
    raise KeyboardInterrupt
if mode == "exit_text":
    sys.exit("끝내며 한 줄")
if mode == "unflushed":
    import atexit, threading
    kept = open("unflushed.txt", "w")
    kept.write("never closed")
    atexit.register(print, "atexit ran")
    threading.Thread(target=lambda: (__import__("time").sleep(0.5), print("thread finished"))).start()
    sys.exit(0)
if mode == "sleep":
    import time
    time.sleep(60)
sys.exit(int(mode))
"""


def _no_pids(stdout: str) -> str:
    return "\n".join(line for line in stdout.splitlines() if not line.startswith("pid "))


@pytest.fixture(scope="module")
def warm():
    env = {**_env(None), "PROBE_VALUE": "값"}
    w = WarmPython(env)
    yield w
    w.close()


@pytest.fixture
def probe(tmp_path) -> Path:
    (tmp_path / "probe.py").write_text(PROBE, encoding="utf-8")
    return tmp_path


def both(warm: WarmPython, command: list[str], cwd: Path):
    fresh = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=60, env=warm.env, stdin=subprocess.DEVNULL
    )
    return fresh, warm.run(command, cwd, 60)


@pytest.mark.parametrize("code", ["0", "3"])
def test_a_script_runs_as_a_fresh_interpreter_runs_it(warm, probe, code):
    fresh, warmed = both(warm, [sys.executable, str(probe / "probe.py"), code, "둘째"], probe)
    assert (warmed.returncode, _no_pids(warmed.stdout), warmed.stderr) == (
        fresh.returncode,
        _no_pids(fresh.stdout),
        fresh.stderr,
    )
    assert warmed.returncode == int(code)
    assert f"argv ['{code}', '둘째'] name __main__ path0 True" in warmed.stdout
    assert f"cwd {probe} env 값 stdin ''" in warmed.stdout and "ours imported []" in warmed.stdout
    assert warmed.stderr == "진행 50%\n진행 100%\n끝\n"


def test_a_module_runs_as_python_dash_m_runs_it(warm, probe):
    fresh, warmed = both(warm, [sys.executable, "-m", "probe", "0"], probe)
    assert (warmed.returncode, _no_pids(warmed.stdout), warmed.stderr) == (
        fresh.returncode,
        _no_pids(fresh.stdout),
        fresh.stderr,
    )
    assert "path0 True" in warmed.stdout


def test_an_exception_a_signal_and_a_ctrl_c_end_it_as_they_end_a_fresh_one(warm, probe):
    fresh, warmed = both(warm, [sys.executable, str(probe / "probe.py"), "raise"], probe)
    assert warmed.returncode == fresh.returncode == 1
    assert warmed.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1] == "ValueError: boom"
    fresh, warmed = both(warm, [sys.executable, str(probe / "probe.py"), "signal"], probe)
    assert warmed.returncode == fresh.returncode == -15
    fresh, warmed = both(warm, [sys.executable, str(probe / "probe.py"), "interrupt"], probe)
    assert warmed.returncode == fresh.returncode == -2
    assert warmed.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1] == "KeyboardInterrupt"
    fresh, warmed = both(warm, [sys.executable, str(probe / "probe.py"), "exit_text"], probe)
    assert (warmed.returncode, warmed.stderr) == (fresh.returncode, fresh.stderr)
    assert (warmed.returncode, warmed.stderr.splitlines()[-1]) == (1, "끝내며 한 줄")


def test_its_exit_waits_for_threads_runs_atexit_and_flushes_open_files(warm, probe):
    fresh, warmed = both(warm, [sys.executable, str(probe / "probe.py"), "unflushed"], probe)
    assert (warmed.returncode, _no_pids(warmed.stdout)) == (fresh.returncode, _no_pids(fresh.stdout))
    assert warmed.stdout.endswith("thread finished\natexit ran\n")
    assert (probe / "unflushed.txt").read_text() == "never closed"


def test_a_timeout_kills_the_command_as_subprocess_run_does(warm, probe):
    began = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        warm.run([sys.executable, str(probe / "probe.py"), "sleep"], probe, 1)
    assert time.monotonic() - began < 30
    assert "stdin ''" in caught.value.stdout


def test_the_server_ends_with_its_caller(probe):
    w = WarmPython(_env(None))
    assert w.run([sys.executable, str(probe / "probe.py"), "0"], probe, 60).returncode == 0
    w.close()
    assert w.server.returncode == 0 and not os.path.exists(w.path)


def test_cli_runs_a_command_with_its_own_environment_in_a_fresh_interpreter(probe, monkeypatch):
    from tests.helpers import cli

    assert "env 다른 값" in cli(str(probe / "probe.py"), "0", env={"PROBE_VALUE": "다른 값"}).stdout
    monkeypatch.setenv("PROBE_VALUE", "바뀐 값")  # changed after the warm interpreter started
    assert "env 바뀐 값" in cli(str(probe / "probe.py"), "0").stdout


def test_cli_runs_our_scripts_warm_in_every_test_with_that_test_s_name(probe, request):
    from tests.helpers import cli

    said = re.search(r"^pid \d+ parent (\d+) test (.*)$", cli(str(probe / "probe.py"), "0").stdout, re.M)
    assert int(said.group(1)) != os.getpid()  # forked by the warm interpreter's monitor, not started by pytest
    assert said.group(2) == f"{request.node.nodeid} (call)"  # pytest's variable as it is now, not at start
