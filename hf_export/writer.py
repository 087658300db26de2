"""Writing an exported folder: the layout chosen, the weights mapped, every file written, then moved into place.

Design choices:
- The tokenizer, `char` and `hangul`: a WordLevel model over single characters with an NFC normaliser (NFD and NFKC
  change Hangul); id 0 is U+FFFD, what our `<unk>` decodes to (a vocabulary holding U+FFFD keeps `<unk>`). `jamo`
  makes three tokens of a character, which WordLevel cannot: the folder ships hf_code/tokenization_kochar.py
  (docs/en/export.md, "The tokenizer").
- Before the folder gets its name, `transformers` loads it as a user would, beside the run's model on one fixed
  window: a mapping mistake moves logits by whole units, float32 kernels by far less than `TOLERANCE`. Weights whose
  own logits are not finite are refused: not export's fault.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from common.errors import UserError
from hf_export import destination
from hf_export.model_card import model_card
from hf_export.plain import plain_model
from hf_format import FORMAT, LAYOUTS, RECORD, VERSION, custom, gpt2, llama
from hf_format.deps import require
from inference.checkpoint import Checkpoint, another_checkpoint
from inference.loading import model_from_checkpoint
from inference.weights import held_weights
from model import AttentionLanguageModel
from model.config import ModelConfig
from tokenizer import Tokenizer

CODE = Path(__file__).resolve().parent / "hf_code"  # the code a jamo tokenizer's or a custom model's folder ships
UNK_SHOWN = "\ufffd"
TOLERANCE = 1e-3
WINDOW = 64


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


def _char_tokenizer(chars: list[str]):
    tk = require("tokenizers")
    unk = "<unk>" if UNK_SHOWN in chars else UNK_SHOWN
    vocab = {unk: 0} | {c: i + 1 for i, c in enumerate(chars)}
    tok = tk.Tokenizer(tk.models.WordLevel(vocab, unk_token=unk))
    tok.normalizer = tk.normalizers.NFC()
    tok.pre_tokenizer = tk.pre_tokenizers.Split(tk.Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = tk.decoders.Fuse()
    return tok, unk


def write_tokenizer(tokenizer: Tokenizer, out: Path, context_length: int) -> None:
    if tokenizer.kind in ("char", "hangul"):  # one token per character: a WordLevel model expresses both
        transformers = require("transformers")
        tok, unk = _char_tokenizer(tokenizer.chars)
        fast = transformers.PreTrainedTokenizerFast(
            tokenizer_object=tok, unk_token=unk, model_max_length=context_length, clean_up_tokenization_spaces=False
        )
        fast.save_pretrained(str(out))
    else:
        unk = "<unk>"
        shutil.copy(CODE / "tokenization_kochar.py", out / "tokenization_kochar.py")
        vocab = {"tokens": tokenizer.tokens}  # in id order after <unk>, characters added by fine-tuning included
        (out / "kochar_vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        config = {
            "tokenizer_class": "KocharJamoTokenizer",
            "unk_token": unk,
            "model_max_length": context_length,
            "auto_map": {"AutoTokenizer": ["tokenization_kochar.KocharJamoTokenizer", None]},
            "clean_up_tokenization_spaces": False,
        }
        (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=2), encoding="utf-8")
    if not (out / "special_tokens_map.json").is_file():
        (out / "special_tokens_map.json").write_text(
            json.dumps({"unk_token": unk}, ensure_ascii=False, indent=2), encoding="utf-8"
        )


@torch.no_grad()
def check_folder(folder: Path, model: AttentionLanguageModel, source: object = "the run") -> float:
    """The largest logit difference between `transformers` on `folder` and `model`; UserError above TOLERANCE."""
    c = model.config
    ids = torch.randint(0, c.vocab_size, (1, min(WINDOW, c.context_length)), generator=torch.Generator().manual_seed(0))
    ours = model.eval()(ids)[0]
    if not bool(torch.isfinite(ours).all()):
        raise UserError(
            f"the weights of {source} compute logits that are not finite numbers (NaN or infinity): "
            "they cannot be exported; nothing was written; "
            f"{another_checkpoint(source if isinstance(source, Path) else None)}"
        )
    transformers = require("transformers")
    transformers.utils.logging.set_verbosity_error()  # export prints its own one line: no bars, no warnings
    transformers.utils.logging.disable_progress_bar()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(folder), trust_remote_code=True).eval()
    diff = float((ours - theirs(ids).logits.float()).abs().max())
    if not diff <= TOLERANCE:  # NaN refuses too
        raise UserError(
            f"the exported folder does not compute what the run computes (logits differ by {diff:.3g} "
            f"through {type(theirs).__name__}); nothing was written: please report it"
        )
    return diff
