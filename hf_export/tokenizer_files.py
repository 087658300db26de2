"""The tokenizer in the formats `AutoTokenizer.from_pretrained` reads (docs/en/export.md, "The tokenizer").

Design choices:
- `char` and `hangul`: a WordLevel model over single characters with an NFC normaliser (NFD and NFKC change Hangul);
  id 0 is U+FFFD, what our `<unk>` decodes to (a vocabulary holding U+FFFD keeps `<unk>`).
- `jamo` makes three tokens of a character, which WordLevel cannot: the folder ships hf_code/tokenization_kochar.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hf_format.deps import require
from tokenizer import Tokenizer

CODE = Path(__file__).resolve().parent / "hf_code"  # the code a jamo tokenizer's or a custom model's folder ships
UNK_SHOWN = "\ufffd"


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
