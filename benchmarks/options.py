"""Every benchmark's command line: one parser, one way of checking a path or a number, and `bench.py`'s flags.

Design choices:
- No torch here, so a mistyped flag is reported at once; the checks that need it are `benchmarks.run`'s.
- Every mistake, argparse's usage errors included, is a `UserError`: one `error:` line and exit code 2.
- A flag's check is declared with it (`check=`) and runs on the text as typed: the same words in every module.
- `--quick` and `--smoke` only change defaults; flags given explicitly still win.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable, Container
from pathlib import Path

from common.config_checks import refusal, shown_value
from common.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
SHARED_CORPUS = ROOT.parent / "shared" / "corpora" / "koconovel_dev.txt"
PRESET_NAMES = ("default", "shakespeare", "tiny")
DTYPE_CHOICES = ("auto", "float32", "bfloat16", "float16")
DEVICE_PATTERN = re.compile(r"auto|cpu|mps|cuda(:\d+)?")
NAME = re.compile(r"[\w.-]+")  # a corpus's or a run's name: it becomes a folder's
Check = Callable[[str, str], object]  # (the flag, the text typed) -> the value, or a UserError


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors raise `UserError`, its arguments checked as typed (`check`)."""

    def __init__(self, *args, **kwargs):
        self._checks: list[tuple[argparse.Action, Check]] = []
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, check: Check | None = None, **kwargs):  # noqa: D102 - argparse's, plus `check`
        action = super().add_argument(*args, **kwargs)
        if check is not None:
            self._checks.append((action, check))
        return action

    def parse_args(self, args=None, namespace=None):  # noqa: D102 - argparse's, then the checks
        parsed = super().parse_args(args, namespace)
        for action, check in self._checks:
            value, flag = getattr(parsed, action.dest), (action.option_strings or [action.metavar or action.dest])[0]
            if isinstance(value, list):
                setattr(parsed, action.dest, [check(flag, v) if isinstance(v, str) else v for v in value])
            elif isinstance(value, str):
                setattr(parsed, action.dest, check(flag, value))
        return parsed

    def error(self, message: str):  # noqa: D102 - argparse's hook
        raise UserError(f"{message} ({self.prog} --help lists the options)")


