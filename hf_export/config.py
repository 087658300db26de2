"""Typed configuration of `export.py` (the Hydra schema of configs/export.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore

from common import config_checks as checks
from common.errors import ConfigError
from inference.config import WEIGHTS


@dataclass
class ExportConfig:
    ckpt: str | None = None  # a run folder or checkpoint file; None = the newest run under runs/
    out: str | None = None  # the folder to write (created; refused when it holds files, unless overwrite)
    overwrite: bool = False  # replace a previous export there (hf_export/destination.py: nothing else)
    verify: bool = True  # name the folder only once transformers reads it back and gives the run's logits
    weights: str | None = None  # the one set the folder holds: null | averaged | raw (inference/weights.py)

    def __post_init__(self) -> None:
        checks.one_of("weights", self.weights, WEIGHTS, optional=True)
        if self.out in (None, ""):
            raise ConfigError("pass the folder to write: python export.py ckpt=<run dir> out=<folder>")


def register_export_config() -> None:
    ConfigStore.instance().store(name="export_schema", node=ExportConfig)
