"""Using a trained run: load it (checkpoint -> model + tokenizer), sample from it, score text with it.

Used by `generate.py`, `evaluate.py`, the training loop's samples and the web playground; it knows nothing
of training loops or optimizers.
"""
