"""Training only the syllable rows a run can reach (`train.syllable_rows=seen`): the Hangul-aware model's two
11,172-row tables held as the rows its training text uses plus one shared zero row.

Design choices:
- Both tables start at zero and a text holds a few thousand syllables, yet a dense table costs every step the
  gradient, clipping, update and (bf16) cast of all its rows. Unseen input rows get no gradient anyway; a dense head
  would still push down an unseen syllable's row, which a held one leaves at zero (docs/en/hangul.md).
- Kept: every syllable of the training split and every non-zero row (a fine-tuned run keeps what it learned), the
  same set on resume, so the optimizer's moments fit.
- The training loop's layout alone: checkpoints hold the full tables (`dense_state_dict`), and `params_left_out`
  keeps the parameter count the same either way (model/counts.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.hangul.jamo_embedding import FIRST_ID, NUM_SYLLABLES, JamoEmbedding
from model.hangul.jamo_head import JamoHead

# HeldReadoutRows.dot multiplies h with the whole held table while it has at most this many rows per score it needs
PRODUCT_ROWS_PER_SLOT = 64


def _kept_rows(table: Tensor, reachable: Tensor, first: int) -> Tensor:
    """Rows of `table` to keep: those of the syllables in `reachable` (ids; the syllables' rows start at `first`),
    every row that is not zero, and every row outside the syllables' range."""
    keep = table.detach().ne(0).any(dim=1)
    outside = torch.ones_like(keep)
    outside[first : first + NUM_SYLLABLES] = False
    reachable = reachable.long()
    ids = reachable[(reachable >= FIRST_ID) & (reachable < FIRST_ID + NUM_SYLLABLES)].to(keep.device)
    keep[ids - FIRST_ID + first] = True
    return (keep | outside).nonzero().squeeze(1)


def _with_zero_row(full: Tensor, kept: Tensor) -> Tensor:
    """The held layout of a dense table (num_rows, E): its `kept` rows, then the shared zero row."""
    return torch.cat([full.detach()[kept], full.new_zeros(1, full.shape[1])])


class _HeldRows:
    """What both held tables share: `index`, each dense row's row in the held table (`pad`, the zero row's, for
    those not kept), and the parameters not held (`params_left_out`)."""

    def _hold(self, full: Tensor, kept: Tensor) -> Tensor:
        """Records the layout of `full`'s `kept` rows; returns the held table's values."""
        self.pad = len(kept)
        index = torch.full((full.shape[0],), len(kept), dtype=torch.long, device=kept.device)
        index[kept] = torch.arange(len(kept), device=kept.device)
        self.register_buffer("index", index, persistent=False)
        self.params_left_out = (full.shape[0] - len(kept) - 1) * full.shape[1]
        return _with_zero_row(full, kept)

    def held(self, full: Tensor) -> Tensor:
        """A dense table of these rows in this layout (for weights saved dense: an average, a checkpoint)."""
        return _with_zero_row(full, (self.index != self.pad).nonzero().squeeze(1))  # ascending, as `_hold` numbered

    def full(self) -> Tensor:
        """The rows as they would be dense: (num_rows, E)."""
        return self.weight[self.index]


class HeldJamoEmbedding(_HeldRows, JamoEmbedding):
    """The jamo input (`JamoEmbedding`) with its own rows held as the kept rows plus a shared zero (padding) row;
    its jamo table is the dense one's."""

    def __init__(self, dense: JamoEmbedding, kept: Tensor):
        full = dense.weight.detach()
        nn.Embedding.__init__(
            self, len(kept) + 1, full.shape[1], padding_idx=len(kept), device=full.device, dtype=full.dtype
        )  # not JamoEmbedding's: the jamo table is taken over, not made
        self.parts = dense.parts
        self.register_buffer("table", dense.table, persistent=False)
        with torch.no_grad():
            self.weight.copy_(self._hold(full, kept))

    def own_rows(self, idx: Tensor) -> Tensor:
        return F.embedding(self.index[idx], self.weight, self.padding_idx)


class HeldReadoutRows(_HeldRows, nn.Module):
    """The staged head's read-out rows, a (11,172, E) matrix, held as kept rows plus a shared zero row. Not an
    `nn.Embedding`: the optimizer groups it with the matrices, as it grouped the dense table."""

    def __init__(self, full: Tensor, kept: Tensor):
        super().__init__()
        self.weight = nn.Parameter(self._hold(full, kept))

    def rows(self, index: Tensor, dtype: torch.dtype) -> Tensor:
        """index (...) into the dense table -> those rows (..., E) in `dtype` (the small table is cast first)."""
        return F.embedding(self.index[index], self.weight.to(dtype), padding_idx=self.pad)

    def dot(self, h: Tensor, index: Tensor) -> Tensor:
        """h (N, E), index (N, k) into the dense table -> h · each indexed row (N, k), in h's dtype.

        While the held table is small next to k rows per position (a text's few thousand syllables against a
        pair's 28 finals), one (N, E) x (E, kept) product and a gather of its k columns is cheaper than gathering
        N x k rows and multiplying them out: the product runs on the matrix units, the gather and its backward
        move N x k x E values through memory (`python -m benchmarks.row_scores` times both)."""
        if self.weight.shape[0] > PRODUCT_ROWS_PER_SLOT * index.shape[-1]:
            return self.dot_by_gather(h, index)
        return self.dot_by_product(h, index)

    def dot_by_gather(self, h: Tensor, index: Tensor) -> Tensor:
        return (self.rows(index, h.dtype) * h[:, None, :]).sum(-1)  # (N, k, E) -> (N, k)

    def dot_by_product(self, h: Tensor, index: Tensor) -> Tensor:
        held = self.index[index]  # (N, k)
        scores = (h @ self.weight.to(h.dtype).T).gather(1, held)  # (N, kept) -> (N, k)
        # the shared zero row's score is 0 already; the mask keeps it out of the gradient, as padding does
        return scores.masked_fill(held == self.pad, 0)

    def scores(self, h: Tensor) -> Tensor:
        """h (N, E) -> h times every dense row (N, 11172): one product with the kept rows, spread by the index."""
        return (h @ self.weight.to(h.dtype).T)[:, self.index]


def compact_syllable_rows(model: nn.Module, reachable: Tensor) -> int:
    """Hold the model's per-syllable tables as kept rows (see the module docstring); `reachable`: the ids of
    the training split. Returns the number of dense rows no longer held. Call before building the optimizer."""
    dropped = 0
    emb, head = model.token_embedding, model.lm_head
    tied = head.weight is emb.weight if isinstance(head, nn.Linear) else False
    if type(emb) is JamoEmbedding and not tied:
        kept = _kept_rows(emb.weight, reachable, FIRST_ID)
        model.token_embedding = HeldJamoEmbedding(emb, kept)
        dropped += emb.num_embeddings - len(kept)
    if isinstance(head, JamoHead) and isinstance(head.final_rows, nn.Parameter):
        full = head.final_rows.detach()
        kept = _kept_rows(full, reachable, 0)
        del head.final_rows
        head.final_rows = HeldReadoutRows(full, kept)
        dropped += NUM_SYLLABLES - len(kept)
    return dropped


def dense_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """model.state_dict() with every held table written out dense, under the key of the dense layout."""
    state = model.state_dict()
    for name, module in model.named_modules():
        if isinstance(module, _HeldRows):
            state.pop(f"{name}.weight")
            key = f"{name}.weight" if isinstance(module, HeldJamoEmbedding) else name
            state[key] = module.full().detach().clone()
    return state


def held_state_dict(model: nn.Module, dense: dict[str, Tensor]) -> dict[str, Tensor]:
    """`dense_state_dict`'s inverse: a state dict with dense tables, in the layout of `model`'s held tables."""
    state = dict(dense)
    for name, module in model.named_modules():
        if isinstance(module, HeldJamoEmbedding):
            state[f"{name}.weight"] = module.held(state[f"{name}.weight"])
        elif isinstance(module, HeldReadoutRows):
            state[f"{name}.weight"] = module.held(state.pop(name))
    return state
