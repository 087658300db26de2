"""Keep freed memory in the process instead of handing it back to the system at every step (glibc only).

Design choices:
- A training step on the CPU allocates and frees the same large buffers (activations, logits, gradients,
  autocast's bf16 copies of the weights) every step. glibc's malloc serves blocks above its mmap threshold
  with fresh pages from the kernel and returns them on free, and trims the heap's top likewise, so every step
  pays page faults and zeroing for memory it just gave back; how much depends on where its adaptive threshold
  happens to settle, which made identical runs differ by a fifth in speed.
- `keep_freed_memory` raises the mmap threshold to glibc's maximum (32 MiB on 64-bit; setting it also stops
  the adaptation) and the trim threshold to 1 GiB, through `mallopt` at run time: what
  `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=...:glibc.malloc.trim_threshold=...` does at start-up, without
  asking the user to set it. The cost is that the process keeps its peak heap until it exits.
- Anywhere else (macOS, musl, Windows) it does nothing and says so by returning False; jemalloc or tcmalloc
  preloaded by the user keep their own behaviour (mallopt is then glibc's and has no effect on them).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's ceiling on 64-bit: 4 MiB * sizeof(long)
TRIM_THRESHOLD = 1024 * 1024 * 1024

_done: bool | None = None


def keep_freed_memory() -> bool:
    """Set glibc's thresholds once per process; True where they were set."""
    global _done
    if _done is None:
        _done = _set_thresholds()
    return _done


def _set_thresholds() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
