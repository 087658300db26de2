"""The command line of `bench.py`: parsing and checking every flag before anything slow is imported.

Design choices:
- This module imports neither torch nor the model, so a mistyped flag is reported at once; the checks
  that need torch (is there a GPU, does it do bf16) live in `benchmarks.run`.
- Every mistake, argparse's own usage errors included, becomes a `UserError`: the entry script's
  `run_cli` prints it as one `error:` line and exits with code 2, like the other entry scripts.
- `--quick` and `--smoke` are shorthands that only change defaults; flags given explicitly still win.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

from common.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
SHARED_CORPUS = ROOT.parent / "shared" / "corpora" / "koconovel_dev.txt"
PRESET_NAMES = ("default", "shakespeare", "tiny")
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")
DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors raise `UserError` instead of printing the usage and exiting."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        raise UserError(f"{message} ({self.prog} --help lists the options)")


def script_parser(prog: str, doc: str, until: str) -> OneLineArgumentParser:
    """The parser of a benchmark script run on its own: its docstring up to `until` as the description."""
    return OneLineArgumentParser(prog=prog, description=doc.split(until)[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)


@dataclass
class BenchOptions:
    device: str
    preset: str | None
    dtype: str
    rounds: int
    steps: int
    new_tokens: int
    memory_mb: int
    vocab_size: int | None
    corpus: Path | None
    smoke: bool
    generation_only: bool = False


def build_parser(description: str | None = None, prog: str = "bench.py") -> OneLineArgumentParser:
    ap = OneLineArgumentParser(prog=prog, description=description,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps (default: auto)")
    ap.add_argument("--preset", default=None, help=f"model size: {', '.join(PRESET_NAMES)} "
                    "(default: 'default' on the CPU, 'default' and 'shakespeare' on CUDA)")
    ap.add_argument("--dtype", default="auto", help="training precision measured besides float32: "
                    f"{', '.join(DTYPE_CHOICES)} (auto: bfloat16 where the device supports it)")
    ap.add_argument("--rounds", type=int, default=None, help="alternating timing rounds (default 5)")
    ap.add_argument("--steps", type=int, default=None, help="training steps per timed round (default 5)")
    ap.add_argument("--new-tokens", type=int, default=None, help="tokens generated per timed round (default 500)")
    ap.add_argument("--memory-mb", type=int, default=None,
                    help="synthetic corpus size for the memory test in MB, 0 = off (default 100)")
    ap.add_argument("--vocab-size", type=int, default=None,
                    help="model vocabulary (default: that of the corpus)")
    ap.add_argument("--corpus", default=None, help="text file for the tokenizer benchmark and the vocabulary "
                    "(default: ../shared/corpora/koconovel_dev.txt if present, else the built-in corpus)")
    ap.add_argument("--quick", action="store_true", help="2 rounds, no memory test")
    ap.add_argument("--generation-only", action="store_true",
                    help="only the `generation` report: cached against crop-and-recompute, both position kinds")
    ap.add_argument("--smoke", action="store_true",
                    help="a seconds-long run that only checks the benchmark works: the tiny preset, 1 round, "
                         "1 step, 16 new tokens, the built-in corpus, no memory test (the numbers mean nothing)")
    return ap


def _defaults(args: argparse.Namespace) -> dict[str, object]:
    if args.smoke:
        return {"rounds": 1, "steps": 1, "new_tokens": 16, "memory_mb": 0, "preset": "tiny"}
    if args.quick:
        return {"rounds": 2, "steps": 5, "new_tokens": 500, "memory_mb": 0, "preset": None}
    return {"rounds": 5, "steps": 5, "new_tokens": 500, "memory_mb": 100, "preset": None}


def _check_count(flag: str, value: int | None, minimum: int) -> None:
    if value is not None and value < minimum:
        raise UserError(f"{flag} must be >= {minimum}, got {value}")


def _check_choices(args: argparse.Namespace) -> None:
    if not DEVICE_PATTERN.fullmatch(args.device):
        raise UserError(f"unknown --device {args.device}; use auto, cpu, cuda, cuda:N or mps")
    if args.preset is not None and args.preset not in PRESET_NAMES:
        raise UserError(f"unknown --preset {args.preset}; use one of: {', '.join(PRESET_NAMES)}")
    if args.dtype not in DTYPE_CHOICES:
        raise UserError(f"unknown --dtype {args.dtype}; use one of: {', '.join(DTYPE_CHOICES)}")


def _corpus_path(value: str | None, smoke: bool) -> Path | None:
    """The corpus to read, or None for the built-in one."""
    if value is None:
        return None if smoke or not SHARED_CORPUS.is_file() else SHARED_CORPUS
    path = Path(value).expanduser()
    if not path.is_file():
        what = "a directory, not a file" if path.is_dir() else "not found"
        raise UserError(f"--corpus {value}: {what}; pass a text file")
    return path


def parse_options(argv: list[str], description: str | None = None) -> BenchOptions:
    """Parse and check `bench.py`'s arguments; any mistake raises `UserError`."""
    args = build_parser(description).parse_args(argv)
    _check_choices(args)
    defaults = _defaults(args)
    for flag, minimum in (("rounds", 1), ("steps", 1), ("new_tokens", 1), ("memory_mb", 0), ("vocab_size", 1)):
        _check_count("--" + flag.replace("_", "-"), getattr(args, flag), minimum)
    pick = {k: getattr(args, k) if getattr(args, k) is not None else v for k, v in defaults.items()}
    return BenchOptions(device=args.device, dtype=args.dtype, vocab_size=args.vocab_size,
                        corpus=_corpus_path(args.corpus, args.smoke), smoke=args.smoke,
                        generation_only=args.generation_only, **pick)
