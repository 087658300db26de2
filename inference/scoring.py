"""Scoring a whole text file with a trained model: loss per token and bits per original character.

Design choices (docs/en/evaluation.md):
- Every token is predicted once; the last window ends at the last token, so every window is full and batches stack.
- Bits per character divide by the text's characters, not its tokens, so jamo and char models compare fairly;
  `<unk>` characters (all their tokens) are left out and counted apart.
- A hangul model's score is also split into seen and unseen syllables in the same pass; null for a vocabulary
  saved before it recorded its training characters ("unknown" is not "none unseen").
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from common.errors import UserError
from common.names import shown_name, shown_names
from data.corpus_files import corpus_files
from tokenizer import UNK_ID, Tokenizer


@dataclass
class EncodedText:
    ids: np.ndarray  # (N,) int32 token ids
    scored: np.ndarray  # (N,) bool: this token counts as a target
    num_chars: int  # characters whose tokens are scored
    num_unknown: int  # characters left out because the vocabulary cannot represent them
    unknown: Counter[str]
    unseen: np.ndarray | None = None  # (N,) bool: token of a character the training text lacked; None: no record
    num_unseen: int = 0  # scored characters among them


@dataclass
class Score:
    nats: float  # total loss over the scored tokens
    tokens: int
    unseen_nats: float = 0.0  # the part of `nats` on tokens marked unseen

    @property
    def loss(self) -> float:
        return self.nats / self.tokens if self.tokens else float("nan")


def _training_ids(tokenizer: Tokenizer) -> np.ndarray | None:
    """Ids of the characters a char tokenizer of the same training text would hold; None without a record."""
    vocab = getattr(tokenizer, "char_vocabulary", lambda: None)()  # only hangul records it
    return None if vocab is None else np.unique(tokenizer.encode("".join(vocab), normalized=True))


def encode_for_scoring(tokenizer: Tokenizer, chunks: Iterable[str]) -> EncodedText:
    """Ids of the text, and which of them are scored: not the first character, not unknown characters."""
    ids, scored, unseen, unknown = [], [], [], Counter()
    trained = _training_ids(tokenizer)
    num_chars = num_unseen = 0
    for chunk in chunks:
        chunk_ids = tokenizer.encode(chunk)
        counts = tokenizer.token_counts(chunk)  # (chars,) tokens per character
        if not len(counts):
            continue
        starts = np.cumsum(counts) - counts
        char_unknown = np.add.reduceat((chunk_ids == UNK_ID).astype(np.int64), starts) > 0  # (chars,)
        char_scored = ~char_unknown
        if not ids:  # the text's first character: nothing before it to predict it from
            char_scored[0] = False
        if char_unknown.any():
            unknown.update(tokenizer.unknown_chars(chunk))
        num_chars += int(char_scored.sum())
        ids.append(chunk_ids)
        scored.append(np.repeat(char_scored, counts))  # (tokens,)
        if trained is not None:  # one token per character here (hangul), so tokens are characters
            unseen.append(~np.isin(chunk_ids, trained) & scored[-1])
            num_unseen += int(unseen[-1].sum())
    empty = [np.zeros(0, bool)]  # a text with no character to score
    return EncodedText(
        np.concatenate(ids or [np.zeros(0, np.int32)]),
        np.concatenate(scored or empty),
        num_chars,
        sum(unknown.values()),
        unknown,
        None if trained is None else np.concatenate(unseen or empty),
        num_unseen,
    )


def window_plan(num_tokens: int, context_length: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """(start of each window, offset of its first new target): targets 1..num_tokens-1 each scored once; a window
    at b predicts tokens b+1..b+L, those before b+1+offset scored by an earlier window."""
    if not 1 <= stride <= context_length:
        raise UserError(f"stride={stride} is invalid: it must be between 1 and the context length {context_length}")
    last = num_tokens - 1  # index of the last target
    length = min(context_length, last)
    starts, offsets = [], []
    done = b = 0  # targets 1..done are scored; b: the next window's start
    while done < last:
        b = min(b, last - length)  # the last window ends at the last token
        starts.append(b)
        offsets.append(done - b)  # window position j predicts token b+j+1; new ones are those > done
        done = b + length
        b += stride
    return np.array(starts, dtype=np.int64), np.array(offsets, dtype=np.int64)


@torch.no_grad()
def score_tokens(
    model: nn.Module,
    ids: np.ndarray,
    scored: np.ndarray,
    context_length: int,
    stride: int,
    batch_size: int,
    device: torch.device,
    autocast_ctx: Callable,
    progress: bool = True,
    unseen: np.ndarray | None = None,
) -> Score:
    """Total loss (nats) and count of scored targets of `ids`, each predicted once (and of those `unseen` marks)."""
    if len(ids) < 2:
        return Score(0.0, 0)
    if batch_size < 1:
        raise UserError(f"batch_size={batch_size} is invalid: it must be a positive integer")
    starts, offsets = window_plan(len(ids), context_length, stride)
    length = min(context_length, len(ids) - 1)
    positions = np.arange(length + 1)
    tokens = torch.from_numpy(ids.astype(np.int64))
    mask_all = torch.from_numpy(scored)
    unseen_all = None if unseen is None else torch.from_numpy(unseen)
    model.eval()
    nats, count, unseen_nats = 0.0, 0, 0.0
    bar = tqdm(
        total=len(starts),
        desc="evaluate",
        unit="window",
        disable=not progress or len(starts) <= batch_size,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    for i in range(0, len(starts), batch_size):
        b = torch.from_numpy(starts[i : i + batch_size])
        index = b[:, None] + torch.from_numpy(positions)  # (B, L+1)
        windows = tokens[index].to(device)
        x, y = windows[:, :-1], windows[:, 1:]  # (B, L) each
        new = torch.arange(length)[None, :] >= torch.from_numpy(offsets[i : i + batch_size])[:, None]  # (B, L)
        mask = (new & mask_all[index[:, 1:]]).to(device)
        with autocast_ctx():
            if hasattr(model, "token_losses"):  # ours (a staged head scores each target through its stages)
                losses = model.token_losses(x, y)  # (B, L) nats
            else:  # a peer's model (benchmarks/nanogpt_peer.py): logits
                logits, _ = model(x)  # (B, L, V)
                losses = F.cross_entropy(logits.float().transpose(1, 2), y, reduction="none")
        nats += float(losses[mask].double().sum())
        count += int(mask.sum())
        if unseen_all is not None:
            marked = mask & unseen_all[index[:, 1:]].to(device)
            unseen_nats += float(losses[marked].double().sum())
        bar.update(len(b))
    bar.close()
    return Score(nats, count, unseen_nats)


def evaluate_file(
    model: nn.Module,
    tokenizer: Tokenizer,
    path: str | Path,
    stride: int | None,
    batch_size: int,
    device: torch.device,
    autocast_ctx: Callable,
    progress: bool = True,
) -> dict:
    """Score the text file `path`; the numbers `evaluate.py` prints."""
    context_length = model.context_length
    stride = context_length if stride in (None, "") else int(stride)
    text = encode_for_scoring(tokenizer, corpus_files(path).chunks())  # a file, or a folder's documents
    if text.num_chars == 0:
        raise UserError(f"{path} has nothing to score: it needs at least two characters the model knows")
    score = score_tokens(
        model, text.ids, text.scored, context_length, stride, batch_size, device, autocast_ctx, progress, text.unseen
    )
    return {
        "loss": score.loss,
        "bpc": score.nats / math.log(2) / text.num_chars,
        "chars": text.num_chars,
        "tokens": score.tokens,
        "tokens_per_char": score.tokens / text.num_chars,
        "unknown_chars": text.num_unknown,
        "unknown_examples": "".join(c for c, _ in text.unknown.most_common(20)),
        "tokenizer": tokenizer.kind,
        "context_length": context_length,
        "stride": stride,
        "data": str(path),
        **_seen_split(tokenizer, text, score),
    }


def json_ready(result: dict) -> dict:
    """`result` as strict JSON holds it: a number not finite becomes null, a name not valid UTF-8 shows U+FFFD."""
    return {
        shown_name(k): None if isinstance(v, float) and not math.isfinite(v) else shown_names(v)
        for k, v in result.items()
    }


def _seen_split(tokenizer: Tokenizer, text: EncodedText, score: Score) -> dict:
    """bpc on the characters the training text held and on those it lacked (hangul only)."""
    if text.unseen is None:  # char and jamo cannot represent an unseen character; an old hangul vocabulary: null
        keys = ("bpc_seen", "bpc_unseen", "chars_seen", "chars_unseen")
        return dict.fromkeys(keys) if tokenizer.kind == "hangul" else {}
    seen_chars = text.num_chars - text.num_unseen
    seen_nats = score.nats - score.unseen_nats
    return {
        "bpc_seen": seen_nats / math.log(2) / seen_chars if seen_chars else None,
        "bpc_unseen": score.unseen_nats / math.log(2) / text.num_unseen if text.num_unseen else None,
        "chars_seen": seen_chars,
        "chars_unseen": text.num_unseen,
    }
