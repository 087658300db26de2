"""A warm interpreter for the tests' command lines: `python script.py args` without importing torch again.

Most of a tiny command-line run is spent importing torch and Hydra, and the suite runs hundreds of them. This
file is a server, one per pytest process, that imports those libraries once and then forks one child per
command. The child becomes the command: its own process with the script's argv, working folder and
environment, stdin from /dev/null, stdout and stderr on the caller's pipes, the script run as `__main__`, and
the exit code (or the signal that killed it) reported back. Nothing of this project is imported before the
fork, so every run imports the project's code afresh, as a real run does.

Design choices:
- Fork twice: the server forks a monitor per command, the monitor forks the command and waits for it. The
  server stays one thread (forking a threaded process is unsafe) and never waits on anything but `accept`.
- The server imports only third-party libraries and runs no torch operation before forking: no thread pool
  exists yet to be lost in the child.
- The caller (tests/helpers.py) uses it only when the command's environment is the one the server started
  with (but for NOT_AT_START, such as PYTEST_CURRENT_TEST, which the command gets as they are now), so
  anything read at interpreter start (encodings, PYTHON* and thread variables) is what the command would have
  read itself; otherwise it starts a real process. `KOCHAR_TEST_WARM=0` turns it off entirely.
- The server ends when its standard input closes, which happens when the pytest process that started it ends.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import json
import locale
import os
import runpy
import select
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HEADER = struct.Struct("!I")  # length of the JSON request that follows the three descriptors
# torch._dynamo too: building a model on the meta device (the checkpoint checks do) imports it
PRELOADED = (
    "torch",
    "torch._dynamo",
    "numpy",
    "tqdm",
    "omegaconf",
    "hydra",
    "hydra.core.config_store",
    "torch.utils.tensorboard",
)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    head, fds, _, _ = socket.recv_fds(conn, HEADER.size, 3)
    (size,) = HEADER.unpack(head + _exactly(conn, HEADER.size - len(head)))
    return json.loads(_exactly(conn, size)), fds


def _monitor(conn: socket.socket, request: dict, fds: list[int]) -> dict:
    """In the monitor: fork the command, tell the caller its pid, wait, send its exit code. Returns the request
    in the command's child (which then runs it) and exits in the monitor."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        conn.close()
        return request
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(HEADER.pack(pid))
        _, status = os.waitpid(pid, 0)
        conn.sendall(struct.pack("!i", os.waitstatus_to_exitcode(status)))
    finally:
        os._exit(0)


def serve(listener: socket.socket) -> dict:
    """Accept commands until stdin closes; returns (in a command's process only) the request to run."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped by the kernel
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):
            sys.exit(0)
        if listener not in ready:
            continue
        conn, _ = listener.accept()
        request, fds = _receive(conn)
        if os.fork() == 0:
            listener.close()
            return _monitor(conn, request, fds)
        conn.close()
        for fd in fds:
            os.close(fd)


def run(request: dict) -> None:
    """Become `python <script> args...` (or `python -m module args...`) in the command's own process."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    target, *args = request["argv"]
    interrupted = False
    try:
        if request["module"]:
            sys.argv = ["-m", *args]
            sys.path[0] = os.getcwd()
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [target, *args]
            sys.path[0] = os.path.dirname(os.path.abspath(target))
            runpy.run_path(target, run_name="__main__")
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None else _say(e.code)
    except BaseException as e:  # as an uncaught exception ends a fresh interpreter: its traceback, exit code 1
        sys.excepthook(type(e), e, e.__traceback__)
        code, interrupted = 1, isinstance(e, KeyboardInterrupt)
    _exit(code, interrupted)


WRITERS = {io.TextIOWrapper, io.BufferedWriter, io.BufferedRandom, io.BufferedRWPair}


def _say(message: object) -> int:
    print(message, file=sys.stderr)
    return 1


