"""Checkpoints: written atomically, loaded safely.

Writing goes to a temp file in the same folder, is fsynced, then renamed over the old file, so a crash or
Ctrl-C at any moment leaves either the old or the new checkpoint, never half of one. Loading uses
`torch.load(weights_only=True)`: a file crafted to run code when unpickled is refused.
"""

from __future__ import annotations

import os
import pickle
import warnings
import zipfile
from pathlib import Path

import torch

from common.errors import UserError

FORMAT = "kochar-gpt/checkpoint"
VERSION = 1
CKPT_NAME = "ckpt.pt"
BEST_NAME = "best.pt"


def save_checkpoint(payload: dict, path: str | Path) -> None:
    path = Path(path)
    payload = {"format": FORMAT, "version": VERSION, **payload}
    remove_stale_temps(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    try:  # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def remove_stale_temps(path: Path) -> None:
    """Delete `.ckpt.pt.<pid>.tmp` files left by processes killed mid-write (a checkpoint's size each)."""
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 2:-len(".tmp")]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)  # still running (another writer): leave its file alone
        except ProcessLookupError:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def strip_compile_prefix(state_dict: dict) -> dict:
    """torch.compile wraps the model as `_orig_mod`; checkpoints never carry that prefix."""
    return {k.removeprefix("_orig_mod.").removeprefix("module."): v for k, v in state_dict.items()}


def newest_checkpoint(root: str | Path = "runs") -> Path:
    root = Path(root)
    found = [p for p in root.rglob(CKPT_NAME)] if root.is_dir() else []
    if not found:
        raise UserError(f"no checkpoint found under {root}/; train first (python train.py) or pass ckpt=<run dir>")
    return max(found, key=lambda p: p.stat().st_mtime)


def resolve_checkpoint(path: str | Path | None, runs_root: str | Path = "runs") -> Path:
    """A checkpoint file, a run directory holding ckpt.pt, or None for the newest run under runs/."""
    if path in (None, ""):
        return newest_checkpoint(runs_root)
    p = Path(path).expanduser()
    if p.is_dir():
        if (p / CKPT_NAME).is_file():
            return p / CKPT_NAME
        raise UserError(f"no {CKPT_NAME} in run directory {p}")
    if not p.exists():
        raise UserError(f"checkpoint not found: {p}")
    return p


def load_checkpoint(path: str | Path) -> dict:
    """Load to the CPU with weights_only=True; every failure is one clear UserError."""
    path = Path(path)
    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols before refusing a file
            warnings.simplefilter("ignore")
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UserError(f"checkpoint not found: {path}") from None
    except IsADirectoryError:
        raise UserError(f"checkpoint path is a directory without {CKPT_NAME}: {path}") from None
    except PermissionError:
        raise UserError(f"cannot read checkpoint {path}: permission denied") from None
    except pickle.UnpicklingError:
        raise UserError(
            f"refusing to load {path}: it holds Python objects other than tensors and plain data "
            "(it may be malicious, or not a kochar-gpt checkpoint)"
        ) from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError) as e:
        first = str(e).strip().splitlines()[0].split(". ")[0] if str(e).strip() and not isinstance(e, OSError) else ""
        raise UserError(f"checkpoint {path} is truncated or corrupt{f' ({first})' if first else ''}; "
                        "use another checkpoint (best.pt, or an earlier run) or train again") from None
    except Exception as e:  # noqa: BLE001 - arbitrary bytes can fail the unpickler in any way
        raise UserError(f"{path} is not a kochar-gpt checkpoint (it cannot be read: {type(e).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise UserError(f"{path} is not a kochar-gpt checkpoint")
    for key in ("model", "model_config", "tokenizer"):
        if key not in payload:
            raise UserError(f"checkpoint {path} is incomplete (no '{key}')")
    return payload
