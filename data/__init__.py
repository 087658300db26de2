"""Corpus reading, token caching and batch sampling. Knows tokenizers, never models or training."""
