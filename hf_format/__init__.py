"""The Hugging Face folder format, both ways: what `export.py` writes and what every `ckpt=` reads back.

Design choices:
- One record (`kochar.json`: `FORMAT`, `VERSION`) and one table of layouts, each a pair of pure `to_hf` / `from_hf`.
- hf_export/ and inference/exported_folder.py both import this package, never each other. `transformers`,
  `tokenizers` and `safetensors` are optional: `deps.require` imports one on demand, or says how to install it.
"""

from hf_format import custom, gpt2, llama

FORMAT = "kochar-gpt/export"
VERSION = 1
RECORD = "kochar.json"
LAYOUTS = {"gpt2": gpt2, "llama": llama, "custom": custom}

__all__ = ["FORMAT", "LAYOUTS", "RECORD", "VERSION"]
