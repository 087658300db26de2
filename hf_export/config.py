"""Typed configuration of `export.py` (the Hydra schema of configs/export.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from hydra.core.config_store import ConfigStore

from common.errors import ConfigError


@dataclass
class ExportConfig:
    ckpt: str | None = None  # a run folder or checkpoint file; None = the newest run under runs/
    out: str | None = None  # the folder to write (created; refused when it holds files, unless overwrite)
    overwrite: bool = False  # replace a previous export there (hf_export/destination.py: nothing else)
    verify: bool = True  # name the folder only once transformers reads it back and gives the run's logits
    weights: str = "averaged"  # averaged (where the run kept an average: train.average) | raw

    def __post_init__(self) -> None:
        if self.weights not in ("averaged", "raw"):
            raise ConfigError(f"weights={self.weights} is invalid: it must be one of averaged, raw")
        if self.out in (None, ""):
            raise ConfigError("pass the folder to write: python export.py ckpt=<run dir> out=<folder>")


def register_export_config() -> None:
    ConfigStore.instance().store(name="export_schema", node=ExportConfig)
