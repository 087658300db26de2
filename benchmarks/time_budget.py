"""Train configurations for the same wall-clock budget and report their final validation numbers.

    python benchmarks/time_budget.py --corpus FILE --seconds 300 --run NAME=OVERRIDES [--run ...]

Prints one JSON line per run: name, overrides, steps, val_loss, val_bpc, best_val_loss, tokens/s, seconds.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULT = re.compile(r"run: (?P<dir>\S+)\s+step (?P<step>\d+)\s+val loss (?P<loss>[\d.]+)\s+val bpc (?P<bpc>[\d.]+)\s+"
                    r"(?P<secs>[\d.]+)s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--run", action="append", required=True, help="NAME=space-separated train.py overrides")
    ap.add_argument("--out", default="runs/budget")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    env = None
    if args.threads:
        import os

        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    for spec in args.run:
        name, _, overrides = spec.partition("=")
        run_dir = Path(args.out) / name
        cmd = [sys.executable, str(ROOT / "train.py"), f"data.path={args.corpus}", f"train.max_seconds={args.seconds}",
               "train.max_steps=1000000", f"hydra.run.dir={run_dir}", "train.overwrite=true", *overrides.split()]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
        if proc.returncode:
            print(json.dumps({"name": name, "error": proc.stderr.strip().splitlines()[-1:]}), flush=True)
            continue
        m = RESULT.search(proc.stdout)
        from benchmarks.tb_read import read_scalars

        tags = read_scalars(run_dir)
        tps = [v for _, v in tags.get("train/tokens_per_sec", [])]
        print(json.dumps({
            "name": name, "overrides": overrides, "steps": int(m["step"]), "val_loss": float(m["loss"]),
            "val_bpc": float(m["bpc"]), "best_val_bpc": min(v for _, v in tags["val/bpc"]),
            "tokens_per_sec": round(sorted(tps)[len(tps) // 2]) if tps else None, "seconds": float(m["secs"]),
        }), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
