"""ModelConfig: every number that decides the model's shape, in one typed record (nanoGPT's GPTConfig).

Design choices:
- One dataclass serves three readers: Hydra (it is the `model:` schema, so a wrong type or an unknown key is
  refused while the config is composed), `AttentionLanguageModel` (built from one instance) and checkpoints
  (which store it as a plain dict and rebuild the exact model from it).
- Ranges are checked in `__post_init__`, the one place; it runs when Hydra's config becomes an object
  (`OmegaConf.to_object`) and when code builds a config directly.
- `vocab_size` is unknown until a tokenizer exists, so configs composed from YAML leave it `None`;
  `with_vocab` fills it in. A model cannot be built without it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from common.errors import ConfigError

ATTENTION_KINDS = ("heads", "fused")


@dataclass
class ModelConfig:
    vocab_size: int | None = None  # from the tokenizer; None in the YAML files
    context_length: int = 128
    embedding_size: int = 128
    head_size: int = 128  # all heads together: each head has head_size / num_heads dimensions
    num_heads: int = 4
    num_blocks: int = 4
    dropout: float = 0.0
    attention: str = "fused"  # fused (one QKV projection + SDPA) | heads (the lecture's Head modules)
    tie_weights: bool = False

    def __post_init__(self) -> None:
        sizes = ("context_length", "embedding_size", "head_size", "num_heads", "num_blocks")
        for name in sizes + (("vocab_size",) if self.vocab_size is not None else ()):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"model.{name}={value!r} is invalid: it must be a positive integer")
        if self.head_size % self.num_heads:
            raise ConfigError(f"model.head_size={self.head_size} is not divisible by model.num_heads="
                              f"{self.num_heads}; pick a head_size that is a multiple of num_heads")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) \
                or not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout={self.dropout!r} is invalid: it must be in [0, 1)")
        if self.attention not in ATTENTION_KINDS:
            raise ConfigError(f"model.attention={self.attention} is invalid: use one of {', '.join(ATTENTION_KINDS)}")
        if not isinstance(self.tie_weights, bool):
            raise ConfigError(f"model.tie_weights={self.tie_weights!r} is invalid: it must be true or false")

    @property
    def head_dim(self) -> int:
        return self.head_size // self.num_heads

    def with_vocab(self, vocab_size: int) -> ModelConfig:
        return replace(self, vocab_size=vocab_size)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ModelConfig:
        """From a checkpoint's plain dict; keys this version does not know are an error, missing keys take
        their defaults (checkpoints written before an option existed were built without it)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown model settings {', '.join(unknown)} (written by a newer version?)")
        return cls(**d)
