"""Sampling text from a loaded model: prompt ids, and samples streamed as they are produced."""

from __future__ import annotations

import sys
import warnings
from typing import TextIO

import torch

from model import AttentionLanguageModel
from tokenizer import Tokenizer


def prompt_ids(tokenizer: Tokenizer, prompt: str) -> list[int]:
    """Ids of the prompt; unseen characters are kept as <unk> with a warning naming them."""
    unknown = tokenizer.unknown_chars(prompt)
    if unknown:
        names = ", ".join(f"{c!r}" for c in unknown)
        warnings.warn(f"the prompt has characters the model has never seen ({names}); they become <unk>",
                      stacklevel=2)
    ids = tokenizer.encode(prompt).tolist()
    if not ids:  # an empty prompt starts from a line break (or the first character of the vocabulary)
        newline = tokenizer.encode("\n").tolist()
        ids = newline if newline and newline[0] != 0 else [1]
    return ids


def stream_samples(model: AttentionLanguageModel, tokenizer: Tokenizer, prompt: str, max_new_tokens: int,
                   num_samples: int, temperature: float, top_k: int | None, top_p: float | None, seed: int,
                   device: torch.device, use_cache: bool = True, out: TextIO = sys.stdout) -> list[str]:
    """Write each sample to `out` as it is produced; the same seed gives the same text."""
    ids = prompt_ids(tokenizer, prompt)
    generator = torch.Generator(device=device).manual_seed(seed)
    texts = []
    for n in range(num_samples):
        if n:
            out.write("\n" + "-" * 40 + "\n")
        idx = torch.tensor([ids], dtype=torch.long, device=device)
        out.write(prompt)
        out.flush()
        pieces = [prompt]
        decoder = tokenizer.stream_decoder()
        for nxt, _ in model.stream(idx, max_new_tokens, temperature, top_k, top_p, use_cache, generator):
            piece = decoder.feed(int(nxt[0, 0]))
            if piece:
                out.write(piece)
                out.flush()
                pieces.append(piece)
        tail = decoder.flush()
        out.write(tail + "\n")
        out.flush()
        pieces.append(tail)
        texts.append("".join(pieces))
    return texts