def script_parser(prog: str, doc: str, until: str = "\n\nDesign choices") -> OneLineArgumentParser:
    """The parser of a benchmark script run on its own: its docstring up to `until` (summary, usage) as --help."""
    return OneLineArgumentParser(
        prog=prog, description=doc.split(until)[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )


def campaign_flags(ap: OneLineArgumentParser, out: str, sides: str = "every run") -> None:
    """`--set`, `--heldout` and `--out`, as every campaign that scores its runs on held-out text takes them."""
    ap.add_argument("--set", default="", help=f"space-separated train.py overrides added to {sides}")
    ap.add_argument("--heldout", default=0.05, check=FRACTION, help="fraction of each corpus held out (default 0.05)")
    ap.add_argument("--out", default=out, check=out_folder, help=f"runs, splits and results go here (default {out})")


def run_script(main: Callable[[list[str]], object]) -> None:
    """A benchmark's `__main__`: `main(sys.argv[1:])`, its mistakes one `error:` line (cli/entry.py)."""
    from cli.entry import run_cli

    run_cli(lambda: main(sys.argv[1:]))


def print_json(result: object, indent: int | None = None) -> None:
    """A benchmark's answer: one JSON object on stdout, Korean as it is."""
    print(json.dumps(result, ensure_ascii=False, indent=indent), flush=True)


def _parsed(text: str, kind: type) -> float | int | None:
    try:
        return kind(text) if text == text.strip() else None
    except ValueError:
        return None


def number(low: float = 0.0, high: float = math.inf, integer: bool = False) -> Check:
    """A number in (low, high), finite; `integer`: a whole one (`count` names the usual ones)."""

    def fits(text: str) -> bool:
        value = _parsed(text, int if integer else float)
        return value is not None and math.isfinite(value) and low < value < high

    if integer:
        need = {0: "a positive integer", -1: "an integer >= 0"}.get(int(low), f"an integer >= {int(low) + 1}")
    else:
        need = f"a finite number {f'> {low:g}' if high == math.inf else f'in ({low:g}, {high:g})'}"

    def check(flag: str, text: str) -> float | int:
        if not fits(text):
            raise refusal(flag, text, f"it must be {need}", fits)
        return _parsed(text, int if integer else float)

    return check


def count(minimum: int = 1) -> Check:
    return number(minimum - 1, integer=True)


SECONDS = number()  # a budget: finite and positive, as train.py checks train.max_seconds
FRACTION = number(0.0, 1.0)  # as train.py checks data.val_fraction


def counts(minimum: int = 0) -> Check:
    """Comma-separated whole numbers, each at least `minimum` (`1337,1338`) -> a list."""
    one = count(minimum)

    def check(flag: str, text: str) -> list[int]:
        try:
            return [one(flag, part) for part in text.split(",")]
        except UserError:
            raise refusal(flag, text, f"give comma-separated integers >= {minimum}") from None

    return check


def chosen(known: Container[str] | Callable[[str], bool], what: str = "") -> Check:
    """Comma-separated names (maybe none), each of `known` (or passing it, `what` naming them) -> a list."""

    def check(flag: str, text: str) -> list[str]:
        names = text.split(",") if text else []
        unknown = [n for n in names if not (known(n) if callable(known) else n in known)]
        if unknown:
            known_ones = what or ", ".join(known)
            raise UserError(f"{flag}: unknown {', '.join(map(shown_value, unknown))} (known: {known_ones})")
        return names

    return check


def path_check(fits: Callable[[Path], bool], why: str | Callable[[Path], str]) -> Check:
    """A check of a path as typed (`~` expanded): `fits` it, or one line saying `why` not."""

    def check(flag: str, text: str) -> str:
        path = Path(text).expanduser()
        if not fits(path):
            raise UserError(f"{flag} {shown_value(text)}: {why(path) if callable(why) else why}")
        return text

    return check


def _existing(path: Path) -> Path | None:
    return next((p for p in (path, *path.parents) if p.exists()), None)


text_file = path_check(
    lambda p: p.is_file(), lambda p: f"{'a directory, not a file' if p.is_dir() else 'not found'}; pass a text file"
)
# where results go: a folder, or a path where one can be made (no file on the way)
out_folder = path_check(
    lambda p: _existing(p) is None or _existing(p).is_dir(),
    lambda p: f"{_existing(p)} is a file, not a folder; name a folder (it is made where missing)",
)
run_or_checkpoint = path_check(lambda p: p.is_dir() or p.is_file(), "no such run folder or checkpoint")


def named_text_file(flag: str, text: str) -> str:
    """NAME=PATH: a name for a folder and an existing file."""
    name, _, path = text.partition("=")
    if not NAME.fullmatch(name) or not Path(path).expanduser().is_file():
        raise UserError(f"{flag} {text!r}: give NAME=PATH with an existing text file (NAME of letters, digits, . _ -)")
    return text


def checkout(needed: str, what: str) -> Check:
    """A folder holding `needed` (nanoGPT's model.py, a kochar-gpt checkout's generate.py); `what` names it."""
    return path_check(lambda p: (p / needed).is_file(), f"no {needed} there; give {what}")


NANOGPT = checkout("model.py", "a checkout of github.com/karpathy/nanoGPT (clone it yourself)")


def _one_of(choices: Container[str], fits: Callable[[str], bool] | None = None) -> Check:
    def check(flag: str, text: str) -> str:
        if not (fits(text) if fits else text in choices):
            raise UserError(f"unknown {flag} {shown_value(text)}; use one of: {', '.join(choices)}")
        return text

    return check


def build_parser(description: str | None = None) -> OneLineArgumentParser:
    ap = OneLineArgumentParser(
        prog="bench.py", description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--device",
        default="auto",
        help="auto, cpu, cuda, cuda:N or mps (default: auto)",
        check=_one_of(("auto", "cpu", "cuda", "cuda:N", "mps"), DEVICE_PATTERN.fullmatch),
    )
    ap.add_argument(
        "--preset",
        default=None,
        help=f"model size: {', '.join(PRESET_NAMES)} "
        "(default: 'default' on the CPU, 'default' and 'shakespeare' on CUDA)",
        check=_one_of(PRESET_NAMES),
    )
    ap.add_argument(
        "--dtype",
        default="auto",
        help="training precision measured besides float32: "
        f"{', '.join(DTYPE_CHOICES)} (auto: bfloat16 where the device supports it)",
        check=_one_of(DTYPE_CHOICES),
    )
    ap.add_argument("--rounds", default=None, check=count(), help="alternating timing rounds (default 5)")
    ap.add_argument("--steps", default=None, check=count(), help="training steps per timed round (default 5)")
    ap.add_argument("--new-tokens", default=None, check=count(), help="tokens generated per timed round (default 500)")
    ap.add_argument(
        "--memory-mb",
        default=None,
        check=count(0),
        help="synthetic corpus size for the memory test in MB, 0 = off (default 100)",
    )
    ap.add_argument("--vocab-size", default=None, check=count(), help="model vocabulary (default: that of the corpus)")
    ap.add_argument(
        "--corpus",
        default=None,
        check=text_file,
        help="text file for the tokenizer benchmark and the "
        "vocabulary (default: ../shared/corpora/koconovel_dev.txt if present, else the built-in corpus)",
    )
    ap.add_argument("--quick", action="store_true", help="2 rounds, no memory test")
    ap.add_argument(
        "--generation-only",
        action="store_true",
        help="only the `generation` report: cached against crop-and-recompute, both position kinds",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a seconds-long run that only checks the benchmark works: the tiny preset, 1 round, "
        "1 step, 16 new tokens, the built-in corpus, no memory test (the numbers mean nothing)",
    )
    return ap


DEFAULTS = {"rounds": 5, "steps": 5, "new_tokens": 500, "memory_mb": 100}
QUICK = {**DEFAULTS, "rounds": 2, "memory_mb": 0}
SMOKE = {"rounds": 1, "steps": 1, "new_tokens": 16, "memory_mb": 0, "preset": "tiny"}


def parse_options(argv: list[str], description: str | None = None) -> argparse.Namespace:
    """`bench.py`'s checked arguments, `--quick`'s or `--smoke`'s defaults filling in, `corpus` a Path or None."""
    args = build_parser(description).parse_args(argv)
    for key, value in (SMOKE if args.smoke else QUICK if args.quick else DEFAULTS).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.corpus = Path(args.corpus).expanduser() if args.corpus else None
    if args.corpus is None and not args.smoke and SHARED_CORPUS.is_file():
        args.corpus = SHARED_CORPUS
    return args
