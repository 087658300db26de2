"""Sample Korean text from a trained model.  python generate.py ckpt=<run dir> prompt=안녕 ...

(see configs/generate.yaml)"""

import sys

import hydra
from omegaconf import DictConfig

from common.cli import quote_non_ascii_overrides, run_cli, run_hydra


def _check_number(cfg: DictConfig, key: str, integer: bool, optional: bool = False) -> None:
    from common.errors import UserError

    value = cfg[key]
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
        kind = "an integer" if integer else "a number"
        raise UserError(f"{key}={value} is invalid: it must be {kind}" + (" (or null)" if optional else ""))


def _run(cfg: DictConfig) -> None:
    from common.errors import UserError
    from model.sampling import check_sampling_args
    from training.device import pick_device
    from training.inference import load_model, stream_samples

    for key, integer, optional in (("max_new_tokens", True, False), ("num_samples", True, False),
                                   ("seed", True, False), ("temperature", False, False), ("top_k", True, True),
                                   ("top_p", False, True)):
        _check_number(cfg, key, integer, optional)
    try:
        check_sampling_args(cfg.max_new_tokens, cfg.temperature, cfg.top_k, cfg.top_p)
    except ValueError as e:
        raise UserError(str(e)) from None
    if cfg.num_samples < 1:
        raise UserError(f"num_samples must be >= 1, got {cfg.num_samples}")
    device = pick_device(cfg.device)
    model, tokenizer, _ = load_model(cfg.ckpt, device)
    stream_samples(model, tokenizer, str(cfg.prompt), cfg.max_new_tokens, cfg.num_samples, cfg.temperature,
                   cfg.top_k, cfg.top_p, cfg.seed, device, cfg.use_cache)


@hydra.main(config_path="configs", config_name="generate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_cli(lambda: _run(cfg))


if __name__ == "__main__":
    sys.argv[1:] = quote_non_ascii_overrides(sys.argv[1:])
    run_hydra(main)
