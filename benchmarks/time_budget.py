"""Train configurations for the same wall-clock budget and report their final validation numbers.

    python benchmarks/time_budget.py --corpus FILE --seconds 300 --run NAME=OVERRIDES [--run ...]
    python -m benchmarks.time_budget ...     # the same

Design choices:
- Each run is its own `train.py` process, one at a time, with the whole machine and budget (no early stop unless typed).
- A failed run prints a JSON line with its error and the others still run: one bad override must not cost a sweep.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: only benchmarks/ is on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import options as opt  # noqa: E402
from benchmarks.ladder_checks import say_whole_budget  # noqa: E402
from benchmarks.runs import trained  # noqa: E402
from common.errors import UserError  # noqa: E402


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = opt.script_parser("time_budget.py", __doc__)
    ap.add_argument("--corpus", required=True, check=opt.text_file, help="the text file every run trains on")
    ap.add_argument("--seconds", default=300.0, check=opt.SECONDS, help="wall-clock budget of each run (default 300)")
    ap.add_argument("--run", action="append", required=True, help="NAME=space-separated train.py overrides")
    ap.add_argument(
        "--out", default="runs/budget", check=opt.out_folder, help="runs go to OUT/NAME (default runs/budget)"
    )
    ap.add_argument("--threads", default=None, check=opt.count(), help="CPU threads of each run (default: torch's)")
    args = ap.parse_args(argv)
    for spec in args.run:
        name = spec.partition("=")[0]
        if not opt.NAME.fullmatch(name):
            raise UserError(f"--run {spec!r}: give it as NAME=OVERRIDES, NAME made of letters, digits, . _ -")
    return args


def run_one(name: str, overrides: str, args: argparse.Namespace) -> dict:
    threads = {"OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    env = {**os.environ, **threads} if args.threads else None
    done = trained(
        [
            f"data.path={Path(args.corpus).expanduser()}",
            f"train.max_seconds={args.seconds}",
            "train.max_steps=1000000",
            "train.early_stop=null",
            *overrides.split(),
        ],
        Path(args.out) / name,
        env,
    )
    if "error" in done:
        return {"name": name, **done}
    keys = ("steps", "val_loss", "val_bpc", "best_val_bpc", "tokens_per_sec", "seconds")
    return {"name": name, "overrides": overrides, **{k: done[k] for k in keys}}


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    say_whole_budget(f"{args.seconds:g} s")
    for spec in args.run:
        name, _, overrides = spec.partition("=")
        opt.print_json(run_one(name, overrides, args))


if __name__ == "__main__":
    opt.run_script(main)
