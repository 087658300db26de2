"""Sampling text from a loaded model: prompt ids, and samples streamed as they are produced."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, TextIO

import torch

from model import AttentionLanguageModel
from model.sampling import TokenGrammar
from model.streaming import stream
from tokenizer import Tokenizer

if TYPE_CHECKING:
    from inference.config import GenerateConfig

SEPARATOR = "\n" + "-" * 40 + "\n"  # between samples


def prompt_ids(tokenizer: Tokenizer, prompt: str) -> list[int]:
    """Ids of the prompt; unseen characters are kept as <unk> with a warning naming them."""
    unknown = tokenizer.unknown_chars(prompt)
    if unknown:
        names = ", ".join(f"{c!r}" for c in unknown)
        warnings.warn(f"the prompt has characters the model has never seen ({names}); they become <unk>", stacklevel=2)
    ids = tokenizer.encode(prompt).tolist()
    if not ids:  # an empty prompt starts from a line break (or the first character of the vocabulary)
        newline = tokenizer.encode("\n").tolist()
        ids = newline if newline and newline[0] != 0 else [1]
    return ids


def token_grammar(tokenizer: Tokenizer) -> TokenGrammar | None:
    """The spelling rules sampling must follow (the jamo tokenizer's: whole syllables only), or None."""
    rules = getattr(tokenizer, "next_token_rules", None)  # optional: only tokenizers that spell in parts
    if rules is None:
        return None
    state, allowed = rules()
    return TokenGrammar(torch.as_tensor(state), torch.as_tensor(allowed))


BATCH_ROWS = 32  # samples generated together; more only add memory (the cache grows with the batch)


def stream_samples(
    model: AttentionLanguageModel,
    tokenizer: Tokenizer,
    c: GenerateConfig,
    device: torch.device,
    out: TextIO = sys.stdout,
) -> list[str]:
    """Write the samples generate.py's settings `c` ask for to `out` (a batch's first row as it streams); the same
    seed gives the same text. Batches of BATCH_ROWS rows share one generator: row n is reproducible, not the n-th of
    separate generations."""
    ids = prompt_ids(tokenizer, c.prompt)
    generator = torch.Generator(device=device).manual_seed(c.seed)
    grammar = token_grammar(tokenizer)
    texts: list[str] = []
    for first in range(0, c.num_samples, BATCH_ROWS):
        rows = min(BATCH_ROWS, c.num_samples - first)
        idx = torch.tensor([ids] * rows, dtype=torch.long, device=device)
        steps = stream(
            model, idx, c.max_new_tokens, c.temperature, c.top_k, c.top_p, c.use_cache, generator, grammar=grammar
        )
        rows_done = _finished_rows(steps, grammar, c.max_new_tokens)
        texts += _write_batch(rows_done, tokenizer, c.prompt, rows, out, separate_first=first > 0)
    return texts


def _finished_rows(stream: Iterator, grammar: TokenGrammar | None, max_new_tokens: int) -> Iterator:
    """(ids (B, 1) with -1 for a row that is done, logits): past max_new_tokens the stream only finishes the
    characters some rows are inside; a row that was between characters once takes no more tokens."""
    done = None
    for step, (nxt, logits) in enumerate(stream):
        if grammar is not None and step >= max_new_tokens:
            nxt = nxt.masked_fill(done[:, None], -1)
        yield nxt, logits
        if grammar is not None and step + 1 >= max_new_tokens:
            between = grammar.state.to(nxt.device)[nxt.clamp(min=0)[:, 0]] == 0
            done = between if done is None else done | between


def _write_batch(
    stream: Iterator, tokenizer: Tokenizer, prompt: str, rows: int, out: TextIO, separate_first: bool
) -> list[str]:
    """Decode a batch's rows; row 0 is written as it streams, the others once the batch is done."""
    if separate_first:
        out.write(SEPARATOR)
    out.write(prompt)
    out.flush()
    pieces = [[prompt] for _ in range(rows)]
    decoders = [tokenizer.stream_decoder() for _ in range(rows)]
    for nxt, _ in stream:
        for n, token in enumerate(nxt[:, 0].tolist()):
            if token < 0:  # a row that is done
                continue
            piece = decoders[n].feed(token)
            if piece:
                pieces[n].append(piece)
                if n == 0:
                    out.write(piece)
                    out.flush()
    for n in range(rows):
        pieces[n].append(decoders[n].flush())
    out.write(pieces[0][-1] + "\n")
    for n in range(1, rows):
        out.write(SEPARATOR + "".join(pieces[n]) + "\n")
    out.flush()
    return ["".join(p) for p in pieces]
