"""Sample Korean text from a trained model.  python generate.py ckpt=<run dir> prompt=안녕 ...

(see configs/generate.yaml)"""

from common.cli import quote_non_ascii_overrides, run_cli, run_hydra

import sys

import hydra
from omegaconf import DictConfig


def _run(cfg: DictConfig) -> None:
    from common.errors import UserError
    from model.sampling import check_sampling_args
    from training.config import check_int, check_number
    from common.device import pick_device
    from inference.generation import load_model, stream_samples

    for key in ("max_new_tokens", "num_samples", "seed"):
        check_int(cfg, key, minimum=None)  # ranges: check_sampling_args and below, with their own messages
    check_int(cfg, "top_k", minimum=None, optional=True)
    check_number(cfg, "temperature")
    check_number(cfg, "top_p", optional=True)
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
