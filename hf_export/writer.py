"""Writing an exported folder: the layout chosen, the weights mapped, every file written, then moved into place.

The folder is assembled in a temporary sibling and renamed at the end, so an interrupted export never leaves
a half-written folder under the name asked for; an existing non-empty folder is refused unless overwritten.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from common.errors import UserError
from hf_export.model_card import model_card
from hf_export.plain import plain_model
from hf_export.tokenizer_files import write_tokenizer
from hf_export.verify import check_folder
from hf_format import FORMAT, LAYOUTS, VERSION, custom, gpt2, llama
from hf_format.deps import require
from inference.checkpoint import Checkpoint
from inference.loading import model_from_checkpoint
from model.config import ModelConfig

CODE = Path(__file__).resolve().parent / "hf_code"  # the modeling code a custom folder ships


def choose_layout(c: ModelConfig) -> str:
    """The stock class that expresses the architecture exactly, or "custom"."""
    return "gpt2" if gpt2.fits(c) else "llama" if llama.fits(c) else "custom"


def record(ckpt: Checkpoint, layout: str, exported: ModelConfig) -> dict:
    """kochar.json: what our own scripts need to rebuild the exact model (as exported: `trained_as` keeps the
    settings it was trained with when hf_export/plain.py folded something) and tokenizer."""
    return {"format": FORMAT, "version": VERSION, "layout": layout, "model_config": exported.to_dict(),
            "trained_as": ckpt.model_config.to_dict(), "tokenizer": ckpt.tokenizer,
            "tokens_per_char": float(ckpt.tokens_per_char), "step": ckpt.step, "config": ckpt.config}


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def write_folder(ckpt: Checkpoint, tokenizer, params: int, out: Path, export_command: str, overwrite: bool,
                 verify: bool = True) -> str:
    """Export `ckpt` to `out`; returns the layout used. With `verify`, the folder is named only once
    `transformers` has read it back and given the run's logits (hf_export/verify.py)."""
    safetensors_torch = require("safetensors.torch")
    out = out.expanduser()
    if out.exists() and not out.is_dir():
        raise UserError(f"out={out} is a file; pass a folder to export into")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise UserError(f"out={out} is not empty; pass another folder, or overwrite=true to replace it")
    state, c = plain_model(ckpt.model, ckpt.model_config, lambda c: choose_layout(c) != "custom")
    layout = choose_layout(c)
    module = LAYOUTS[layout]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        tensors = {k: v.contiguous() for k, v in module.to_hf(state, c).items()}
        safetensors_torch.save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        _write_json(tmp / "config.json", {**module.hf_config(c), "torch_dtype": "float32"})
        _write_json(tmp / "generation_config.json", {"do_sample": True, "temperature": 0.8, "pad_token_id": 0,
                                                    "max_length": c.context_length})
        if layout == "custom":
            for name in custom.FILES:
                shutil.copy(CODE / name, tmp / name)
        write_tokenizer(tokenizer, tmp, c.context_length)
        _write_json(tmp / "kochar.json", record(ckpt, layout, c))
        (tmp / "README.md").write_text(model_card(ckpt, params, layout, export_command), encoding="utf-8")
        if verify:
            check_folder(tmp, model_from_checkpoint(ckpt))
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return layout