def _exit(code: int, interrupted: bool) -> None:
    """What a fresh interpreter does at exit that anyone can see: wait for its threads, run the atexit functions,
    flush every file still open, and (after a Ctrl-C) die of SIGINT. Tearing its modules down is skipped: with
    torch loaded that alone takes about as long as importing it."""
    threading._shutdown()
    atexit._run_exitfuncs()
    for obj in gc.get_objects():
        if type(obj) in WRITERS:  # not isinstance: hundreds of thousands of objects, the ABC check is slow
            with contextlib.suppress(Exception):
                obj.flush()
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


class WarmPython:
    """The caller's side: starts the server with `env` and runs commands through it."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self.path = str(Path(tempfile.mkdtemp(prefix="kochar-warm-")) / "socket")
        self.server = subprocess.Popen(
            [sys.executable, __file__, self.path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        said = self.server.stdout.readline().strip()
        if said != b"ready":
            raise RuntimeError(
                f"the warm interpreter did not start ({said.decode() or 'no word'}, exit code {self.server.wait()})"
            )

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a command with `env` reads at start what the server read: every variable but NOT_AT_START."""
        return _startup(env) == _startup(self.env)

    def run(
        self, command: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """Like subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)."""
        env = self.env if env is None else env
        if not self.serves(env):
            raise ValueError("this environment differs from the warm interpreter's in what is read at start")
        _, target, *args = command
        module = target == "-m"
        request = {"argv": args if module else [target, *args], "module": module, "cwd": str(cwd), "env": env}
        body = json.dumps(request).encode()
        (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
        devnull = os.open(os.devnull, os.O_RDONLY)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self.path)
            socket.send_fds(conn, [HEADER.pack(len(body))], [devnull, out_w, err_w])
            conn.sendall(body)
            for fd in (devnull, out_w, err_w):
                os.close(fd)
            (pid,) = HEADER.unpack(_exactly(conn, HEADER.size))
            output, timed_out = _read_both(out_r, err_r, time.monotonic() + timeout, pid)
            (code,) = struct.unpack("!i", _exactly(conn, 4))
        stdout, stderr = (_text(data) for data in output)
        if timed_out:
            raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
        return subprocess.CompletedProcess(command, code, stdout, stderr)

    def close(self) -> None:
        """End the server (it reads the closed stdin) and remove its socket's folder."""
        self.server.stdin.close()
        self.server.wait(10)
        shutil.rmtree(Path(self.path).parent, ignore_errors=True)


# Variables that change in the pytest process without changing what a command reads at start: pytest's own (set
# at every test), and the inductor cache folder torch writes into os.environ as its default when a test compiles.
# KOCHAR_CPU_BF16 and XDG_CACHE_HOME (each test's own user cache, tests/conftest.py) are read by the project's code
# (common/device.py, common/atomic_files.py), which every command imports after the fork.
NOT_AT_START = ("PYTEST_CURRENT_TEST", "TORCHINDUCTOR_CACHE_DIR", "KOCHAR_CPU_BF16", "XDG_CACHE_HOME")


def _startup(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in NOT_AT_START}


def _exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise RuntimeError("the warm interpreter closed the connection")
        data += chunk
    return data


def _read_both(out_r: int, err_r: int, deadline: float, pid: int) -> tuple[tuple[bytes, bytes], bool]:
    """Both pipes to their end (the command killed at the deadline, as subprocess.run does)."""
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    timed_out = False
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0 and not timed_out:
                timed_out = True
                os.kill(pid, signal.SIGKILL)
            for key, _ in sel.select(max(left, 0.1) if not timed_out else None):
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
                    os.close(key.fd)
    return (b"".join(chunks[out_r]), b"".join(chunks[err_r])), timed_out


def _text(data: bytes) -> str:
    """What subprocess's text mode makes of the bytes: the locale's encoding, universal newlines."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


def main() -> None:
    import importlib

    for name in PRELOADED:
        importlib.import_module(name)
    threads = Path("/proc/self/task")
    if threads.is_dir() and len(list(threads.iterdir())) > 1:  # an import started a thread: forking is unsafe
        print("threads", flush=True)
        sys.exit(1)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sys.argv[1])
    listener.listen(16)
    print("ready", flush=True)
    run(serve(listener))


if __name__ == "__main__":
    main()
