"""A staged output layer for the hangul tokenizer's ids (`model.head=jamo`): a syllable is predicted jamo by
jamo, p(initial) · p(medial | initial) · p(final | initial, medial), every other character in the first stage.

Design choices:
- Stage 1 is one softmax over the 19 initials and every id that is not a syllable; stages 2 and 3 choose the medial
  and the final, each seeing the hidden state and the parts already chosen (GELU(h·A + parts)·B). Every stage is
  normalised, so the distribution over all representable ids sums to 1.
- Each (initial, medial) pair and each syllable also has its own read-out row, starting at zero: what is its own on
  top of what the shared stages give it from its parts (docs/en/hangul.md). A syllable's row is a gather of its
  pair's 28 rows, not a product with all 11,172.
- `initials="pairs"` (the default) scores an initial by its own row plus the log-sum-exp of its 21 pair rows, so an
  initial is as likely as the pairs it opens; `"linear"` (one row per initial) rebuilds older checkpoints.
- Training and scoring use teacher forcing (`token_losses`: only each target's stages); generation builds the whole
  distribution (`joint`, `forward`), so sampling acts on whole characters. It takes the softmax head's place as
  `lm_head`, with its interface (older checkpoints named it `jamo_head`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from model.config import JAMO_INITIALS
from model.hangul.jamo_embedding import FIRST_ID, NUM_FINALS, NUM_INITIALS, NUM_MEDIALS, NUM_SYLLABLES

LAST_ID = FIRST_ID + NUM_SYLLABLES - 1
PER_INITIAL = NUM_MEDIALS * NUM_FINALS


class JamoHead(nn.Module):
    """hidden (..., E) -> log-probabilities over every id (`joint`, `forward`), or each target's negative
    log-likelihood (`token_losses`)."""

    keep_init = ("final_rows",)  # a syllable's own read-out row starts at zero, as its input row does

    def __init__(self, vocab_size: int, embedding_size: int, initials: str = "pairs"):
        super().__init__()
        if vocab_size <= LAST_ID:
            raise ValueError("model.head=jamo needs the hangul tokenizer's ids (data.tokenizer=hangul)")
        if initials not in JAMO_INITIALS:
            raise ValueError(f"initials={initials!r}: one of {', '.join(JAMO_INITIALS)}")
        E = embedding_size
        self.vocab_size, self.initials = vocab_size, initials
        self.num_others = vocab_size - NUM_SYLLABLES  # <unk> and the ids after the syllables
        self.stage1 = nn.Linear(E, NUM_INITIALS + self.num_others, bias=False)
        self.medial_in = nn.Linear(E, E)
        self.medial_initial = nn.Embedding(NUM_INITIALS, E)
        self.medial_out = nn.Linear(E, NUM_MEDIALS, bias=False)
        self.final_in = nn.Linear(E, E)
        self.final_initial = nn.Embedding(NUM_INITIALS, E)
        self.final_medial = nn.Embedding(NUM_MEDIALS, E)
        self.final_out = nn.Linear(E, NUM_FINALS, bias=False)
        self.medial_rows = nn.Parameter(torch.zeros(NUM_INITIALS * NUM_MEDIALS, E))
        self.final_rows = nn.Parameter(torch.zeros(NUM_SYLLABLES, E))

    def forward(self, h: Tensor) -> Tensor:
        return self.joint(h)

    def logits_and_loss(self, h: Tensor, targets: Tensor) -> tuple[None, Tensor]:
        """The training step's mean loss; the whole distribution is never built when the targets are known."""
        return None, self.token_losses(h, targets).mean()

    def token_losses(self, h: Tensor, targets: Tensor) -> Tensor:
        """h: (..., E), targets: (...) ids -> their negative log-likelihoods in nats (...), in float32."""
        shape = targets.shape
        h, targets = h.reshape(-1, h.shape[-1]), targets.reshape(-1)  # (M, E), (M,)
        syl = (targets >= FIRST_ID) & (targets <= LAST_ID)
        s = (targets - FIRST_ID).clamp(0, NUM_SYLLABLES - 1)  # other ids stand in as syllable 0, masked below
        pair = s // NUM_FINALS  # (initial, medial) pair; the parts below all derive from it
        ini, med, fin = s // PER_INITIAL, pair % NUM_MEDIALS, s % NUM_FINALS
        # stage 1's row: a syllable's initial; after the 19 initials, <unk> (0) then id i > LAST_ID at i - 11172
        first = torch.where(syl, ini, NUM_INITIALS + torch.where(targets > LAST_ID, targets - NUM_SYLLABLES, targets))
        logits1, pair_scores = self._stage1(h)
        loss = F.cross_entropy(logits1, first, reduction="none")
        # Stages 2 and 3 run at every position, the mask dropping the other ids' terms: a boolean selection would give
        # each batch its own row count, a new kernel plan in the CPU's matmul library, and DDP wants every parameter
        # in each step's graph, even with no syllable at all.
        z2 = F.gelu(self.medial_in(h) + self.medial_initial(ini))
        z3 = F.gelu(self.final_in(h) + self.final_initial(ini) + self.final_medial(med))
        rows = pair_scores.view(-1, NUM_INITIALS, NUM_MEDIALS)  # the initial's 21 row scores, from stage 1
        own2 = rows.gather(1, ini[:, None, None].expand(-1, 1, NUM_MEDIALS)).squeeze(1)
        l2 = self.medial_out(z2) + own2  # (M, 21)
        l3 = self.final_out(z3) + self._own(h, self.final_rows, pair, NUM_FINALS)  # (M, 28)
        extra = F.cross_entropy(l2.float(), med, reduction="none") + F.cross_entropy(l3.float(), fin, reduction="none")
        return (loss + extra * syl).view(shape)

    def _stage1(self, h: Tensor) -> tuple[Tensor, Tensor]:
        """h (..., E) -> stage 1's logits (..., 19 + others) in float32, and the scores of the 399 (initial, medial)
        rows (..., 399): stage 2's own part, which with initials="pairs" stage 1's initials also gather."""
        logits = self.stage1(h).float()
        pairs = h @ self.medial_rows.to(h.dtype).T  # (..., 399)
        if self.initials == "linear":
            return logits, pairs
        gathered = torch.logsumexp(pairs.float().unflatten(-1, (NUM_INITIALS, NUM_MEDIALS)), dim=-1)  # (..., 19)
        return torch.cat([logits[..., :NUM_INITIALS] + gathered, logits[..., NUM_INITIALS:]], dim=-1), pairs

    @staticmethod
    def _own(hs: Tensor, rows: Tensor | nn.Module, group: Tensor, size: int) -> Tensor:
        """hs (N, E), group (N,) -> (N, size): hs · each row of its group (the finals of an (initial, medial) pair).
        The table is cast before the gather: under bf16 autocast that halves the bytes the gather and its backward
        move, which dominate this head's cost."""
        kind = hs.device.type
        if torch.is_autocast_enabled(kind):
            hs = hs.to(torch.get_autocast_dtype(kind))
        if not isinstance(rows, Tensor):  # kept rows (model/hangul/held_rows.py, while training)
            return rows.dot(hs, group[:, None] * size + torch.arange(size, device=group.device))
        r = rows.to(hs.dtype).view(-1, size, hs.shape[-1]).index_select(0, group)  # the dense table: (N, size, E)
        # A batched matrix-vector product as a product and a sum: bmm (and einsum, which becomes bmm) loops over
        # the N tiny matrices on the CPU, several times slower here, most of all in bf16 where it is not native.
        return (r * hs[:, None, :]).sum(-1)

    def joint(self, h: Tensor) -> Tensor:
        """h: (..., E) -> log-probabilities (..., V) of every id, in id order, float32 (they sum to 1)."""
        shape = h.shape[:-1]
        h = h.reshape(-1, h.shape[-1])  # (N, E)
        logits1, pairs = self._stage1(h)
        s1 = F.log_softmax(logits1, dim=-1)  # (N, 19 + others)
        z2 = F.gelu(self.medial_in(h)[:, None] + self.medial_initial.weight)  # (N, 19, E)
        l2 = self.medial_out(z2) + pairs.view(-1, NUM_INITIALS, NUM_MEDIALS)
        s2 = F.log_softmax(l2.float(), dim=-1)  # (N, 19, 21)
        pair = (self.final_initial.weight[:, None] + self.final_medial.weight[None]).flatten(0, 1)  # (399, E)
        z3 = F.gelu(self.final_in(h)[:, None] + pair)  # (N, 399, E)
        rows = self.final_rows
        own = h @ rows.to(h.dtype).T if isinstance(rows, Tensor) else rows.scores(h)  # (N, 11172)
        l3 = self.final_out(z3) + own.view(-1, NUM_INITIALS * NUM_MEDIALS, NUM_FINALS)
        s3 = F.log_softmax(l3.float(), dim=-1).view(-1, NUM_INITIALS, NUM_MEDIALS, NUM_FINALS)
        syllables = s1[:, :NUM_INITIALS, None, None] + s2[..., None] + s3  # (N, 19, 21, 28)
        others = s1[:, NUM_INITIALS:]  # (N, others): <unk>, then the ids after the syllables
        out = torch.cat([others[:, :1], syllables.flatten(1), others[:, 1:]], dim=-1)  # (N, V)
        return out.view(*shape, self.vocab_size)
