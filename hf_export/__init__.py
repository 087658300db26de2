"""Export a run to the Hugging Face format: a folder `transformers` loads with `from_pretrained`.

    python export.py ckpt=runs/<run> out=exported/<name>

Design choices:
- Weights go in `model.safetensors` (no pickle: nothing runs on load), beside `config.json`, the tokenizer files, a
  model card and `kochar.json`, our own record, from which our scripts rebuild the exact model: every `ckpt=`
  takes the folder.
- Stock classes wherever one expresses the architecture exactly (hf_format/: GPT-2, LLaMA), once the run is
  rewritten in the switches they know (plain.py); every other combination ships the project's own code (hf_code/,
  `trust_remote_code=True`): none is refused. `transformers` must load the folder and give the run's logits before
  it gets its name (verify.py).
"""
