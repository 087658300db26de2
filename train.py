"""Train a Korean character-level GPT.  python train.py [key=value ...]  (see configs/train.yaml)"""

from common.cli import config_object, quote_non_ascii_overrides, run_cli, run_hydra

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from training.config import TrainJob, register_configs
from training.hydra_setup import legacy_experiment_override, register_resolvers, remove_unused_run_dir

register_resolvers()
register_configs()


def _run(cfg: DictConfig) -> None:
    run_dir = HydraConfig.get().runtime.output_dir
    try:
        job = config_object(cfg, TrainJob)
        from training.trainer import train  # torch and the model load only once the config is known to be good

        result = train(job, run_dir)
    except BaseException:
        remove_unused_run_dir(run_dir)  # a start that failed leaves no empty run behind
        raise
    if result.sample:
        print("\n--- sample ---\n" + result.sample + "\n--------------")
    print(f"run: {result.run_dir}  step {result.step}  val loss {result.val_loss:.4f}  "
          f"val bpc {result.val_bpc:.4f}  {result.seconds:.1f}s ({result.stopped})")
    if result.stopped in ("SIGINT", "SIGTERM"):
        sys.exit(130 if result.stopped == "SIGINT" else 143)


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_cli(lambda: _run(cfg))


if __name__ == "__main__":
    sys.argv[1:] = legacy_experiment_override(quote_non_ascii_overrides(sys.argv[1:]))
    run_hydra(main)
