"""Train a Korean character-level GPT.  python train.py [key=value ...]  (--help lists every key)"""

from cli.entry import config_object, prepare_overrides, run_cli, run_hydra, shell_path

import math
import os
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from cli.help_text import register_help
from cli.hydra_setup import legacy_experiment_override, register_resolvers, remove_unused_run_dir
from cli.run_lock import RunLock, folder_named
from cli.run_record import RecordedSettings
from common.errors import Interrupted
from training.settings.config import TrainJob, register_configs
from training.settings.resume import record_command_line

EXAMPLES = (
    "python train.py data.path=~/novels.txt                    # your own text file",
    "python train.py model=tiny train.max_seconds=60           # a small model for one minute",
    "python train.py train.resume=runs/2026-11-22_17-14-32_model-tiny   # continue the run folder printed",
)

register_resolvers()
register_configs()
register_help("train", "train.py: train a Korean character-level GPT.", EXAMPLES, groups=True)


def _value(x: float) -> str:
    return "not evaluated yet" if math.isnan(x) else f"{x:.4f}"


def _run(cfg: DictConfig) -> None:
    run_dir = HydraConfig.get().runtime.output_dir
    record_command_line(HydraConfig.get().overrides.task)  # a resumed run keeps every setting not typed here
    before = set(os.listdir(run_dir)) if os.path.isdir(run_dir) else set()
    try:
        with RunLock(run_dir):  # re-entrant: already held when the command line named the folder
            job = config_object(cfg, TrainJob)
            from training.distributed import peer_loss_is_one_line
            from training.trainer import train  # torch and the model load only once the config is known to be good

            with peer_loss_is_one_line(run_dir):  # under torchrun: a dead peer is one line, not a traceback
                result = train(job, run_dir)
    except BaseException as e:  # a start that failed leaves no empty run behind; one interrupted, no new curves
        remove_unused_run_dir(run_dir, before if isinstance(e, Interrupted) else None)  # not a 2nd Ctrl-C's abort
        raise
    if os.environ.get("RANK", "0") != "0":  # under torchrun rank 0 alone reports the run
        sys.exit(130 if result.stopped == "SIGINT" else 143 if result.stopped == "SIGTERM" else 0)
    if result.sample:
        print("\n--- sample ---\n" + result.sample + "\n--------------")
    print(
        f"run: {shell_path(result.run_dir)}  step {result.step}  val loss {_value(result.val_loss)}  "
        f"val bpc {_value(result.val_bpc)}  {result.seconds:.1f}s ({result.stopped})"
    )
    if result.average:
        print(result.average)
    if result.closing:  # an early stop; where validation stood best, when the end is worse (training/early_stop.py)
        print(result.closing)
    if result.stopped in ("SIGINT", "SIGTERM"):
        sys.exit(130 if result.stopped == "SIGINT" else 143)


@hydra.main(config_path="configs", config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    run_cli(lambda: _run(cfg), traceback_dir=HydraConfig.get().runtime.output_dir)


if __name__ == "__main__":
    sys.argv[1:] = legacy_experiment_override(prepare_overrides(sys.argv[1:]))
    lock = run_cli(lambda: RunLock(folder_named(sys.argv[1:])))  # before Hydra writes its .hydra/ record there
    record = RecordedSettings(folder_named(sys.argv[1:]))  # the run's .hydra/, put back if this start saves nothing
    try:
        run_hydra(main)
    finally:
        record.restore_unless_saved()
        lock.release()  # however the run ends, so the next start finds no stale lock file
