"""Fine-tuning against training from scratch on new text, at the same short budget, scored on held-out text.

    python -m benchmarks.finetune --source ../shared/corpora/koconovel_dev.txt \
        --target ../shared/corpora/nsmc_dev.txt --source-seconds 300 --seconds 60 --seeds 2

Design choices:
- Both sides are what a user types (`train.py data.path=<target>`, one with `train.init_from=<source run>`), early
  stopping off so both use the whole budget, scored on their best weights on the target's held-out tail.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: only benchmarks/ is on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import options as opt  # noqa: E402
from benchmarks.ladder_checks import WHOLE_BUDGET, say_whole_budget  # noqa: E402
from benchmarks.runs import campaign_run, heldout_scores, keep, kept, results, sample, split_heldout  # noqa: E402
from common.errors import UserError  # noqa: E402

SIDES = ("finetune", "scratch")
TRAINED = ("steps", "seconds", "stopped")  # train.py's numbers a row keeps


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = opt.script_parser("finetune.py", __doc__)
    ap.add_argument("--source", check=opt.text_file, help="the text the source run trains on")
    ap.add_argument(
        "--source-run",
        default=None,
        check=opt.run_or_checkpoint,
        help="an existing run to fine-tune instead of training one",
    )
    ap.add_argument("--source-seconds", default=300.0, check=opt.SECONDS, help="the source run's budget (default 300)")
    ap.add_argument("--target", required=True, check=opt.text_file, help="the new text (its tail is held out)")
    ap.add_argument("--seconds", default=60.0, check=opt.SECONDS, help="budget of each side on the target (default 60)")
    ap.add_argument("--seeds", default=1, check=opt.count(), help="seeds per side (default 1: 1337)")
    ap.add_argument("--prompt", default="이 영화", help="the samples' prompt (default: 이 영화)")
    opt.campaign_flags(ap, "runs/finetune", "both sides")
    args = ap.parse_args(argv)
    if args.source_run is None and args.source is None:
        raise UserError("give --source FILE (trained once) or --source-run DIR (an existing run)")
    return args


def source_run(args: argparse.Namespace, out: Path) -> tuple[Path, dict]:
    if args.source_run:
        return Path(args.source_run).expanduser(), {"source_run": args.source_run}
    run_dir = out / "source"
    record = {"source": str(args.source), "source_seconds": args.source_seconds, "set": args.set}
    done = out / "source.json"
    previous = kept(record, results(done)) if (run_dir / "ckpt.pt").is_file() else None
    if previous:
        return run_dir, previous
    print(f"training the source run on {args.source} for {args.source_seconds:g} s", file=sys.stderr)
    train = [f"data.path={args.source}", f"train.max_seconds={args.source_seconds}", WHOLE_BUDGET, *args.set.split()]
    record = campaign_run(record, train, run_dir, lambda _: {}, TRAINED)
    if "error" in record:
        raise SystemExit(f"error: the source run failed: {record['error']}")
    done.write_text(json.dumps(record, ensure_ascii=False))
    return run_dir, record


def one_side(side: str, seed: int, source: Path, paths: tuple[Path, Path], args: argparse.Namespace) -> dict:
    target_train, heldout = paths
    run_dir = Path(args.out) / f"{side}-seed{seed}"
    overrides = [f"data.path={target_train}", f"train.max_seconds={args.seconds}", f"seed={seed}", WHOLE_BUDGET]
    if side == "finetune":
        overrides.append(f"train.init_from={source}")
    record = {"side": side, "seed": seed, "seconds_budget": args.seconds, "set": args.set}
    return campaign_run(
        record,
        overrides + args.set.split(),
        run_dir,
        lambda _: {
            **heldout_scores(run_dir, heldout, unknown_chars="unknown_chars"),
            "sample": sample(run_dir, args.prompt, 120, "seed=1337"),
        },
        TRAINED,
    )


def table(rows: list[dict]) -> str:
    """Per side, the mean held-out bpc and steps over the seeds that ran, and the gain of fine-tuning."""
    lines = ["| side | seeds | held-out bpc (mean) | steps (mean) |", "|---|---:|---:|---:|"]
    mean: dict[str, float | None] = {}
    for side in SIDES:
        ran = [r for r in rows if r["side"] == side and "error" not in r]
        scores = [r["heldout_bpc"] for r in ran if r.get("heldout_bpc") is not None]
        mean[side] = sum(scores) / len(scores) if scores else None
        steps = sum(r["steps"] for r in ran) / len(ran) if ran else 0
        lines.append(f"| {side} | {len(ran)} | {'—' if mean[side] is None else f'{mean[side]:.3f}'} | {steps:.0f} |")
    if None not in mean.values():
        lines.append(f"\nfine-tuning gains {mean['scratch'] - mean['finetune']:.3f} bits per character")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    say_whole_budget(
        f"{args.seconds:g} s a side" + ("" if args.source_run else f", {args.source_seconds:g} s for the source")
    )
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    source, source_record = source_run(args, out)
    opt.print_json({"source": source_record})
    paths = split_heldout(args.target, out / "splits", args.heldout)
    rows = [
        keep(one_side(side, seed, source, paths, args), out / "results.jsonl")
        for seed in range(1337, 1337 + args.seeds)
        for side in SIDES
    ]
    report = table(rows)
    (out / "finetune.md").write_text(report, encoding="utf-8")
    print(report)


if __name__ == "__main__":
    opt.run_script(main)
