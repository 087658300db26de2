"""Reading an exported folder back into a Checkpoint, so every `ckpt=` takes the folder: only `kochar.json` and
`model.safetensors` are read (no pickle, nothing executed), both checked first (inference/exported_checks.py)."""

from __future__ import annotations

import json
from pathlib import Path

from common.errors import UserError
from hf_format import LAYOUTS, RECORD
from hf_format.deps import require
from inference.checkpoint import Checkpoint
from inference.weights import run_average
from model.qkv_layout import match_layout


def exported_folder(path: str | Path) -> Path:
    """The folder itself, or the folder of its kochar.json (the path the playground keys runs by)."""
    p = Path(path).expanduser()
    return p.parent if p.name == RECORD else p


def is_exported(path: str | Path) -> bool:
    p = exported_folder(path)
    return p.is_dir() and (p / RECORD).is_file() and (p / "model.safetensors").is_file()


def read_folder(path: str | Path) -> Checkpoint:
    """The folder as a Checkpoint, once its record and weights' header pass inference/exported_checks.py."""
    from inference.exported_checks import check_tensors, checked_record

    folder = exported_folder(path)
    try:
        rec = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{folder / RECORD} cannot be read ({e}); export the run again") from None
    config = checked_record(rec, folder / RECORD)
    weights = folder / "model.safetensors"
    check_tensors(weights, config, rec["layout"])
    safetensors_torch = require("safetensors.torch")
    try:
        tensors = safetensors_torch.load_file(str(weights))
    except Exception as e:  # noqa: BLE001 - a damaged file can fail in the parser in any way
        raise UserError(f"{weights} cannot be read ({type(e).__name__}); export the run again") from None
    state = match_layout(LAYOUTS[rec["layout"]].from_hf(tensors, config), config.attention)
    ckpt = Checkpoint(
        config,
        state,
        rec["tokenizer"],
        float(rec.get("tokens_per_char", 1.0)),
        rec.get("config") or {},
        path=folder / RECORD,
        held_updates=rec.get("average_updates"),
        source=rec.get("source"),
    )
    ckpt.held = rec.get("weights") or ("raw" if run_average(ckpt) in (None, "none") else "unknown")
    return ckpt
