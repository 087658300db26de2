"""OmegaConf resolvers the configs use to name run directories."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from omegaconf import OmegaConf


def _safe_name(overrides: str) -> str:
    """`model.num_heads=4,train.lr=0.001` -> a folder name without slashes or odd characters."""
    return re.sub(r"[^\w.=,+-]+", "_", overrides).strip("_")[:150]


def _suffix(overrides: str) -> str:
    name = _safe_name(overrides)
    return f"_{name}" if name else ""


def _job_name(overrides: str, experiment: str = "") -> str:
    """A sweep job's folder: its overrides without `+experiment=<name>`, which the sweep folder already names."""
    if experiment:
        overrides = re.sub(rf"(^|,)\+{{0,2}}experiment={re.escape(experiment)}(?=,|$)", "", overrides)
    return _safe_name(overrides.strip(",")) or "run"


def _run_dir(resume, default: str) -> str:
    """Where a run writes: the resumed run's folder, or `default`; other DDP ranks write nowhere visible."""
    rank = int(os.environ.get("RANK", "0"))
    if rank > 0:
        return str(Path(tempfile.gettempdir()) / f"kochar-gpt-rank{rank}-{os.getpid()}")
    if resume not in (None, ""):
        p = Path(str(resume)).expanduser()
        if p.exists():  # a wrong path must not become a new folder: the trainer reports it instead
            return str(p if p.is_dir() else p.parent)
    return default


def register_resolvers() -> None:
    for name, fn in (("safe_name", _safe_name), ("override_suffix", _suffix), ("run_dir", _run_dir),
                     ("job_name", _job_name)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def legacy_experiment_override(argv: list[str]) -> list[str]:
    """`+experiment=<name>` (the form documented before `experiment: null` joined the defaults list) means
    `experiment=<name>` now; Hydra itself would refuse to add a key that already exists."""
    return [a[1:] if a.startswith("+experiment=") else a for a in argv]


HYDRA_ARTEFACTS = (".hydra", "train.log", "vocab.json")


def remove_unused_run_dir(run_dir: str | Path) -> None:
    """Remove a run folder that a failed start left holding only what Hydra wrote before our code ran (its
    `.hydra/` record and an empty log), so `runs/` and TensorBoard never list runs that hold nothing. A folder
    with anything else in it (a checkpoint, event files, a user's file) is left alone."""
    import shutil

    run_dir = Path(run_dir)
    if not run_dir.is_dir() or any(p.name not in HYDRA_ARTEFACTS for p in run_dir.iterdir()):
        return
    for p in run_dir.iterdir():
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    run_dir.rmdir()
