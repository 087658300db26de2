"""Checking a composed config before any work, with messages that name the keys."""

from __future__ import annotations

from omegaconf import DictConfig

from common.errors import UserError
from model.attention import ATTENTION_KINDS
from common.device import DEVICES, DTYPES
from training.schedule import SCHEDULES


def check_int(cfg: DictConfig, key: str, minimum: int | None = 1, optional: bool = False) -> int | None:
    """The integer at `key` (>= minimum unless that is None), or a UserError naming the key."""
    value = cfg_get(cfg, key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        need = {None: "an integer", 0: "an integer >= 0", 1: "a positive integer"}.get(minimum,
                                                                                      f"an integer >= {minimum}")
        raise UserError(f"{key}={value} is invalid: it must be {need}" + (" (or null)" if optional else ""))
    return value


def check_number(cfg: DictConfig, key: str, optional: bool = False) -> float | None:
    """The number at `key` as a float, or a UserError naming the key (not a ValueError traceback)."""
    value = cfg_get(cfg, key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{key}={value} is invalid: it must be a number" + (" (or null)" if optional else ""))
    return float(value)


def cfg_get(cfg: DictConfig, key: str):
    node = cfg
    for part in key.split("."):
        node = node[part]
    return node


def check_model_config(cfg: DictConfig) -> None:
    for key in ("context_length", "embedding_size", "head_size", "num_heads", "num_blocks"):
        check_int(cfg, f"model.{key}")
    m = cfg.model
    if m.head_size % m.num_heads:
        raise UserError(
            f"model.head_size={m.head_size} is not divisible by model.num_heads={m.num_heads}; "
            f"pick a head_size that is a multiple of num_heads"
        )
    if not 0.0 <= check_number(cfg, "model.dropout") < 1.0:
        raise UserError(f"model.dropout={m.dropout} is invalid: it must be in [0, 1)")
    if m.get("attention", "fused") not in ATTENTION_KINDS:
        raise UserError(f"model.attention={m.attention} is invalid: use one of {', '.join(ATTENTION_KINDS)}")


def check_train_config(cfg: DictConfig) -> None:
    """Everything `train.py` reads, checked up front."""
    check_model_config(cfg)
    if not 0.0 < check_number(cfg, "data.val_fraction") < 1.0:
        raise UserError(f"data.val_fraction={cfg.data.val_fraction} is invalid: it must be in (0, 1)")
    for key in ("train.batch_size", "train.eval_interval", "train.eval_steps", "train.grad_accum_steps",
                "train.log_interval"):
        check_int(cfg, key)
    check_int(cfg, "train.max_steps", minimum=0, optional=True)
    check_int(cfg, "train.warmup_steps", minimum=0)
    if cfg.train.max_steps is None and not float(cfg.train.get("max_epochs") or 0) > 0:
        raise UserError("train.max_steps is null, so train.max_epochs must be > 0 (or set train.max_steps)")
    t = cfg.train
    if t.max_seconds is not None and not check_number(cfg, "train.max_seconds") > 0:
        raise UserError(f"train.max_seconds={t.max_seconds} is invalid: it must be > 0 (or null)")
    if not check_number(cfg, "train.lr") > 0:
        raise UserError(f"train.lr={t.lr} is invalid: it must be > 0")
    if not 0 <= check_number(cfg, "train.min_lr") <= float(t.lr):
        raise UserError(f"train.min_lr={t.min_lr} is invalid: it must be in [0, train.lr]")
    if check_number(cfg, "train.weight_decay") < 0 or check_number(cfg, "train.grad_clip") < 0:
        raise UserError("train.weight_decay and train.grad_clip must be >= 0 (grad_clip 0 = off)")
    for key in ("train.beta1", "train.beta2"):
        if not 0 <= check_number(cfg, key) < 1:
            raise UserError(f"{key}={cfg_get(cfg, key)} is invalid: it must be in [0, 1)")
    check_int(cfg, "seed", minimum=None)
    if t.lr_schedule not in SCHEDULES:
        raise UserError(f"train.lr_schedule={t.lr_schedule} is invalid: use one of {', '.join(SCHEDULES)}")
    if t.dtype != "auto" and t.dtype not in DTYPES:
        raise UserError(f"train.dtype={t.dtype} is invalid: use one of auto, {', '.join(DTYPES)}")
    if str(cfg.device).split(":")[0] not in DEVICES:
        raise UserError(f"device={cfg.device} is invalid: use one of {', '.join(DEVICES)}")
    for key in ("train.sample_tokens", "train.attention_tokens"):
        if key.split(".")[1] in t:
            check_int(cfg, key, minimum=0)
    prompts = t.get("sample_prompts")
    if prompts is not None and (isinstance(prompts, str) or not all(isinstance(p, str) for p in prompts)):
        raise UserError(f"train.sample_prompts={prompts} is invalid: it must be a list of strings, "
                        "e.g. 'train.sample_prompts=[\"옛날에\",\"나는\"]'")
