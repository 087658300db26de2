"""Run train.py with one checkpoint write made to fail or to stop half way:
`python tests/e2e/fault_save.py <mode> <n> [train.py overrides]`.

mode `enospc` or `runtime`: the n-th write of ckpt.pt raises OSError(ENOSPC) (a full disk) or torch.save's
RuntimeError after writing some bytes. mode `hold`: the n-th write of ckpt.pt writes half its bytes to the temp
file, prints `fault: holding a half-written checkpoint` on stdout and waits to be killed, so a test can kill -9
the process at exactly that point instead of after a guessed delay.

Fault injection lives here, not in the project: this wrapper replaces what inference.checkpoint calls to write.
"""

import errno
import io
import os
import runpy
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import inference.checkpoint  # noqa: E402

mode, nth = sys.argv.pop(1), int(sys.argv.pop(1))
real_atomic_write = inference.checkpoint.atomic_write
writes = {"count": 0}


def faulty(f, data) -> None:
    buffer = io.BytesIO()
    data(buffer)
    whole = buffer.getvalue()
    f.write(whole[: len(whole) // 2])
    if mode == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    if mode == "runtime":
        raise RuntimeError(
            "[enforce fail at inline_container.cc:783] . PytorchStreamWriter failed writing file "
            "data/3: file write failed"
        )
    f.flush()
    os.fsync(f.fileno())
    print("fault: holding a half-written checkpoint", flush=True)
    threading.Event().wait()  # until killed


def atomic_write(path, data) -> None:
    if Path(path).name == "ckpt.pt":
        writes["count"] += 1
        if writes["count"] == nth:
            return real_atomic_write(path, lambda f: faulty(f, data))
    return real_atomic_write(path, data)


inference.checkpoint.atomic_write = atomic_write
sys.argv[0] = str(ROOT / "train.py")
runpy.run_path(str(ROOT / "train.py"), run_name="__main__")
