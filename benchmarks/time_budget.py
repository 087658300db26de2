"""Train configurations for the same wall-clock budget and report their final validation numbers.

    python benchmarks/time_budget.py --corpus FILE --seconds 300 --run NAME=OVERRIDES [--run ...]
    python -m benchmarks.time_budget ...     # the same

Prints one JSON line per run: name, overrides, steps, val_loss, val_bpc, best_val_bpc, tokens/s, seconds.

Design choices:
- Each run is its own `train.py` process, started as a user would, one after another so every run has the
  whole machine; `train.max_seconds` is the budget and the step limit is set out of reach. Every run has the
  whole budget: early stopping is off (`train.early_stop=null`, unless a run's overrides type it).
- The final numbers come from train.py's closing `run:` line; the best validation bpc and the median
  tokens/s come from the run's TensorBoard events, which train.py writes anyway.
- A failed run prints a JSON line with its error and the others still run: one bad override should not
  cost a long sweep.
- Runnable as a file as well as a module: as a file, the repository root is put on sys.path first, and the
  project's imports wait until then (inside the functions).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULT = re.compile(r"run: (?P<dir>\S+)\s+step (?P<step>\d+)\s+val loss (?P<loss>[\d.]+)\s+val bpc (?P<bpc>[\d.]+)\s+"
                    r"(?P<secs>[\d.]+)s")
RUN_NAME = re.compile(r"[\w.-]+")


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The checked arguments (an argparse Namespace); any mistake raises `UserError`."""
    from benchmarks.options import OneLineArgumentParser
    from common.errors import UserError

    ap = OneLineArgumentParser(prog="time_budget.py", description=__doc__.split("\n\nDesign")[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="the text file every run trains on")
    ap.add_argument("--seconds", type=float, default=300, help="wall-clock budget of each run (default 300)")
    ap.add_argument("--run", action="append", required=True, help="NAME=space-separated train.py overrides")
    ap.add_argument("--out", default="runs/budget", help="runs go to OUT/NAME (default runs/budget)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads of each run (default: torch's choice)")
    args = ap.parse_args(argv)
    if not Path(args.corpus).expanduser().is_file():
        raise UserError(f"--corpus {args.corpus}: not found or not a file; pass a text file")
    if not args.seconds > 0:
        raise UserError(f"--seconds must be > 0, got {args.seconds}")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    for spec in args.run:
        name = spec.partition("=")[0]
        if not RUN_NAME.fullmatch(name):
            raise UserError(f"--run {spec!r}: give it as NAME=OVERRIDES, NAME made of letters, digits, . _ -")
    return args


def run_one(name: str, overrides: str, args: argparse.Namespace) -> dict:
    """Train one configuration for the budget; its result line as a dict."""
    from benchmarks.tb_read import read_scalars

    env = None
    if args.threads:
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    run_dir = Path(args.out) / name
    cmd = [sys.executable, str(ROOT / "train.py"), f"data.path={Path(args.corpus).expanduser()}",
           f"train.max_seconds={args.seconds}", "train.max_steps=1000000", "train.early_stop=null",
           f"hydra.run.dir={run_dir}", "train.overwrite=true", *overrides.split()]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    m = RESULT.search(proc.stdout)
    if proc.returncode or m is None:
        return {"name": name, "error": (proc.stderr.strip().splitlines() or ["no result line"])[-1]}
    tags = read_scalars(run_dir)
    tps = sorted(v for _, v in tags.get("train/tokens_per_sec", []))
    bpcs = [v for _, v in tags.get("val/bpc", [])]
    return {"name": name, "overrides": overrides, "steps": int(m["step"]), "val_loss": float(m["loss"]),
            "val_bpc": float(m["bpc"]), "best_val_bpc": min(bpcs) if bpcs else None,
            "tokens_per_sec": round(tps[len(tps) // 2]) if tps else None, "seconds": float(m["secs"])}


def main(argv: list[str]) -> None:
    from benchmarks.ladder_checks import say_whole_budget

    args = parse_args(argv)
    say_whole_budget(f"{args.seconds:g} s")
    for spec in args.run:
        name, _, overrides = spec.partition("=")
        print(json.dumps(run_one(name, overrides, args), ensure_ascii=False), flush=True)


if __name__ == "__main__":
    if str(ROOT) not in sys.path:  # run as a file: only benchmarks/ is on the path
        sys.path.insert(0, str(ROOT))
    from cli.entry import run_cli

    run_cli(lambda: main(sys.argv[1:]))
