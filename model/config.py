"""ModelConfig: every number that decides the model's shape, in one typed record (nanoGPT's GPTConfig).

Design choices:
- One dataclass serves Hydra (the `model:` schema), `AttentionLanguageModel` (built from one instance) and
  checkpoints (which store it and rebuild the exact model); ranges are checked in `__post_init__`.
- `vocab_size` is unknown until a tokenizer exists (`with_vocab` fills it in).
- The architecture switches default to the lecture's GPT-2, so an older checkpoint rebuilds the model it was.
- SwiGLU's hidden size is 8/3 of the embedding (a multiple of 8): about the parameters of the 4x GELU MLP.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from common import config_checks as checks
from common.errors import ConfigError

ATTENTION_KINDS = ("heads", "fused")
POSITIONS = ("learned", "rope")
NORMS = ("layernorm", "rmsnorm")
MLPS = ("gelu", "relu2", "swiglu")
INITS = ("gpt2", "torch")
EMBEDDINGS = ("token", "jamo")
HEADS = ("softmax", "jamo")
JAMO_INITIALS = ("pairs", "linear")
# Every field that picks one of several kinds, and the kinds. Each place that restates the forward pass (the
# decode step, the exported modeling code) must handle every kind: tests/model/test_restated_forward.py enumerates them.
CHOICES = {
    "attention": ATTENTION_KINDS,
    "position": POSITIONS,
    "norm": NORMS,
    "mlp": MLPS,
    "init": INITS,
    "embedding": EMBEDDINGS,
    "head": HEADS,
    "jamo_initials": JAMO_INITIALS,
}
SWITCHES = ("tie_weights", "qk_norm", "zero_init_proj", "attention_gate", "value_embedding", "unet_skips")  # true/false


def levers(c: ModelConfig) -> list[str]:
    """The data-limited levers a config turns on (no stock Hugging Face class computes them)."""
    return [name for name in LEVERS if getattr(c, name)]


LEVERS = ("attention_gate", "value_embedding", "unet_skips", "logit_softcap")


@dataclass
class ModelConfig:
    vocab_size: int | None = None  # from the tokenizer; None in the YAML files
    context_length: int = 128
    embedding_size: int = 128
    # all heads together: each has head_size / num_heads dimensions (the lecture's is one head's: docs/en/lecture.md)
    head_size: int = 128
    num_heads: int = 4
    num_blocks: int = 4
    dropout: float | None = 0.0  # None (null in YAML) = auto: training resolves it (training/settings/auto.py)
    attention: str = "fused"  # fused (one QKV projection + SDPA) | heads (the lecture's Head modules)
    tie_weights: bool = False
    position: str = "learned"  # learned (GPT-2's position embedding) | rope (rotary, inside attention)
    norm: str = "layernorm"  # layernorm | rmsnorm
    mlp: str = "gelu"  # gelu | relu2 (squared ReLU) | swiglu
    qk_norm: bool = False  # RMS-normalise each head's queries and keys before their dot product
    zero_init_proj: bool = False  # attention and MLP output projections start at zero
    init: str = "gpt2"  # gpt2 (N(0, 0.02), scaled residual projections) | torch (PyTorch's layer defaults)
    embedding: str = "token"  # token (a row per token) | jamo (composed from its jamo: model/hangul/jamo_embedding.py)
    head: str = "softmax"  # softmax (a row per token) | jamo (initial, medial, final: model/hangul/jamo_head.py)
    jamo_initials: str = "pairs"  # model.head=jamo's stage 1: pairs (from 21 pair rows each) | linear (a row each)
    # Levers of the data-limited records (docs/en/ladder.md says what each measured here); all off by default.
    attention_gate: bool = False  # each head's output times a sigmoid gate read from the block's input (zero-init)
    value_embedding: bool = False  # every other block from the last adds a projection of the embedding to its values
    unet_skips: bool = False  # the first half's block outputs added (learned weights) to the second half's inputs
    logit_softcap: float = 0.0  # softmax head's logits squashed to (-cap, cap) by cap * tanh(z / cap); 0 = off

    def __post_init__(self) -> None:
        sizes = ("context_length", "embedding_size", "head_size", "num_heads", "num_blocks")
        for name in sizes + (("vocab_size",) if self.vocab_size is not None else ()):
            checks.positive_int(f"model.{name}", getattr(self, name))
        if self.head_size % self.num_heads:
            raise ConfigError(
                f"model.head_size={self.head_size} is not divisible by model.num_heads="
                f"{self.num_heads}; pick a head_size that is a multiple of num_heads"
            )
        checks.number_in("model.dropout", self.dropout, 0, 1, high_open=True, optional=True)
        for name in SWITCHES:
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"model.{name}={getattr(self, name)!r} is invalid: it must be true or false")
        for name, kinds in CHOICES.items():
            checks.one_of(f"model.{name}", getattr(self, name), kinds)
        if self.head == "jamo" and self.tie_weights:
            raise ConfigError(
                "model.head=jamo has no output matrix to tie to the embedding; set model.tie_weights=false"
            )
        checks.number_in("model.logit_softcap", self.logit_softcap, 0, float("inf"))
        if self.unet_skips and self.num_blocks < 2:
            raise ConfigError(
                "model.unet_skips joins the first half of the blocks to the second: it needs model.num_blocks >= 2"
            )
        if self.logit_softcap and self.head != "softmax":
            raise ConfigError(
                "model.logit_softcap caps the softmax head's logits; the staged head (model.head=jamo) "
                "has none: set model.logit_softcap=0"
            )
        if self.position == "rope" and self.head_dim % 2:
            raise ConfigError(
                f"model.position=rope needs an even head dimension, but head_size / num_heads = "
                f"{self.head_dim}; change model.head_size or model.num_heads"
            )

    @property
    def value_embedding_blocks(self) -> frozenset[int]:
        """The blocks that add the embedding's projection to their values: every other one, ending with the last
        (as the data-limited records place them); none without model.value_embedding."""
        L = self.num_blocks
        return frozenset(i for i in range(L) if (L - 1 - i) % 2 == 0) if self.value_embedding else frozenset()

    @property
    def head_dim(self) -> int:
        return self.head_size // self.num_heads

    @property
    def mlp_hidden(self) -> int:
        """Width of the MLP's hidden layer (for swiglu: of each of its two input halves)."""
        if self.mlp == "swiglu":
            return max(8, round(self.embedding_size / 3) * 8)  # 8/3 x, to the nearest multiple of 8
        return 4 * self.embedding_size

    def with_vocab(self, vocab_size: int) -> ModelConfig:
        return replace(self, vocab_size=vocab_size)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        """From a checkpoint's plain dict; keys this version does not know are an error, missing keys take
        their defaults (checkpoints written before an option existed were built without it), except that a staged
        head from before `jamo_initials` existed is the first version's, `linear`."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown model settings {', '.join(unknown)} (written by a newer version?)")
        if d.get("head") == "jamo" and "jamo_initials" not in d:
            d = {**d, "jamo_initials": "linear"}
        return cls(**d)
