"""The Hangul-aware layers (`jamo_embedding`, `jamo_head`, and `held_rows` while training): they take the place of the
lecture's token embedding and LM head (model/input_output.py chooses them from `ModelConfig`), never of anything
inside `AttentionLanguageModel`. They know the `hangul` tokenizer's ids only as numbers: ids 1 to 11,172 are the
syllables in code-point order.
"""
