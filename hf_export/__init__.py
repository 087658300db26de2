"""Export a run to the Hugging Face format: a folder `transformers` loads with `from_pretrained`.

    python export.py ckpt=runs/<run> out=exported/<name>

Design choices:
- Weights go in `model.safetensors` (no pickle: nothing runs on load); the folder also holds `config.json`,
  `generation_config.json`, the tokenizer files, a model card (`README.md`, Korean and English) and
  `kochar.json`, our own record (model settings, tokenizer, bits-per-character scale), from which our scripts
  rebuild the exact model: `generate.py`, `evaluate.py` and the playground accept the folder as `ckpt=`.
- The run's network is first rewritten exactly in the switches the layouts know (hf_export/plain.py: the jamo
  embedding folded into the token embedding); every model setting is listed there, and one it does not know is
  refused rather than exported wrong. Before the folder gets its name, `transformers` loads it and must give
  the run's logits (hf_export/verify.py).
- Stock classes wherever one expresses the architecture exactly: the lecture's model is a GPT-2
  (`GPT2LMHeadModel`, hf_format/gpt2.py); rotary + RMSNorm + SwiGLU without query/key norm is a LLaMA
  (`LlamaForCausalLM`, hf_format/llama.py). Every other combination ships the project's own modeling code in the
  folder (hf_export/hf_code/, loaded with `trust_remote_code=True`): no combination is refused.
- The char tokenizer is a `tokenizers` WordLevel model over single characters with an NFC normaliser
  (hf_export/tokenizer_files.py); the jamo tokenizer, which turns one character into three tokens, ships its
  own tokenizer class in the folder, as custom models ship theirs.
- `transformers`, `tokenizers` and `safetensors` are imported only here and where a folder is read back;
  a missing install is one line naming the command that installs it.
"""
