"""Every GPU number of the speed work in one command, on one card, printed as one JSON object.

    python -m benchmarks.gpu_check --nanogpt PATH/TO/nanoGPT      # a checkout of karpathy/nanoGPT, never copied in
    python -m benchmarks.gpu_check --skip real_loop               # leave a part out

Design choices:
- One key per part (docs/en/speed.md, "On a GPU", explains them); a part that fails leaves the others' numbers.
- `real_loop` compares validation on runs of equal steps: under a time budget the schedule follows the clock.
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
from benchmarks.ladder_checks import WHOLE_BUDGET
from benchmarks.runs import last_line, train_py
from benchmarks.tb_read import read_scalars
from common.errors import UserError

PARTS = ("shakespeare", "default_size", "real_loop", "sampling")
CORPUS = opt.ROOT / "data" / "corpus" / "ko_default.txt"


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = opt.script_parser("python -m benchmarks.gpu_check", __doc__)
    ap.add_argument("--nanogpt", check=opt.NANOGPT, help="a checkout of github.com/karpathy/nanoGPT (its model.py)")
    ap.add_argument("--seconds", default=40.0, check=opt.SECONDS, help="the real loop's train.max_seconds (default 40)")
    ap.add_argument("--rounds", default=5, check=opt.count(), help="timing rounds, the sides taking turns (default 5)")
    ap.add_argument("--skip", action="append", default=[], choices=PARTS, help="leave a part out (repeatable)")
    args = ap.parse_args(argv)
    args.nanogpt = Path(args.nanogpt).expanduser() if args.nanogpt else None
    return args


def train_run(folder: Path, name: str, *overrides: str) -> dict:
    """One `python train.py device=cuda ...` on the built-in corpus: steps made, validation losses, compile lines."""
    from inference.checkpoint import load_checkpoint

    run, started = folder / name, time.perf_counter()
    r = train_py(["device=cuda", *overrides, WHOLE_BUDGET], run)  # every step runs
    if r.returncode != 0:
        return {"failed": last_line(r.stderr, str(r.returncode))[:300]}
    return {
        "steps": load_checkpoint(run / "ckpt.pt").step,
        "wall_s": round(time.perf_counter() - started, 1),
        "val_loss": {step: round(v, 4) for step, v in read_scalars(run).get("val/loss", [])},
        "compile_lines": [line for line in r.stdout.splitlines() if line.startswith("compile:")],
    }


def real_loop(seconds: float, equal_steps: int = 1000) -> dict:
    """Steps of train.py's default run for `seconds`, eager then auto; validation at `equal_steps` steps."""
    out: dict = {"command": f"python train.py device=cuda train.max_seconds={seconds:g} train.compile=false|auto"}
    with tempfile.TemporaryDirectory() as tmp:
        for setting in ("false", "auto"):
            out[setting] = train_run(Path(tmp), setting, f"train.max_seconds={seconds:g}", f"train.compile={setting}")
            out[setting]["val_loss"] = dict(list(out[setting].get("val_loss", {}).items())[-2:])
        for setting in ("false", "auto"):
            side = train_run(
                Path(tmp), f"steps-{setting}", f"train.max_steps={equal_steps}", f"train.compile={setting}"
            )
            out.setdefault("equal_steps", {"steps": equal_steps})[setting] = side.get("val_loss", side).get(
                equal_steps, side
            )
    if "steps" in out["false"] and "steps" in out["auto"]:
        out["steps_ratio"] = round(out["auto"]["steps"] / out["false"]["steps"], 2)
    return out


def sampling() -> dict:
    """`sampling_speeds` of the default model over the built-in corpus's vocabulary (float32, as generate.py)."""
    import torch

    from benchmarks.generation_speed import sampling_speeds
    from benchmarks.timing import seeded_model
    from data.corpus import load_corpus

    with tempfile.TemporaryDirectory() as tmp:
        vocab = load_corpus(CORPUS, cache_dir=Path(tmp)).tokenizer.vocab_size
    return sampling_speeds(seeded_model(vocab, device="cuda"), torch.device("cuda"))


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        raise UserError(
            "benchmarks.gpu_check measures a CUDA GPU and this machine has none; run it where "
            "`python -c 'import torch; print(torch.cuda.is_available())'` prints True"
        )
    from benchmarks.gpu_steps import DEFAULT, SHAKESPEARE, compare_ways
    from common.device import enable_fast_matmul

    enable_fast_matmul(torch.device("cuda"))
    result: dict = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "nanogpt": str(args.nanogpt) if args.nanogpt else None,
    }
    parts = {
        "shakespeare": lambda: compare_ways(SHAKESPEARE, "bfloat16", args.nanogpt, CORPUS, args.rounds),
        "default_size": lambda: compare_ways(DEFAULT, "bfloat16", args.nanogpt, CORPUS, args.rounds),
        "real_loop": lambda: real_loop(args.seconds),
        "sampling": sampling,
    }
    for name, part in parts.items():
        if name in args.skip:
            continue
        started = time.perf_counter()
        try:
            with contextlib.redirect_stdout(sys.stderr):
                result[name] = part()
        except Exception as e:  # noqa: BLE001 - one part failing leaves the others' numbers
            result[name] = {"failed": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
        result.setdefault("part_seconds", {})[name] = round(time.perf_counter() - started, 1)
        print(f"gpu_check: {name} done in {result['part_seconds'][name]} s", file=sys.stderr, flush=True)
    opt.print_json(result)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    run_cli(lambda: main(sys.argv[1:]))
