"""The Hugging Face folder format, both ways: what `export.py` writes and what every `ckpt=` reads back.

Design choices:
- One record names the format (`kochar.json`: `FORMAT`, `VERSION`) and one table names the weight layouts
  (`LAYOUTS`): the project's parameter names as `GPT2LMHeadModel` (gpt2.py), `LlamaForCausalLM` (llama.py) or the
  project's own shipped code (custom.py) names them, each a pair of pure functions `to_hf` / `from_hf`.
- Writing a folder (hf_export/) and reading one (inference/exported_folder.py) both import this package, never each
  other. `transformers`, `tokenizers` and `safetensors` are optional: `deps.require` imports one on demand, or says
  in one line how to install it.
"""

from hf_format import custom, gpt2, llama

FORMAT = "kochar-gpt/export"
VERSION = 1
RECORD = "kochar.json"
LAYOUTS = {"gpt2": gpt2, "llama": llama, "custom": custom}

__all__ = ["FORMAT", "LAYOUTS", "RECORD", "VERSION"]
