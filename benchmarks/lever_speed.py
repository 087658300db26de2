"""The price of each data-limited lever in training speed: `python -m benchmarks.lever_speed`.

Design choices:
- Each side is train.py's real step (`train_step`) set up from the Hydra configs with the lever's overrides, so the
  number is what a run with the switch pays per step; dropout is fixed (auto's probe differs between sides).
- Each lever takes turns with the plain recipe, only that pair set up at a time (docs/en/ladder.md reads the ratio).
- Multi-token targets are timed at their full weight (a run's start): fading out makes later steps cheaper.
"""

from __future__ import annotations

import argparse
import tempfile
from functools import partial
from pathlib import Path

from benchmarks import options as opt

LEVERS = {
    "modern": "",
    "modern+ema": "train.average=ema train.ema_half_life=100",
    "modern+gate": "model.attention_gate=true",
    "modern+value_emb": "model.value_embedding=true",
    "modern+unet": "model.unet_skips=true",
    "modern+softcap": "model.logit_softcap=15",
    "modern+mtp": "train.mtp_weights=[0.5,0.25] train.mtp_fade=0.5",
    "modern+wd_dip": "train.muon_weight_decay=0.4 train.muon_weight_decay_schedule=dip",
}
STACK = ("modern+ema", "modern+value_emb", "modern+unet", "modern+mtp")  # the ladder's modern+stack
LEVERS["modern+stack"] = " ".join(LEVERS[lever] for lever in STACK)


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = opt.script_parser("python -m benchmarks.lever_speed", __doc__)
    ap.add_argument(
        "--corpus",
        default=str(opt.SHARED_CORPUS) if opt.SHARED_CORPUS.is_file() else None,
        check=opt.text_file,
        help="training text (default: the shared novels, else the built-in corpus)",
    )
    ap.add_argument("--rounds", default=5, check=opt.count(), help="alternating timing rounds (default 5)")
    ap.add_argument("--steps", default=5, check=opt.count(), help="training steps per side and round (default 5)")
    ap.add_argument("--set", default="", help="space-separated train.py overrides added to every side")
    ap.add_argument(
        "--only",
        default="",
        check=opt.chosen([x for x in LEVERS if x != "modern"]),
        help="comma-separated levers (default: all of them)",
    )
    return ap.parse_args(argv)


def session(overrides: list[str], run_dir: Path):
    """A session of train.py's own set-up for `overrides`, composed and checked as train.py does."""
    from benchmarks.ladder_checks import composed_job
    from training.session import setup

    return setup(composed_job(overrides), run_dir)


def pair_speed(lever: str, args: argparse.Namespace) -> dict[str, float]:
    """Tokens/s of `lever` and the plain recipe in turns, only these two set up (more sessions slow later ones)."""
    from benchmarks.timing import median_alternating, step_timer
    from training.step import train_step

    timers = {}
    corpus = [f"data.path={args.corpus}"] if args.corpus else []
    with tempfile.TemporaryDirectory() as tmp:
        for side in (lever, "modern"):
            overrides = [
                "recipe=modern",
                *corpus,
                "model.dropout=0.08",
                "train.max_steps=100000",
                "train.eval_interval=100000",
                *LEVERS[side].split(),
                *args.set.split(),
            ]
            s, state = session(overrides, Path(tmp) / side)
            timers[side] = step_timer(partial(train_step, s, state), s.tokens_per_step, args.steps, s.device)
        return median_alternating(timers, args.rounds)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    levers = args.only or [x for x in LEVERS if x != "modern"]
    out: dict[str, object] = {"tokens_per_sec": {}, "over_modern": {}}
    for lever in levers:
        tps = pair_speed(lever, args)
        out["tokens_per_sec"][lever] = round(tps[lever], 1)
        out["tokens_per_sec"][f"modern (beside {lever})"] = round(tps["modern"], 1)
        out["over_modern"][lever] = round(tps[lever] / tps["modern"], 3)
    out.update(rounds=args.rounds, steps=args.steps, corpus=args.corpus, set=args.set)
    opt.print_json(out, indent=1)


if __name__ == "__main__":
    opt.run_script(main)
