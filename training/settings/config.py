"""The training job's typed configuration: Hydra's schema for `configs/train.yaml`.

Design choices:
- Dataclasses in Hydra's ConfigStore are the schema the YAML files merge into, so a wrong type
  (`train.lr=abc`) or an unknown key is refused while Hydra composes the config, before any work.
- Ranges are checked in each `__post_init__` (run by `OmegaConf.to_object`), every key whether or not another key
  makes it unused; a value of its own for a key made unused is refused by training/settings/idle.py.
- The YAML files stay the place users read the defaults; the dataclass defaults match them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore

from common import config_checks as checks
from common.device import DTYPES
from common.errors import ConfigError
from data.config import DataConfig
from inference.config import WEIGHTS
from model.config import ModelConfig
from training.optim.schedule import SCHEDULES
from training.runner.plan import compile_setting
from training.settings.idle import refuse_idle_settings

OPTIMIZERS = ("adamw", "muon")
AVERAGES = ("none", "ema", "swa")
DEFAULT_EPOCHS = 10.0  # passes over the training split when no limit is given at all
INF = float("inf")
POSITIVE = ("max_epochs", "max_seconds", "lr", "muon_lr", "embedding_lr", "ema_half_life")  # > 0
NON_NEGATIVE = ("auto_dropout_after", "weight_decay", "grad_clip", "muon_weight_decay", "auto_weight_decay")
NON_NEGATIVE += ("auto_muon_weight_decay", "embedding_weight_decay")  # >= 0
BELOW_ONE = ("beta1", "beta2", "muon_momentum", "input_noise", "swa_start")  # in [0, 1)
# train.<key>: its bounds, as checks.number_in takes them
RANGES = {
    **dict.fromkeys(POSITIVE, dict(low=0, high=INF, low_open=True)),
    **dict.fromkeys(NON_NEGATIVE, dict(low=0, high=INF)),
    **dict.fromkeys(BELOW_ONE, dict(low=0, high=1, high_open=True)),
    "mtp_fade": dict(low=0, high=1, low_open=True),
}
WORDS = {
    "lr_schedule": SCHEDULES,
    "dtype": ("auto", *DTYPES),
    "optimizer": OPTIMIZERS,
    "average": AVERAGES,
    "syllable_rows": ("seen", "all"),
    "muon_weight_decay_schedule": ("constant", "dip"),
    "init_weights": WEIGHTS,
}
NULLABLE = {"max_epochs", "max_seconds", "auto_weight_decay", "auto_muon_weight_decay", "embedding_lr", "init_weights"}


@dataclass
class TrainConfig:
    batch_size: int = 8
    max_steps: int | None = None  # None = max_epochs passes over the training split (or the time budget alone)
    max_epochs: float | None = None  # None = DEFAULT_EPOCHS passes, or no pass limit when max_seconds is set
    max_seconds: float | None = None  # wall-clock budget; the first limit reached stops the run
    lr: float = 2.0e-3
    min_lr: float = 1.0e-4
    lr_schedule: str = "cosine"
    warmup_steps: int = 100
    lr_decay_steps: int | None = None  # None = max_steps (or the time budget)
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # 0 = off
    grad_accum_steps: int = 1
    optimizer: str = "adamw"  # adamw | muon (Muon for the blocks' matrices, AdamW for the rest)
    muon_lr: float = 0.02  # peak learning rate of the Muon group (train.lr stays AdamW's)
    muon_momentum: float = 0.95
    muon_weight_decay: float = 0.0
    embedding_lr: float | None = None  # AdamW's peak rate for the token and position embeddings; None = train.lr
    embedding_weight_decay: float = 0.0  # AdamW's weight decay on the embeddings (0: rare characters keep theirs)
    input_noise: float = 0.0  # chance that an input id is swapped for one drawn from the training text (0 = none)
    average: str = "none"  # none | ema | swa: weights averaged while training, used by every reader (averaging.py)
    ema_half_life: float = 100.0  # average=ema: steps after which a step's weights count half
    swa_start: float = 0.75  # average=swa: the fraction of the run from which the weights are averaged uniformly
    average_every: int = 1  # steps between updates of the average
    mtp_weights: list[float] = field(default_factory=list)  # extra targets t+2, t+3, ... through the same head
    mtp_fade: float = 0.5  # the fraction of the run over which mtp_weights fade linearly to zero
    muon_weight_decay_schedule: str = "constant"  # constant | dip (hold, dip to 1/8 at mid-run, end at 1.56x)
    syllable_rows: str = "seen"  # seen (train only the syllable rows the training text holds) | all
    auto_dropout_after: float = 8.0  # passes over the training split up to which model.dropout=null means none
    auto_weight_decay: float | None = None  # weight_decay of a run auto gives dropout (None = train.weight_decay)
    auto_muon_weight_decay: float | None = None  # likewise for muon_weight_decay
    early_stop: str | None = "auto"  # null (off) | N: evaluations without a better validation loss | auto
    eval_interval: int = 250
    eval_steps: int = 20
    snapshot_interval: int = 1000  # steps between TensorBoard samples and attention maps (0 = never)
    log_interval: int = 10
    dtype: str = "auto"
    compile: str = "auto"  # false | true | auto (compile where the run pays back the warm-up: runner/plan.py)
    resume: str | None = None
    init_from: str | None = None  # a run or checkpoint whose weights start a new run (fine-tuning)
    init_weights: str | None = None  # init_from's weights: null (its average where kept, else raw) | averaged | raw
    overwrite: bool = False
    sample_chars: int = 200  # characters of the sample printed at the end (0 = none)
    sample_prompts: list[str] = field(default_factory=lambda: ["옛날에", "나는"])
    sample_tokens: int = 100
    attention_tokens: int = 48

    def __post_init__(self) -> None:
        for key in ("batch_size", "eval_interval", "eval_steps", "grad_accum_steps", "log_interval", "average_every"):
            checks.positive_int(f"train.{key}", getattr(self, key))
        for key in ("warmup_steps", "sample_chars", "sample_tokens", "attention_tokens", "snapshot_interval"):
            checks.positive_int(f"train.{key}", getattr(self, key), minimum=0)
        checks.positive_int("train.max_steps", self.max_steps, minimum=0, optional=True)
        if self.max_steps == 0 and not self.resume:  # resuming at 0 steps still evaluates the saved checkpoint
            raise ConfigError(
                "train.max_steps=0 trains nothing, so no checkpoint would be written for generate.py "
                "to read; give 1 or more (0 is only for train.resume=..., to evaluate a run again)"
            )
        checks.positive_int("train.lr_decay_steps", self.lr_decay_steps, optional=True)
        for key, bounds in RANGES.items():
            checks.number_in(f"train.{key}", getattr(self, key), **bounds, optional=key in NULLABLE)
        checks.number_in("train.min_lr", self.min_lr, 0, self.lr)
        for i, w in enumerate(self.mtp_weights):
            checks.number_in(f"train.mtp_weights[{i}]", w, 0, INF)
        for key, choices in WORDS.items():
            checks.one_of(f"train.{key}", getattr(self, key), choices, optional=key in NULLABLE)
        self.compile = compile_setting(self.compile)
        self.early_stop = checked_early_stop(self.early_stop)


def checked_early_stop(value: str | None) -> str | None:
    """`train.early_stop` as null, `auto` or a whole number of evaluations (1 or more, kept as its digits: the key is
    text, so that Hydra takes all three and refuses a list or a mapping while composing)."""
    if value is None or value == "auto":
        return value
    text = str(value)
    if not text.isdecimal() or int(text) < 1:  # a count with spaces around it too (common/config_checks.py)
        raise checks.refusal(
            "train.early_stop",
            value,
            "give null (off), auto, or the evaluations without a better "
            "validation loss after which the run stops (1 or more)",
            lambda word: word == "auto" or word.isdecimal() and int(word) >= 1,
        )
    return str(int(text))


@dataclass
class TrainJob:
    """Everything `train.py` reads."""

    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 1337
    device: str = "auto"  # auto (CUDA, then MPS, then CPU) | cpu | cuda | mps
    recipe: str = "lecture"  # the recipe the run was composed from (configs/recipe/), stored in checkpoints

    def __post_init__(self) -> None:
        checks.seed("seed", self.seed)
        checks.device_name("device", self.device)
        for key, value in (("model.embedding", self.model.embedding), ("model.head", self.model.head)):
            if value == "jamo" and self.data.tokenizer != "hangul":
                raise ConfigError(
                    f"{key}=jamo composes syllables from the hangul tokenizer's ids; add "
                    f"data.tokenizer=hangul (data.tokenizer={self.data.tokenizer} has no fixed syllable "
                    "ids)"
                )
        if self.train.mtp_weights and self.model.head != "softmax":
            raise ConfigError(
                "train.mtp_weights scores later targets through the softmax head's logits; the staged "
                "head (model.head=jamo) does not build them: set train.mtp_weights=[]"
            )
        if not self.train.resume:  # a resumed run's settings are checked once its checkpoint's are applied (setup)
            refuse_idle_settings(self, context=not self.train.init_from)


def register_configs() -> None:
    """Make `train_schema` available to `configs/train.yaml`'s defaults list."""
    ConfigStore.instance().store(name="train_schema", node=TrainJob)
