"""Using a trained run: load it, sample from it, score text with it; nothing of training loops or optimizers."""
