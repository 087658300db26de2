"""Export a run as a folder `transformers` loads with `from_pretrained` (docs/en/export.md).

Design choices:
- Weights in `model.safetensors` (no pickle: nothing runs on load); `kochar.json`, our record, rebuilds the exact model.
- Stock classes (hf_format/: GPT-2, LLaMA) wherever one expresses the architecture exactly, else the project's own
  code (hf_code/): none is refused. The folder gets its name only once it gives the run's logits (writer.py).
"""
