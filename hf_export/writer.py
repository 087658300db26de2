"""Writing an exported folder: the layout chosen, the weights mapped, every file written, then moved into place."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hf_export import destination
from hf_export.model_card import model_card
from hf_export.plain import plain_model
from hf_export.tokenizer_files import CODE, write_tokenizer
from hf_export.verify import check_folder
from hf_format import FORMAT, LAYOUTS, RECORD, VERSION, custom, gpt2, llama
from hf_format.deps import require
from inference.checkpoint import Checkpoint
from inference.loading import model_from_checkpoint
from inference.weights import held_weights
from model.config import ModelConfig


def choose_layout(c: ModelConfig) -> str:
    return "gpt2" if gpt2.fits(c) else "llama" if llama.fits(c) else "custom"


def record(ckpt: Checkpoint, layout: str, exported: ModelConfig) -> dict:
    """kochar.json: what our scripts need to rebuild the exact model (`trained_as`: before plain.py's folding),
    which weights it holds, and of which checkpoint (`source`)."""
    held = held_weights(ckpt)
    return {
        "format": FORMAT,
        "version": VERSION,
        "layout": layout,
        "model_config": exported.to_dict(),
        "trained_as": ckpt.model_config.to_dict(),
        "tokenizer": ckpt.tokenizer,
        "tokens_per_char": float(ckpt.tokens_per_char),
        "step": ckpt.step,
        "config": ckpt.config,
        "weights": held.kind,
        "average_updates": held.updates,
        "source": ckpt.source,
    }


def _write_json(path: Path, data: dict) -> None:
    # A name that is not valid UTF-8 (lone surrogates) becomes the JSON escape \udcXX, so it reads back intact.
    path.write_bytes((json.dumps(data, ensure_ascii=False, indent=2) + "\n").encode("utf-8", "backslashreplace"))


def _write_files(
    tmp: Path, ckpt: Checkpoint, tokenizer, params: int, layout: str, state: dict, c: ModelConfig, export_command: str
) -> None:
    """Every file of the folder into `tmp`; kochar.json last, listing them (what overwrite=true may replace)."""
    module = LAYOUTS[layout]
    tensors = {k: v.contiguous() for k, v in module.to_hf(state, c).items()}
    require("safetensors.torch").save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    _write_json(tmp / "config.json", {**module.hf_config(c), "torch_dtype": "float32"})
    _write_json(
        tmp / "generation_config.json",
        {"do_sample": True, "temperature": 0.8, "pad_token_id": 0, "max_length": c.context_length},
    )
    if layout == "custom":
        for name in custom.FILES:
            shutil.copyfile(CODE / name, tmp / name)
    write_tokenizer(tokenizer, tmp, c.context_length)
    (tmp / "README.md").write_text(model_card(ckpt, params, layout, export_command), encoding="utf-8")
    _write_json(tmp / RECORD, {**record(ckpt, layout, c), "files": sorted(p.name for p in tmp.iterdir()) + [RECORD]})


def write_folder(
    ckpt: Checkpoint, tokenizer, params: int, out: Path, export_command: str, overwrite: bool, verify: bool = True
) -> str:
    """Export `ckpt` to `out` (with `verify`, named only once `transformers` gives the run's logits); the layout."""
    require("safetensors.torch")
    out = destination.checked_destination(out.expanduser(), ckpt.path, overwrite)
    state, c = plain_model(ckpt.model, ckpt.model_config, lambda c: choose_layout(c) != "custom")
    layout = choose_layout(c)
    destination.remove_stale(out.parent)
    with destination.export_lock(out), destination.temporary_folder(out) as tmp:
        try:
            _write_files(tmp, ckpt, tokenizer, params, layout, state, c, export_command)
        except Exception as e:  # noqa: BLE001 - safetensors and transformers report a full disk in their own types
            if not isinstance(e, OSError) and "os error" not in str(e):
                raise
            raise destination.fault("write the export beside", out, e) from None
        if verify:
            try:
                check_folder(tmp, model_from_checkpoint(ckpt), ckpt.path)
            except OSError as e:  # transformers copies a folder's code into its own cache (HF_HOME) to load it
                raise destination.fault("load the export with transformers from", tmp, e) from None
        destination.commit(tmp, out, overwrite)
    return layout
