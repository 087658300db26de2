"""The Hangul-aware layers: they take the place of the lecture's token embedding and LM head (model/input_output.py
chooses them from `ModelConfig`), never of anything inside `AttentionLanguageModel`.

- `jamo_embedding`: a syllable's input vector composed from its jamo (`model.embedding=jamo`).
- `jamo_head`: a syllable predicted initial, then medial, then final (`model.head=jamo`).
- `held_rows`: while training, the per-syllable tables hold only the rows the training text reaches
  (`train.syllable_rows=seen`); checkpoints always hold them dense.

All three know the `hangul` tokenizer's ids only as numbers: ids 1 to 11,172 are the syllables in code-point order.
"""
