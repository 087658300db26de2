"""The playground under a careless or hostile crowd: half-open connections, huge bodies, many samples.

    python benchmarks/serve_stress.py                      # 300 half-open connections, default bounds
    python benchmarks/serve_stress.py --connections 1000 --set header_timeout_s=5

Design choices:
- `python serve.py` (configs/serve.yaml plus `--set`) on a tiny run, as its own process: its memory is its own.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import select
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: only benchmarks/ is on the path
    sys.path.insert(0, str(ROOT))

from benchmarks import options as opt  # noqa: E402
from common.errors import UserError  # noqa: E402

HALF_HEAD = b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"  # never finished


def _tiny_run(folder: Path) -> None:
    from benchmarks.timing import seeded_model
    from inference.checkpoint import Checkpoint, save_checkpoint
    from tokenizer import KoreanCharTokenizer

    tok = KoreanCharTokenizer.from_text("옛날에 한 마을에 착한 나무꾼이 살았다.\n")
    m = seeded_model(
        tok.vocab_size, dict(context_length=32, embedding_size=32, head_size=32, num_heads=4, num_blocks=2)
    )
    folder.mkdir(parents=True)
    save_checkpoint(Checkpoint(m.config, m.state_dict(), tok.to_dict()), folder / "ckpt.pt")


def _start(runs_dir: Path, settings: list[str]) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [sys.executable, "serve.py", f"runs_dir={runs_dir}", "port=0", *settings],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"},
    )
    for line in proc.stdout:
        if m := re.search(r"http://127\.0\.0\.1:(\d+)/", line):
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, int(m.group(1))
    raise SystemExit(f"error: serve.py did not start (exit {proc.wait()})")


def _request(port: int, raw: bytes, timeout: float = 30) -> tuple[int, float]:
    """(status, seconds) of one request sent whole on a new connection."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(raw)
        head = s.recv(65536)
    return int(head.split()[1]) if head else 0, time.monotonic() - started


def _ordinary(port: int) -> list[float]:
    body = json.dumps({"prompt": "옛날", "max_new_tokens": 20, "stream": False}).encode()
    sample = (
        b"POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    runs = b"GET /api/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    times = []
    for raw in (runs, sample) * 5:
        status, seconds = _request(port, raw)
        if status != 200:
            raise SystemExit(f"error: an ordinary request got HTTP {status}")
        times.append(seconds)
    return times


def _wait_closed(socks: list[socket.socket], limit: float) -> bool:
    """Whether the server closes every one of `socks` within `limit` seconds."""
    started, open_ = time.monotonic(), set(socks)
    while open_ and time.monotonic() - started < limit:
        readable, _, _ = select.select(list(open_)[:1000], [], [], 0.5)
        for s in readable:
            try:
                if not s.recv(4096):
                    open_.discard(s)
            except OSError:
                open_.discard(s)
    return not open_


def _big_body(port: int) -> int:
    """Status of a request declaring 300 MB and sending its first 50 MB (as fast as the server reads)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 300000000\r\n\r\n")
        try:
            for _ in range(50):
                s.sendall(b"x" * 1_000_000)
        except OSError:
            pass  # refused and closed before all of it was sent
        head = s.recv(65536)
    return int(head.split()[1]) if head else 0


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = opt.script_parser("serve_stress.py", __doc__)
    ap.add_argument("--connections", default=300, check=opt.count(), help="half-open connections held (default 300)")
    ap.add_argument("--set", action="append", default=[], check=_key_value, help="a serve.py key=value (repeatable)")
    return ap.parse_args(argv)


def _key_value(flag: str, text: str) -> str:
    if "=" not in text:
        raise UserError(f"{flag} {text!r}: give a serve.py setting as key=value")
    return text


def main(argv: list[str]) -> dict:
    from benchmarks.run import vm_hwm_kb

    args = parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.connections + 256)), hard))
    with tempfile.TemporaryDirectory(prefix="serve-stress-") as tmp:
        _tiny_run(Path(tmp) / "runs" / "tiny")
        proc, port = _start(Path(tmp) / "runs", args.set)
        try:
            baseline = _ordinary(port)
            opened = time.monotonic()
            socks = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(args.connections)]
            for s in socks:
                s.sendall(HALF_HEAD)
            during = _ordinary(port)
            closed_after = time.monotonic() - opened if _wait_closed(socks, 120) else None
            for s in socks:
                s.close()
            after = _ordinary(port)
            big = _big_body(port)
            peak = vm_hwm_kb(proc.pid)
            return {
                "connections": args.connections,
                "baseline_max_s": round(max(baseline), 3),
                "while_open_max_s": round(max(during), 3),
                "half_open_all_closed_s": closed_after and round(closed_after, 1),
                "after_max_s": round(max(after), 3),
                "body_300mb_status": big,
                "server_peak_rss_mb": None if peak is None else round(peak / 1024, 1),
                "settings": args.set,
            }
        finally:
            proc.terminate()
            proc.wait(20)


if __name__ == "__main__":
    opt.run_script(lambda argv: opt.print_json(main(argv)))
