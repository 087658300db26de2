"""The staged head's per-syllable scores on held rows, two ways, forward and backward; prints JSON.

    python -m benchmarks.row_scores          # recipe=modern's batch (16 x 128 positions), bf16 where native
    python -m benchmarks.row_scores --held 1500,2600 --dtype float32

Design choices:
- `gather` fetches each position's 28 rows, `product` multiplies h with every held row and keeps the 28 columns: the
  first grows with the positions, the second with the rows held too; `HeldReadoutRows.dot` picks by this benchmark.
- Both run `HeldReadoutRows`' own methods on the same random table, targets and gradient, taking turns.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: only benchmarks/ is on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import options as opt  # noqa: E402


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = opt.script_parser("python -m benchmarks.row_scores", __doc__)
    ap.add_argument(
        "--held", default="1500,2600,4000,6000", check=opt.counts(1), help="comma-separated held-row counts"
    )
    ap.add_argument("--positions", default=16 * 128, check=opt.count(), help="positions per step (default 2048)")
    ap.add_argument("--width", default=128, check=opt.count(), help="embedding size (default 128)")
    ap.add_argument("--dtype", default="auto", help="auto (bf16 on CPUs with native bf16), float32, bfloat16")
    ap.add_argument("--rounds", default=5, check=opt.count())
    ap.add_argument("--reps", default=10, check=opt.count(), help="forward and backward passes per timed round")
    return ap.parse_args(argv)


def timers(held: int, positions: int, width: int, dtype, reps: int) -> dict:
    import torch

    from benchmarks.timing import mean_seconds
    from model.hangul.held_rows import HeldReadoutRows
    from model.hangul.jamo_embedding import NUM_FINALS, NUM_SYLLABLES

    g = torch.Generator().manual_seed(0)
    kept = torch.randperm(NUM_SYLLABLES, generator=g)[:held].sort().values
    rows = HeldReadoutRows(torch.randn(NUM_SYLLABLES, width, generator=g), kept)
    pair = torch.randint(0, NUM_SYLLABLES // NUM_FINALS, (positions,), generator=g)
    index = pair[:, None] * NUM_FINALS + torch.arange(NUM_FINALS)
    h = torch.randn(positions, width, generator=g).to(dtype).requires_grad_()
    grad = torch.randn(positions, NUM_FINALS, generator=g).to(dtype)

    def step(way) -> None:
        way(h, index).backward(grad)
        rows.weight.grad = h.grad = None

    return {
        "gather": mean_seconds(lambda: step(rows.dot_by_gather), reps),
        "product": mean_seconds(lambda: step(rows.dot_by_product), reps),
    }


def main(argv: list[str]) -> None:
    import torch

    from benchmarks.timing import median_alternating
    from common.device import resolve_dtype
    from model.hangul.held_rows import PRODUCT_ROWS_PER_SLOT
    from model.hangul.jamo_embedding import NUM_FINALS

    args = parse_args(argv)
    dtype = resolve_dtype(args.dtype, torch.device("cpu"), key="--dtype")
    report = {
        "positions": args.positions,
        "width": args.width,
        "dtype": str(dtype).removeprefix("torch."),
        "product_up_to_held_rows": PRODUCT_ROWS_PER_SLOT * NUM_FINALS,
        "held": {},
    }
    for held in args.held:
        sides = timers(held, args.positions, args.width, dtype, args.reps)
        for timer in sides.values():  # warm-up
            timer()
        ms = median_alternating(sides, args.rounds)
        report["held"][held] = {
            "gather_ms": round(ms["gather"] * 1000, 3),
            "product_ms": round(ms["product"] * 1000, 3),
            "product_speedup": round(ms["gather"] / ms["product"], 2),
        }
    opt.print_json(report)


if __name__ == "__main__":
    opt.run_script(main)
