"""Keep freed memory in the process instead of handing it back to the system at every step (glibc only).

Design choices:
- A CPU step frees and re-allocates the same large buffers; glibc hands big ones back to the kernel, so each step
  pays page faults and zeroing again (docs/en/speed.md).
- `mallopt` at run time does what `GLIBC_TUNABLES` would, without asking the user; the process keeps its peak heap.
- Elsewhere (macOS, musl, Windows) it does nothing; a preloaded jemalloc or tcmalloc keeps its own behaviour.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's ceiling on 64-bit: 4 MiB * sizeof(long)
TRIM_THRESHOLD = 1024 * 1024 * 1024


@functools.cache
def keep_freed_memory() -> bool:
    """Set glibc's thresholds once per process; True where they were set."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
