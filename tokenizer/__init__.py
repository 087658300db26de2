"""Tokenizers: text <-> ids. They know nothing of models or files other than their own JSON."""

from tokenizer.char import UNK_ID, UNK_TOKEN, KoreanCharTokenizer

__all__ = ["KoreanCharTokenizer", "UNK_ID", "UNK_TOKEN", "tokenizer_from_dict"]


def tokenizer_from_dict(d: dict) -> KoreanCharTokenizer:
    """Rebuild a tokenizer saved with `to_dict()` (as stored in checkpoints)."""
    return KoreanCharTokenizer.from_dict(d)
