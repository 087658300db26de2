"""Everything the ladder checks before its first run, so a campaign never fails hours in.

Design choices:
- One budget per campaign: a second limit (`--set`, a variant) is refused, and so is an override of what the ladder
  sets per run (recipe, seed, corpus, folder), which would otherwise win silently.
- Every run's config is composed and validated as `train.py` does it, a mistake one line naming the variant.
- Rows already in `--out` must come from the same split (held-out fraction, corpus fingerprint), else the campaign
  is refused rather than averaged with them; budgets and `--set` may differ: the table keeps them apart.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.options import ROOT
from common import config_checks as checks
from common.errors import UserError

BUDGET_KEYS = ("train.max_steps", "train.max_seconds", "train.max_epochs")
LADDER_KEYS = ("recipe", "seed", "data.path", "train.resume", "train.overwrite", "hydra.run.dir")
DEFAULT_SECONDS = 300.0


def check_numbers(args: argparse.Namespace) -> None:
    """One budget, `--seconds` or `--steps` (each range-checked as it is parsed); 300 s where neither is given."""
    if args.seconds is not None and args.steps is not None:
        raise UserError(
            f"--seconds {args.seconds:g} and --steps {args.steps} are two budgets; give one (every run of "
            "a campaign gets the same)"
        )
    if args.steps is None and args.seconds is None:
        args.seconds = DEFAULT_SECONDS


def check_overrides(where: str, overrides: list[str]) -> None:
    """No override may set a second budget, or what the ladder sets for each run."""
    for override in overrides:
        key = override.lstrip("+~").split("=", 1)[0]
        if key in BUDGET_KEYS:
            raise UserError(
                f"{where} sets {key}, a second budget beside the campaign's (--seconds or --steps); give "
                "the budget once, with --seconds or --steps"
            )
        if key in LADDER_KEYS or key.startswith("hydra."):
            raise UserError(
                f"{where} sets {key}, which the ladder sets for each run (its recipe, seed, corpus and "
                "folder); drop it (a recipe of its own: a --variant NAME=RECIPE:OVERRIDES)"
            )


# Rungs are compared over the whole budget: early stopping, on by default for a time-limited run, is turned off
# (a variant or --set that types train.early_stop comes later on the command line and wins).
WHOLE_BUDGET = "train.early_stop=null"


def say_whole_budget(budget: str) -> None:
    """The one line a campaign that compares at equal time prints once its checks have passed."""
    print(
        f"note: every run trains for the whole budget ({budget}): early stopping is off ({WHOLE_BUDGET}, unless "
        "the overrides type train.early_stop)",
        file=sys.stderr,
        flush=True,
    )


def run_overrides(recipe: str, extra: list[str], args: argparse.Namespace, corpus: str, seed: int) -> list[str]:
    """The overrides train.py gets for one run (benchmarks/ladder.py adds only its folder)."""
    limit = f"train.max_steps={args.steps}" if args.steps else f"train.max_seconds={args.seconds}"
    return [f"recipe={recipe}", f"data.path={corpus}", f"seed={seed}", limit, WHOLE_BUDGET, *extra, *args.set.split()]


def composed_job(overrides: list[str]):
    """train.py's TrainJob for `overrides`, composed and checked as train.py does it; a mistake is one UserError."""
    from cli.entry import config_object, hydra_report_line, prepare_overrides

    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from cli.hydra_setup import legacy_experiment_override, register_resolvers
    from training.settings.config import TrainJob, register_configs

    register_resolvers()
    register_configs()
    overrides = legacy_experiment_override(prepare_overrides(overrides))
    checks.boolean_overrides(TrainJob, overrides)
    try:
        with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
            cfg = compose(config_name="train", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as e:
        report = "\n".join(str(x) for x in (e, e.__cause__) if x is not None)
        raise UserError(hydra_report_line(report, overrides)) from None
    try:
        return config_object(cfg, TrainJob)
    except TypeError as e:  # a key added with `+` that the schema does not have
        raise UserError(" ".join(str(e).split())) from None


def check_runs(args: argparse.Namespace, rungs: list[str], corpus: str) -> None:
    check_overrides(f"--set {args.set!r}", args.set.split())
    for rung in rungs:
        if rung == "nanogpt":
            continue
        recipe, extra = args.variants.get(rung, (rung, []))
        where = f"--variant {rung}" if rung in args.variants else f"the rung {rung}"
        check_overrides(where, extra)
        try:
            composed_job(run_overrides(recipe, extra, args, corpus, 1337))
        except UserError as e:
            with_set = f" with --set {args.set!r}" if args.set.split() else ""
            raise UserError(f"{where}{with_set} cannot run: {e}; nothing was run") from None


def check_results(done: list[dict], corpus: str, heldout: float, fingerprint: str, out: Path) -> None:
    """Rows of `corpus` already in `out` must come from the same split: the same held-out fraction of the same text."""
    splits = [(row.get("heldout"), row.get("corpus_sha256")) for row in done if row.get("corpus") == corpus]
    for theirs in (split for split in splits if split != (heldout, fingerprint)):
        if None in theirs:
            raise UserError(
                f"--out {out} holds results of the corpus {corpus!r} that do not record their held-out "
                "fraction and corpus fingerprint (written by an earlier ladder), so they cannot be "
                "compared with this campaign's; use another --out"
            )
        raise UserError(
            f"--out {out} holds results of the corpus {corpus!r} measured with --heldout "
            f"{theirs[0]:g} on a text of fingerprint {theirs[1]}; this campaign asks --heldout {heldout:g} "
            f"of a text of fingerprint {fingerprint}: their rows would be averaged together. Use another "
            "--out, or the same corpus file and --heldout"
        )


class CampaignFailed(UserError):
    """Runs of the campaign failed: their rows hold the error, the table leaves them out, the exit is 1."""

    exit_code = 1

    def __init__(self, failed: list[dict]):
        first = failed[0]
        why = str(first.get("error")).removeprefix("error: ")
        super().__init__(
            f"{len(failed)} run(s) failed, so the table lacks them: the first, {first.get('rung')} "
            f"seed {first.get('seed')} on {first.get('corpus')}: {why}; a campaign continued into the "
            "same --out runs them again"
        )
