"""The sample printed at the end of training, measured in characters whatever the tokenizer."""

from __future__ import annotations

import numpy as np
import torch

from model import AttentionLanguageModel
from model.streaming import stream
from tokenizer import Tokenizer

PROMPT_TOKENS = 8
TEMPERATURE = 0.8


def sample_chars(
    model: AttentionLanguageModel,
    tokenizer: Tokenizer,
    val_tokens: np.ndarray,
    num_chars: int,
    device: torch.device,
    seed: int,
) -> str:
    """The first few tokens of the validation split, continued by `num_chars` new characters.

    A jamo tokenizer spends up to three tokens on a syllable, so tokens are drawn until the decoded text has
    the characters asked for (at most three tokens per character, the most any tokenizer here needs).
    """
    ids = val_tokens[:PROMPT_TOKENS].astype("int64").tolist()
    prompt = torch.tensor([ids], device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    decoder = tokenizer.stream_decoder()
    head = "".join(decoder.feed(i) for i in ids)  # a syllable the prompt leaves open completes below
    new: list[str] = []
    length = 0
    for nxt, _ in stream(model, prompt, 3 * num_chars, temperature=TEMPERATURE, generator=generator):
        piece = decoder.feed(int(nxt[0, 0]))
        new.append(piece)
        length += len(piece)
        if length >= num_chars:
            break
    new.append(decoder.flush())
    return head + "".join(new)[:num_chars]
