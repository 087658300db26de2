"""Typed configs of `generate.py` and `evaluate.py`: Hydra checks types and keys, `__post_init__` the ranges."""

from __future__ import annotations

from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore

from common import config_checks as checks
from common.device import DTYPES
from common.errors import ConfigError
from model.sampling import check_sampling_args

WEIGHTS = ("averaged", "raw")  # the sets `weights=` may ask for (null: inference/weights.py's default)


@dataclass
class GenerateConfig:
    ckpt: str | None = None  # a run folder or checkpoint file; None = the newest run under runs/
    prompt: str = ""
    max_new_tokens: int = 300
    num_samples: int = 1
    temperature: float = 0.8  # 0 = greedy
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 1337
    device: str = "auto"
    use_cache: bool = True
    weights: str | None = None  # null (the average where the run kept one, else raw) | averaged | raw

    def __post_init__(self) -> None:
        checks.one_of("weights", self.weights, WEIGHTS, optional=True)
        check_sampling_args(self.max_new_tokens, self.temperature, self.top_k, self.top_p)
        checks.positive_int("num_samples", self.num_samples)
        checks.seed("seed", self.seed)
        checks.device_name("device", self.device)


@dataclass
class EvalData:
    path: str | None = None  # the text to score (a file, a folder or a glob); required


@dataclass
class EvaluateConfig:
    ckpt: str | None = None
    data: EvalData = field(default_factory=EvalData)
    stride: int | None = None  # None = context_length: windows do not overlap
    batch_size: int = 32
    device: str = "auto"
    dtype: str = "float32"
    progress: bool = True
    weights: str | None = None  # null (the average where the run kept one, else raw) | averaged | raw

    def __post_init__(self) -> None:
        checks.one_of("weights", self.weights, WEIGHTS, optional=True)
        if self.data.path in (None, ""):
            raise ConfigError("pass the text file to score: python evaluate.py ckpt=<run dir> data.path=<file.txt>")
        checks.positive_int("stride", self.stride, optional=True)
        checks.positive_int("batch_size", self.batch_size)
        checks.device_name("device", self.device)
        checks.one_of("dtype", self.dtype, ("auto", *DTYPES))


def register_configs() -> None:
    cs = ConfigStore.instance()
    cs.store(name="generate_schema", node=GenerateConfig)
    cs.store(name="evaluate_schema", node=EvaluateConfig)
