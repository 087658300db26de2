"""Sample Korean text from a trained model.  python generate.py ckpt=<run dir> prompt=안녕 ...

(see configs/generate.yaml)"""

from cli.entry import config_object, prepare_overrides, run_cli, run_hydra

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from cli.help_text import register_help
from inference.config import GenerateConfig, register_configs

EXAMPLES = (
    "python generate.py prompt=옛날에                                   # the newest run under runs/",
    "python generate.py ckpt=runs/2026-11-22_17-14-32_model-tiny prompt=안녕 max_new_tokens=300",
    "python generate.py ckpt=runs/2026-11-22_17-14-32_model-tiny/best.pt num_samples=3 temperature=0.7 top_p=0.9",
)

SUMMARY = "generate.py: sample Korean text from a trained model."

register_configs()
register_help(Path(__file__).resolve().parent / "configs", "generate", SUMMARY, EXAMPLES)


def _run(cfg: DictConfig) -> None:
    c = config_object(cfg, GenerateConfig)
    from common.device import pick_device
    from inference.generation import stream_samples
    from inference.loading import load_run

    device = pick_device(c.device)
    run = load_run(c.ckpt, device, weights=c.weights)
    print(run.line(), file=sys.stderr, flush=True)  # which weights of which file; stdout stays the samples alone
    stream_samples(run.model, run.tokenizer, c.prompt, c.max_new_tokens, c.num_samples, c.temperature, c.top_k,
                   c.top_p, c.seed, device, c.use_cache)


@hydra.main(config_path="configs", config_name="generate", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_cli(lambda: _run(cfg))


if __name__ == "__main__":
    sys.argv[1:] = prepare_overrides(sys.argv[1:])
    run_hydra(main)
