"""Reading an exported folder back into a Checkpoint, so every script that takes `ckpt=` takes the folder.

Only `kochar.json` (plain JSON) and `model.safetensors` are read: no pickle, nothing executed. The weights are
mapped back from the layout the folder was written in (hf_format/gpt2.py, llama.py, custom.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from common.errors import UserError
from hf_format import RECORD
from inference.checkpoint import Checkpoint
from model.config import ModelConfig


def exported_folder(path: str | Path) -> Path:
    """The folder itself, or the folder of its kochar.json (the path the playground keys runs by)."""
    p = Path(path).expanduser()
    return p.parent if p.name == RECORD else p


def is_exported(path: str | Path) -> bool:
    p = exported_folder(path)
    return p.is_dir() and (p / RECORD).is_file() and (p / "model.safetensors").is_file()


def read_folder(path: str | Path) -> Checkpoint:
    from hf_format import FORMAT, LAYOUTS
    from hf_format.deps import require

    folder = exported_folder(path)
    try:
        rec = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{folder / RECORD} cannot be read ({e}); export the run again") from None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT or rec.get("layout") not in LAYOUTS:
        raise UserError(f"{folder / RECORD} is not a kochar-gpt export record; export the run again")
    config = ModelConfig.from_dict(rec["model_config"])
    safetensors_torch = require("safetensors.torch")
    try:
        tensors = safetensors_torch.load_file(str(folder / "model.safetensors"))
    except Exception as e:  # noqa: BLE001 - a damaged file can fail in the parser in any way
        raise UserError(f"{folder / 'model.safetensors'} cannot be read ({type(e).__name__}); export again") from None
    try:
        state = LAYOUTS[rec["layout"]].from_hf(tensors, config)
    except KeyError as e:
        raise UserError(f"{folder / 'model.safetensors'} lacks the tensor {e}; export the run again") from None
    return Checkpoint(config, state, rec["tokenizer"], float(rec.get("tokens_per_char", 1.0)),
                      rec.get("config") or {}, path=folder / RECORD)
