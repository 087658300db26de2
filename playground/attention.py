"""What each attention head looked at from one position of a text, as plain numbers for the page to draw.

Design choices:
- Beyond the context window the weights are the window's that ends at the position; `start` says where it begins.
- Weights are rounded to 4 decimals: more digits cannot be seen on the page and only lengthen the answer."""

from __future__ import annotations

import torch

from model.attention_maps import attention_maps
from playground.cache import CachedRun
from playground.schemas import ApiError


def attention_row(cached: CachedRun, text: str, position: int | None) -> dict:
    """Weights (blocks x heads x keys) of the query at token `position` (None = the last token) of `text`."""
    run = cached.run
    ids = run.tokenizer.encode(text).tolist()
    if not ids:
        raise ApiError(422, "text", "text is empty: give the text whose attention to show")
    if position is None:
        position = len(ids) - 1
    if not 0 <= position < len(ids):
        raise ApiError(
            422,
            "position",
            f"position must be in [0, {len(ids) - 1}] for this text ({len(ids)} tokens), got {position}",
        )
    start = max(0, position + 1 - run.model.context_length)
    window = torch.tensor(ids[start : position + 1], dtype=torch.long, device=next(run.model.parameters()).device)
    with cached.lock, torch.inference_mode():
        maps = attention_maps(run.model, window)  # (L, H, T, T)
    rows = maps[:, :, -1, :].float().cpu()  # the query is the window's last token
    return {
        "run": cached.name,
        "model_weights": run.weights.kind,  # which set of the run's weights (`weights` is the attention's)
        "position": position,
        "start": start,
        "tokens": [run.tokenizer.decode([i]) for i in ids[start : position + 1]],
        "num_blocks": rows.shape[0],
        "num_heads": rows.shape[1],
        "weights": [[[round(w, 4) for w in head] for head in block] for block in rows.tolist()],
    }
