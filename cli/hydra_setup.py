"""OmegaConf resolvers the configs use to name run directories, and the clean-up of a failed start.

Design choices (docs/en/configuration.md, "Where a run's outputs go", shows the names):
- A run folder's name pastes back into `ckpt=`, `train.resume=` or `hydra.run.dir=` as printed: it holds only
  letters, digits and `_ . + -`, none of which Hydra's grammar or bash treats specially. When it is not the whole
  story (a character replaced, a path shortened, the name cut) a short hash of the overrides as typed follows it,
  so two different runs started in the same second never share a folder.
- Names are cut in UTF-8 bytes, never inside a character, each value first, so a long corpus name leaves room for
  the other overrides.
"""

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
    """`text` cut to at most `limit` UTF-8 bytes, never inside a character."""
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
    for name, fn in (("safe_name", _safe_name), ("override_suffix", _suffix), ("run_dir", _run_dir),
                     ("job_name", _job_name), ("sweep_name", _sweep_name)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


def legacy_experiment_override(argv: list[str]) -> list[str]:
    """`+experiment=<name>` (the form documented before `experiment: null` joined the defaults list) means
    `experiment=<name>` now; Hydra itself would refuse to add a key that already exists."""
    return [a[1:] if a.startswith("+experiment=") else a for a in argv]


HYDRA_ARTEFACTS = (".hydra", "train.log", "vocab.json")


def remove_unused_run_dir(run_dir: str | Path) -> None:
    """Remove a run folder that a failed start left holding only what Hydra wrote before our code ran (`.hydra/`,
    an empty log), so `runs/` and TensorBoard never list runs that hold nothing; anything else keeps the folder."""
    import shutil

    run_dir = Path(run_dir)
    if not run_dir.is_dir() or any(p.name not in HYDRA_ARTEFACTS for p in run_dir.iterdir()):
        return
    for p in run_dir.iterdir():
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    run_dir.rmdir()
