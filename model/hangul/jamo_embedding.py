"""A syllable's input vector composed from its jamo (`model.embedding=jamo`); id - 1 = (initial * 21 + medial) * 28 +
final for the `hangul` tokenizer's syllables (model/hangul/__init__.py).

Design choices:
- A syllable's vector is its three jamo vectors plus its own row, starting at zero: an unseen syllable has its parts'
  meaning from the first step, a frequent one can learn its own. Other characters keep ordinary rows.
- An `nn.Embedding` (its rows are `weight`) holding the jamo table `parts`: it takes the plain embedding's place and
  the optimizer groups both alike.
- Every id's parts are one (V, 3) table, not saved (checkpoints hold parameters), into a 68-row jamo embedding (the
  last row zero, for non-syllables): one gather and one sum, in training and decoding alike.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

FIRST_ID, NUM_SYLLABLES = 1, 11172
NUM_INITIALS, NUM_MEDIALS, NUM_FINALS = 19, 21, 28
NUM_PARTS = NUM_INITIALS + NUM_MEDIALS + NUM_FINALS


def syllable_parts(vocab_size: int) -> Tensor:
    """(vocab_size, 3) long: the rows of each id's initial, medial and final in the jamo table, or the padding
    row (NUM_PARTS) three times for an id that is not a syllable."""
    parts = torch.full((vocab_size, 3), NUM_PARTS, dtype=torch.long)
    s = torch.arange(NUM_SYLLABLES)
    ids = s + FIRST_ID
    parts[ids, 0] = s // (NUM_MEDIALS * NUM_FINALS)
    parts[ids, 1] = NUM_INITIALS + (s // NUM_FINALS) % NUM_MEDIALS
    parts[ids, 2] = NUM_INITIALS + NUM_MEDIALS + s % NUM_FINALS
    return parts


class JamoEmbedding(nn.Embedding):
    """ids (...) -> their vectors (..., E): each id's own row, plus its three jamo vectors for a syllable."""

    def __init__(self, vocab_size: int, embedding_size: int):
        if vocab_size <= FIRST_ID + NUM_SYLLABLES - 1:
            raise ValueError("model.embedding=jamo needs the hangul tokenizer's ids (data.tokenizer=hangul)")
        super().__init__(vocab_size, embedding_size)
        self.parts = nn.Embedding(NUM_PARTS + 1, embedding_size, padding_idx=NUM_PARTS)
        self.register_buffer("table", syllable_parts(vocab_size), persistent=False)

    def forward(self, idx: Tensor) -> Tensor:
        return self.own_rows(idx) + self.jamo(idx)

    def own_rows(self, idx: Tensor) -> Tensor:
        return super().forward(idx)

    def jamo(self, idx: Tensor) -> Tensor:
        """The jamo part of the ids' vectors (..., E): zero for every id that is not a syllable."""
        return self.parts(self.table[idx]).sum(dim=-2)

    @torch.no_grad()
    def finish_init(self) -> None:
        """After the model's initialisation: a syllable starts as its jamo, its own row (a residual) at zero."""
        self.weight[FIRST_ID : FIRST_ID + NUM_SYLLABLES].zero_()
        self.parts.weight[NUM_PARTS].zero_()  # the padding row of non-syllables
