"""What dropout costs a training step, with torch's masks and with ours (model/dropout.py); prints JSON.

    python -m benchmarks.dropout_speed                     # recipe=modern's model and batch, p = 0.08
    python -m benchmarks.dropout_speed --model lecture --batch 8 --dropout 0.1 --dtype float32

Design choices:
- Three sides of one model take turns: no dropout, torch's masks, ours; `F.dropout` is swapped in only in its timer.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from benchmarks import options as opt


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = opt.script_parser("python -m benchmarks.dropout_speed", __doc__)
    ap.add_argument("--model", choices=("modern", "lecture"), default="modern")
    ap.add_argument("--batch", default=16, check=opt.count(), help="sequences per step (default 16, recipe=modern's)")
    ap.add_argument(
        "--dropout",
        default=0.08,
        check=opt.FRACTION,
        help="the rate, between 0 and 1 (default 0.08: auto's on the novels)",
    )
    ap.add_argument("--dtype", default="auto", help="auto (bf16 on CPUs with native bf16), float32, bfloat16")
    ap.add_argument("--vocab-size", default=1500, check=opt.count())
    ap.add_argument("--rounds", default=5, check=opt.count())
    ap.add_argument("--steps", default=5, check=opt.count(), help="steps per timed round")
    return ap.parse_args(argv)


def with_torch_masks(timer: Callable[[], float]) -> Callable[[], float]:
    """`timer`, run with torch's own dropout wherever the model calls `model.dropout`'s."""
    import torch.nn.functional as F

    import model.attention_kernels
    import model.dropout

    def timed() -> float:
        ours = model.dropout.dropout
        model.dropout.dropout = model.attention_kernels.masked_dropout = F.dropout
        try:
            return timer()
        finally:
            model.dropout.dropout = model.attention_kernels.masked_dropout = ours

    return timed


def main(argv: list[str]) -> None:
    import torch

    from benchmarks.timing import MODERN, median_alternating, seeded_model, training_timer
    from common.device import resolve_dtype

    args = parse_args(argv)
    device = torch.device("cpu")
    dtype = resolve_dtype(args.dtype, device, key="--dtype")
    options = MODERN if args.model == "modern" else {}

    def timer(p: float) -> Callable[[], float]:
        return training_timer(
            seeded_model(args.vocab_size, dropout=p, **options), args.batch, device, dtype, args.steps
        )

    timers = {"none": timer(0.0), "torch_masks": with_torch_masks(timer(args.dropout)), "ours": timer(args.dropout)}
    tps = median_alternating(timers, args.rounds)
    opt.print_json(
        {
            "model": args.model,
            "batch": args.batch,
            "dropout": args.dropout,
            "dtype": str(dtype),
            "threads": torch.get_num_threads(),
            **{f"train_tokens_per_sec_{k}": round(v, 1) for k, v in tps.items()},
            "ours_over_torch_masks": round(tps["ours"] / tps["torch_masks"], 3),
            "ours_over_none": round(tps["ours"] / tps["none"], 3),
        }
    )


if __name__ == "__main__":
    opt.run_script(main)
