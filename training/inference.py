"""Loading a trained model for sampling, and streaming its text."""

from __future__ import annotations

import sys
import warnings
from typing import TextIO

import torch

from common.errors import UserError
from model import AttentionLanguageModel
from tokenizer import tokenizer_from_dict
from training.checkpoint import load_checkpoint, resolve_checkpoint


def load_model(ckpt: str | None, device: torch.device) -> tuple[AttentionLanguageModel, object, dict]:
    """(model on `device` in eval mode, tokenizer, checkpoint payload) from a run dir or checkpoint file."""
    path = resolve_checkpoint(ckpt)
    payload = load_checkpoint(path)
    tokenizer = tokenizer_from_dict(payload["tokenizer"])
    try:
        model = AttentionLanguageModel(**payload["model_config"])
        model.load_state_dict(payload["model"])
    except (TypeError, ValueError, RuntimeError) as e:
        raise UserError(f"checkpoint {path} does not match this version's model ({str(e).splitlines()[0]})") from None
    if model.config["vocab_size"] != tokenizer.vocab_size:
        raise UserError(f"checkpoint {path} is inconsistent: model and tokenizer vocabularies differ")
    payload["path"] = str(path)
    return model.to(device).eval(), tokenizer, payload


def prompt_ids(tokenizer, prompt: str) -> list[int]:
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


def stream_samples(model: AttentionLanguageModel, tokenizer, prompt: str, max_new_tokens: int, num_samples: int,
                   temperature: float, top_k: int | None, top_p: float | None, seed: int, device: torch.device,
                   use_cache: bool = True, out: TextIO = sys.stdout) -> list[str]:
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
