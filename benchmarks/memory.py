"""Peak memory: of this process, and of `train.py` training on a large synthetic corpus.

Design choices:
- The large-corpus run is its own `train.py` process, so its peak is real training's, not this benchmark's.
- Its peak is VmHWM from /proc while it runs: RUSAGE_CHILDREN also counts pages a forked child shares (fallback: macOS).
- The corpus is written in chunks, so this process never holds it; the child's stderr goes to a file, never blocking.
"""

from __future__ import annotations

import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.options import ROOT

HANGUL_FIRST = 0xAC00
ALPHABET = 2350  # as many syllables as the KS X 1001 common set has (the first ones in code-point order)
CHUNK_CHARS = 1 << 20
TRAIN_OVERRIDES = (
    "train.max_steps=20",
    "train.eval_interval=20",
    "train.eval_steps=2",
    "train.sample_chars=0",
    "device=cpu",
)


def own_peak_rss_mb() -> float:
    """This process's peak resident memory in MB (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 1024), 1)


def write_synthetic_corpus(path: Path, megabytes: int, seed: int = 0) -> None:
    """Write at least `megabytes` MB of random Hangul syllables, spaces and newlines to `path` (UTF-8)."""
    rng = np.random.default_rng(seed)
    syllables = np.arange(HANGUL_FIRST, HANGUL_FIRST + ALPHABET, dtype=np.uint32)
    written = 0
    with path.open("w", encoding="utf-8") as f:
        while written < megabytes * 2**20:
            cps = rng.choice(syllables, size=CHUNK_CHARS)
            cps[rng.random(cps.size) < 0.2] = ord(" ")
            cps[rng.random(cps.size) < 0.01] = ord("\n")
            chunk = cps.astype("<u4").tobytes().decode("utf-32-le")
            f.write(chunk)
            written += len(chunk.encode("utf-8"))


def vm_hwm_kb(pid: int) -> int | None:
    """A process's peak resident memory in KiB, from /proc/<pid>/status (None without /proc, or once it is gone)."""
    try:
        found = re.search(r"^VmHWM:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    except OSError:
        return None
    return int(found.group(1)) if found else None


def child_peak_rss_kb(cmd: list[str]) -> tuple[int, str]:
    """Run `cmd`; return its own peak resident memory in KiB, and its stderr if it failed (else "")."""
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errors, text=True)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, vm_hwm_kb(proc.pid) or 0)  # None: the process ended between poll() and the read
            time.sleep(0.02)
        errors.seek(0)
        err = errors.read()
    if peak == 0 and not Path(f"/proc/{proc.pid}").exists():
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        peak //= 1024 if sys.platform == "darwin" else 1
    return peak, err if proc.returncode else ""


def bench_big_corpus_memory(megabytes: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synthetic.txt"
        write_synthetic_corpus(path, megabytes)
        cmd = [
            sys.executable,
            str(ROOT / "train.py"),
            f"data.path={path}",
            f"data.cache_dir={tmp}/cache",
            f"hydra.run.dir={tmp}/run",
            *TRAIN_OVERRIDES,
        ]
        start = time.perf_counter()
        peak_kb, err = child_peak_rss_kb(cmd)
        if err:
            raise RuntimeError("train.py failed during the memory benchmark:\n" + err[-2000:])
        return {
            "big_corpus_mb": round(path.stat().st_size / 2**20, 1),
            "big_corpus_train_seconds": round(time.perf_counter() - start, 1),
            "big_corpus_peak_rss_mb": round(peak_kb / 1024, 1),
        }
