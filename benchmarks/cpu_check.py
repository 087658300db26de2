"""What `train.dtype=auto` and `train.compile=auto` choose on this CPU, and whether they chose well, in one JSON object.

    python -m benchmarks.cpu_check                                   # the built-in corpus, 60-s runs
    python -m benchmarks.cpu_check --corpus ../shared/corpora/nsmc_dev.txt --seconds 180

Design choices:
- `steps`: the default step in float32 and bfloat16, eager and compiled, taking turns; compile warm-ups apart.
- `runs`: a `--seconds` run at auto beside one with the best fixed choice of `steps`: what auto's choices cost or gave.
"""

from __future__ import annotations

from cli.entry import run_cli  # first: a Ctrl-C while the imports run is one line (cli/entry.py)

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import options as opt
from benchmarks.gpu_steps import DEFAULT, ours_overrides, ours_step, tokens_per_second
from benchmarks.ladder_checks import WHOLE_BUDGET
from benchmarks.runs import trained

WAYS = {
    "float32_eager": ("float32", False),
    "float32_compiled": ("float32", True),
    "bfloat16_eager": ("bfloat16", False),
    "bfloat16_compiled": ("bfloat16", True),
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = opt.script_parser("python -m benchmarks.cpu_check", __doc__)
    ap.add_argument(
        "--corpus",
        default=str(opt.ROOT / "data" / "corpus" / "ko_default.txt"),
        check=opt.text_file,
        help="the text the runs train on (default: the built-in corpus)",
    )
    ap.add_argument("--seconds", default=60.0, check=opt.SECONDS, help="each run's train.max_seconds (default 60)")
    ap.add_argument("--rounds", default=5, check=opt.count(), help="timing rounds, the sides taking turns (default 5)")
    return ap.parse_args(argv)


def steps(corpus: Path, rounds: int) -> dict:
    """Tokens/s and ms per step of the default step in each precision, eager and compiled; compiled warm-ups."""
    import torch

    from training.runner.plan import EAGER, Way

    cpu, tokens = torch.device("cpu"), DEFAULT["batch"] * DEFAULT["context_length"]
    timed, warmups = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (dtype, compiled) in WAYS.items():
            overrides = ours_overrides(DEFAULT, dtype, corpus, Path(tmp), cpu)
            timed[name], _ = ours_step(overrides, Way(inductor=True) if compiled else EAGER, Path(tmp) / name)
            started = time.perf_counter()
            timed[name]()  # the first step: inductor compiles
            warmups[name] = round(time.perf_counter() - started, 1)
        speed = tokens_per_second(timed, tokens, rounds, cpu)
    return {
        "size": {**DEFAULT, "corpus": str(corpus)},
        "tokens_per_sec": {k: round(v) for k, v in speed.items()},
        "ms_per_step": {k: round(1000 * tokens / v, 2) for k, v in speed.items()},
        "warmup_s": {k: v for k, v in warmups.items() if WAYS[k][1]},
        "best": max(speed, key=speed.get),
    }


def runs(corpus: Path, seconds: float, best: str) -> dict:
    """A `seconds` run with dtype and compile at auto, then the same run with the best fixed choice: steps made."""
    dtype, compiled = WAYS[best]
    common = [f"data.path={corpus}", f"train.max_seconds={seconds:g}", WHOLE_BUDGET]
    out: dict = {"command": f"python train.py data.path={corpus} train.max_seconds={seconds:g} train.early_stop=null"}
    with tempfile.TemporaryDirectory() as tmp:
        out["auto"] = trained(
            [*common, "train.dtype=auto", "train.compile=auto"], Path(tmp) / "auto", said=("precision:", "compile:")
        )
        out[best] = trained(
            [*common, f"train.dtype={dtype}", f"train.compile={str(compiled).lower()}"], Path(tmp) / "best"
        )
    if "steps" in out["auto"] and "steps" in out[best]:
        out["auto_vs_best_steps"] = round(out["auto"]["steps"] / out[best]["steps"], 3)
    return out


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    import torch

    from common.device import cpu_has_native_bf16
    from training.runner.plan import device_name

    result: dict = {
        "cpu": device_name(torch.device("cpu")),
        "bf16_instructions": cpu_has_native_bf16(),
        "torch": torch.__version__,
        "load_average": os.getloadavg(),
    }
    with contextlib.redirect_stdout(sys.stderr):
        result["steps"] = steps(Path(args.corpus), args.rounds)
        result["runs"] = runs(Path(args.corpus), args.seconds, result["steps"]["best"])
    opt.print_json(result)


if __name__ == "__main__":
    run_cli(lambda: main(sys.argv[1:]))
