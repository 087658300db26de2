"""OmegaConf resolvers that name run folders (docs/en/configuration.md shows them), and a failed start's clean-up.

Design choices:
- Names hold only letters, digits and `_ . + -`, so they paste back as printed; where a character was replaced or
  a name cut, a hash of the overrides follows, so two runs started in the same second never share a folder.
- Names are cut in UTF-8 bytes, never inside a character, each value first: a long corpus name leaves room."""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

from omegaconf import OmegaConf

from cli.overrides import PATH_KEYS

NAME_BYTES = 200  # of the 255 a file name may hold: the rest is for the date and time in front of it
VALUE_BYTES = 48  # of one override's value, so that every override shows in the name
_HASH_CHARS = 6


def _cut(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    return text if len(data) <= limit else data[:limit].decode("utf-8", "ignore")


def _items(overrides: str | Iterable[str] | None) -> list[str]:
    return [o for o in (overrides.split(",") if isinstance(overrides, str) else map(str, overrides or ())) if o]


def _readable(override: str) -> str:
    key, _, value = override.partition("=")
    key = key.lstrip("+~")
    if len(value) >= 2 and value[0] in "'\"" and value[-1] == value[0]:
        value = value[1:-1]
    if key in PATH_KEYS:
        value = os.path.basename(value.rstrip("/\\")) or value
    return f"{key}-{_cut(value, VALUE_BYTES)}"


def _safe_name(overrides: str | Iterable[str] | None, exclude: Iterable[str] = ()) -> str:
    """`["model=tiny", "train.lr=0.003"]` -> `model-tiny+train.lr-0.003` (the module docstring says how)."""
    excluded = set(exclude or ())
    items = sorted(o for o in _items(overrides) if o.partition("=")[0].lstrip("+~") not in excluded)
    if not items:
        return ""
    plain = "+".join(f"{k.lstrip('+~')}-{v}" for k, _, v in (o.partition("=") for o in items))
    name = "+".join(re.sub(r"[^\w.+-]+", "_", _readable(o)).strip("_") for o in items)
    if name == plain and len(name.encode("utf-8")) <= NAME_BYTES:
        return name
    digest = hashlib.sha256("\0".join(items).encode("utf-8")).hexdigest()[:_HASH_CHARS]
    return _cut(name, NAME_BYTES - _HASH_CHARS - 1).rstrip("_.+-") + "+" + digest


def _suffix(overrides: str | Iterable[str] | None, exclude: Iterable[str] = ()) -> str:
    name = _safe_name(overrides, exclude)
    return f"_{name}" if name else ""


def _job_name(overrides: str | Iterable[str] | None, experiment: str = "", exclude: Iterable[str] = ()) -> str:
    """A sweep job's folder: its overrides without `experiment=<name>`, which the sweep folder already names."""
    items = _items(overrides)
    if experiment:
        items = [o for o in items if o.lstrip("+") != f"experiment={experiment}"]
    return _safe_name(items, exclude) or "run"


def _sweep_name(experiment: str | None) -> str:
    """A sweep's folder names its experiment, or says `sweep` (`experiment: null` selects no experiment)."""
    return _safe_name([f"x={experiment}"])[2:] if experiment else "sweep"


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
    for name, fn in (
        ("safe_name", _safe_name),
        ("override_suffix", _suffix),
        ("run_dir", _run_dir),
        ("job_name", _job_name),
        ("sweep_name", _sweep_name),
    ):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def legacy_experiment_override(argv: list[str]) -> list[str]:
    """The old documented `+experiment=<name>` as `experiment=<name>`: Hydra refuses to add an existing key."""
    return [a[1:] if a.startswith("+experiment=") else a for a in argv]


HYDRA_ARTEFACTS = (".hydra", "train.log", "vocab.json")


def remove_unused_run_dir(run_dir: str | Path, before: set[str] | None = None) -> None:
    """Remove a run folder a failed start left with only Hydra's files: `runs/` and TensorBoard list no empty run.
    A start interrupted before its first step takes back its TensorBoard file too: one not among the names `before`."""
    import shutil

    run_dir = Path(run_dir)
    curves = {p.name for p in run_dir.glob("events.out.tfevents.*")} - before if before is not None else set()
    if not run_dir.is_dir() or any(p.name not in {*HYDRA_ARTEFACTS, *curves} for p in run_dir.iterdir()):
        return
    for p in run_dir.iterdir():
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    run_dir.rmdir()
