"""Fine-tuning against training from scratch on new text, at the same short budget, scored on held-out text.

    python -m benchmarks.finetune --source ../shared/corpora/koconovel_dev.txt \
        --target ../shared/corpora/nsmc_dev.txt --source-seconds 300 --seconds 60 --seeds 2

A source run is trained once on `--source` (`--source-seconds`, or `--source-run DIR` to reuse a run you
have). Then, for every seed, two runs get the same `--seconds` on the target's training part: one started
from the source run (`train.init_from`), one from nothing. Both are scored by `evaluate.py` on the target's
held-out tail, and each writes a sample from the same prompt. Every run prints one JSON line, appended to
OUT/results.jsonl; the closing table (mean over seeds, the gain of fine-tuning) is printed and written to
OUT/finetune.md.

Design choices:
- Both sides are what a user types: `python train.py data.path=<target> train.max_seconds=60` and the same
  with `train.init_from=<source run>`; nothing else is pinned (`--set` adds overrides to both) but early stopping,
  which is off in every run (`train.early_stop=null`: the sides are compared over the whole budget; `--set` may
  type it). Both are scored as a user's `evaluate.py ckpt=<run>` scores them: their best validated weights.
- Held-out text: the target's tail cut at a document boundary (benchmarks/heldout.py): for the reviews in
  nsmc_dev.txt, reviews of films the training part never mentions.
- Runs go one after another; the load average before each is recorded (benchmarks/ladder.py warns).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))

from benchmarks.ladder import RESULT, evaluate, machine_before_run  # noqa: E402
from benchmarks.ladder_checks import WHOLE_BUDGET, say_whole_budget  # noqa: E402

SIDES = ("finetune", "scratch")


def parse_args(argv: list[str]) -> argparse.Namespace:
    import math

    from benchmarks.heldout import check_fraction
    from benchmarks.options import OneLineArgumentParser
    from common import config_checks as checks
    from common.errors import UserError

    ap = OneLineArgumentParser(prog="finetune.py", description=__doc__.split("\n\nA source run")[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", help="the text the source run trains on")
    ap.add_argument("--source-run", default=None, help="an existing run to fine-tune instead of training one")
    ap.add_argument("--source-seconds", type=float, default=300.0, help="the source run's budget (default 300)")
    ap.add_argument("--target", required=True, help="the new text (its tail is held out)")
    ap.add_argument("--seconds", type=float, default=60.0, help="budget of each side on the target (default 60)")
    ap.add_argument("--seeds", type=int, default=1, help="seeds per side (default 1: 1337)")
    ap.add_argument("--set", default="", help="space-separated train.py overrides added to both sides")
    ap.add_argument("--prompt", default="이 영화", help="the samples' prompt (default: 이 영화)")
    ap.add_argument("--heldout", type=float, default=0.05, help="fraction of the target held out (default 0.05)")
    ap.add_argument("--out", default="runs/finetune", help="runs, splits and results go here")
    args = ap.parse_args(argv)
    if not Path(args.target).expanduser().is_file():
        raise UserError(f"--target {args.target}: no such file")
    if args.source_run is None and not (args.source and Path(args.source).expanduser().is_file()):
        raise UserError("give --source FILE (trained once) or --source-run DIR (an existing run)")
    if args.seeds < 1 or not args.seconds > 0 or not args.source_seconds > 0:
        raise UserError("--seeds, --seconds and --source-seconds must be positive")
    for flag in ("seconds", "source_seconds"):  # as train.py checks train.max_seconds: finite too
        checks.number_in("--" + flag.replace("_", "-"), getattr(args, flag), 0, math.inf, low_open=True)
    check_fraction(args.heldout)
    return args


def train(overrides: list[str], run_dir: Path) -> dict:
    """One `train.py` run; its closing numbers from the result line, or the error's last line."""
    cmd = [sys.executable, str(ROOT / "train.py"), *overrides, f"hydra.run.dir={run_dir}", "train.overwrite=true"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    m = RESULT.search(proc.stdout)
    if proc.returncode or m is None:
        return {"error": (proc.stderr.strip().splitlines() or ["no result line"])[-1]}
    return {"steps": int(m["step"]), "seconds": float(m["secs"]), "stopped": m["why"]}


def sample(run_dir: Path, prompt: str) -> str:
    cmd = [sys.executable, str(ROOT / "generate.py"), f"ckpt={run_dir}", f"prompt={prompt}", "max_new_tokens=120",
           "seed=1337"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else f"(generate.py failed: {proc.stderr.strip()[-200:]})"


def source_run(args: argparse.Namespace, out: Path) -> tuple[Path, dict]:
    if args.source_run:
        return Path(args.source_run).expanduser(), {"source_run": args.source_run}
    run_dir = out / "source"
    record = {"source": str(args.source), "source_seconds": args.source_seconds, "set": args.set}
    done = out / "source.json"
    if done.is_file() and (run_dir / "ckpt.pt").is_file():
        previous = json.loads(done.read_text())
        if all(previous.get(k) == v for k, v in record.items()):
            return run_dir, previous
    print(f"training the source run on {args.source} for {args.source_seconds:g} s", file=sys.stderr)
    record.update(machine_before_run())
    trained = train([f"data.path={args.source}", f"train.max_seconds={args.source_seconds}", WHOLE_BUDGET,
                     *args.set.split()], run_dir)
    if "error" in trained:
        raise SystemExit(f"error: the source run failed: {trained['error']}")
    record.update(trained)
    done.write_text(json.dumps(record, ensure_ascii=False))
    return run_dir, record


def one_side(side: str, seed: int, source: Path, paths: tuple[Path, Path], args: argparse.Namespace) -> dict:
    target_train, heldout = paths
    run_dir = Path(args.out) / f"{side}-seed{seed}"
    overrides = [f"data.path={target_train}", f"train.max_seconds={args.seconds}", f"seed={seed}", WHOLE_BUDGET]
    if side == "finetune":
        overrides.append(f"train.init_from={source}")
    record = {"side": side, "seed": seed, "seconds_budget": args.seconds, "set": args.set,
              **machine_before_run()}
    trained = train(overrides + args.set.split(), run_dir)
    if "error" in trained:
        return {**record, **trained}
    scored = evaluate(run_dir, heldout)
    return {**record, **trained, "heldout_bpc": scored.get("bpc"), "heldout_chars": scored.get("chars"),
            "unknown_chars": scored.get("unknown_chars"), "sample": sample(run_dir, args.prompt),
            **({"error": scored["error"]} if "error" in scored else {})}


def table(results: list[dict]) -> str:
    mean = {}
    for side in SIDES:
        scores = [r["heldout_bpc"] for r in results if r["side"] == side and r.get("heldout_bpc") is not None]
        mean[side] = sum(scores) / len(scores) if scores else None
    lines = ["| side | seeds | held-out bpc (mean) | steps (mean) |", "|---|---:|---:|---:|"]
    for side in SIDES:
        rows = [r for r in results if r["side"] == side and "error" not in r]
        steps = sum(r["steps"] for r in rows) / len(rows) if rows else 0
        bpc = f"{mean[side]:.3f}" if mean[side] is not None else "—"
        lines.append(f"| {side} | {len(rows)} | {bpc} | {steps:.0f} |")
    if None not in mean.values():
        lines.append(f"\nfine-tuning gains {mean['scratch'] - mean['finetune']:.3f} bits per character")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    from benchmarks.heldout import split_heldout

    args = parse_args(argv)
    say_whole_budget(f"{args.seconds:g} s a side" + ("" if args.source_run else f", {args.source_seconds:g} s for the "
                                                                              "source"))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    source, source_record = source_run(args, out)
    print(json.dumps({"source": source_record}, ensure_ascii=False), flush=True)
    paths = split_heldout(args.target, out / "splits", args.heldout)
    results = []
    with open(out / "results.jsonl", "a", encoding="utf-8") as log:
        for seed in range(1337, 1337 + args.seeds):
            for side in SIDES:
                result = one_side(side, seed, source, paths, args)
                results.append(result)
                line = json.dumps(result, ensure_ascii=False)
                print(line, flush=True)
                log.write(line + "\n")
    report = table(results)
    (out / "finetune.md").write_text(report, encoding="utf-8")
    print(report)


if __name__ == "__main__":
    from cli.entry import run_cli

    run_cli(lambda: main(sys.argv[1:]))
