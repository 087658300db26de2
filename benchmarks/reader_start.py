"""How long a reader takes to start: `generate.py`'s time from its launch to its first sampled character.

    python -m benchmarks.reader_start --run runs/my-run --baseline ../main --repeat 9

Design choices:
- Whole processes under this interpreter, one per checkout: all a user waits for is timed, and only the code differs.
- The empty prompt makes stdout's first byte the first sampled character; checkouts take turns, so load hits both.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: only benchmarks/ is on the path
    sys.path.insert(0, str(ROOT))

from benchmarks import options as opt  # noqa: E402
from benchmarks.runs import last_line, train_py  # noqa: E402
from common.errors import UserError  # noqa: E402

NEW_TOKENS = 20  # enough that a character is printed whatever the tokenizer (the jamo one spells a syllable in 3)


def generate_command(run: Path) -> list[str]:
    return [sys.executable, "generate.py", f"ckpt={run}", f"max_new_tokens={NEW_TOKENS}", "device=cpu", "seed=1"]


def first_char_seconds(root: Path, run: Path) -> tuple[float, float]:
    """(seconds from launch to the first byte on stdout, seconds to exit) of generate.py in checkout `root`."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = time.perf_counter()
    proc = subprocess.Popen(
        generate_command(run), cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0, env=env
    )
    first = proc.stdout.read(1)
    first_at = time.perf_counter() - started
    _, err = proc.communicate()
    ended = time.perf_counter() - started
    if proc.returncode != 0 or not first:
        why = last_line(err.decode("utf-8", "replace"), "no output")
        raise UserError(f"generate.py in {root} failed (exit {proc.returncode}): {why}")
    return first_at, ended


def imports_dynamo(root: Path, run: Path) -> bool:
    """Whether generate.py in `root` imports torch._dynamo (python -X importtime lists every import on stderr)."""
    r = subprocess.run(
        [sys.executable, "-X", "importtime", *generate_command(run)[1:]],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return any(line.rstrip().endswith("torch._dynamo") for line in r.stderr.splitlines())


def train_run(out: Path, steps: int) -> Path:
    """A small trained run (the default model, `steps` steps on the built-in corpus) in `out`, reused if there."""
    run = out / "run"
    if (run / "ckpt.pt").is_file():
        return run
    r = train_py(
        [
            "device=cpu",
            f"train.max_steps={steps}",
            f"train.eval_interval={steps}",
            "train.eval_steps=2",
            "train.sample_chars=0",
            "train.sample_tokens=0",
            "train.attention_tokens=0",
        ],
        run,
    )
    if r.returncode != 0:
        raise UserError(f"training the run failed: {last_line(r.stderr, 'no output')}")
    return run


def check_costs(run: Path) -> dict[str, float]:
    """Milliseconds each start-up check of weights and a batch costs on `run` here (meta build included)."""
    import torch

    from benchmarks.timing import mean_seconds
    from hf_export.writer import choose_layout
    from inference.checkpoint import load_checkpoint, refuse_non_finite_logits, usable
    from inference.exported_checks import expected_tensors
    from inference.loading import model_from_checkpoint
    from inference.run_files import resolve_checkpoint
    from inference.weight_checks import _expected, check_state
    from training.guards.memory import available_bytes, estimate
    from training.settings.config import TrainConfig

    ckpt = load_checkpoint(resolve_checkpoint(run))
    model = model_from_checkpoint(ckpt)
    c = ckpt.model_config
    _expected.cache_clear()
    checks = {
        "structure": lambda: check_state(c, ckpt.model, ckpt.path),
        "export_header": lambda: expected_tensors(c, choose_layout(c)),
        "logits": lambda: refuse_non_finite_logits(model, ckpt.path),
        "resume_probe": lambda: usable(ckpt),
        "memory_estimate": lambda: (
            available_bytes(torch.device("cpu")),
            estimate(model, TrainConfig(), torch.device("cpu"), torch.float32),
        ),
    }
    return {name: round(mean_seconds(check, 1)() * 1000, 2) for name, check in checks.items()}


def measure(roots: dict[str, Path], run: Path, repeat: int) -> dict:
    """Every checkout timed `repeat` times, in turns; then whether each imports torch._dynamo."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in roots}
    for _ in range(repeat):
        for name, root in roots.items():
            times[name].append(first_char_seconds(root, run))
    result: dict = {"run": str(run), "repeat": repeat, "python": sys.executable, "checks_ms": check_costs(run)}
    for name, root in roots.items():
        first = [round(t[0], 4) for t in times[name]]
        ended = [round(t[1], 4) for t in times[name]]
        result[name] = {
            "root": str(root),
            "first_char_s": round(statistics.median(first), 4),
            "exit_s": round(statistics.median(ended), 4),
            "first_char_all_s": first,
            "imports_torch_dynamo": imports_dynamo(root, run),
        }
    if "baseline" in result:
        result["first_char_saved_s"] = round(result["baseline"]["first_char_s"] - result["root"]["first_char_s"], 4)
    return result


def parse_args(argv: list[str]) -> argparse.Namespace:
    checkout = opt.checkout("generate.py", "a checkout of kochar-gpt")
    ap = opt.script_parser("reader_start.py", __doc__)
    ap.add_argument(
        "--run",
        check=opt.run_or_checkpoint,
        help="a trained run folder or checkpoint (default: train a small one into --out)",
    )
    ap.add_argument(
        "--root", default=str(ROOT), check=checkout, help="the checkout whose generate.py is timed (default: this one)"
    )
    ap.add_argument(
        "--baseline", check=checkout, help="another checkout, timed in turns with --root (e.g. main, for 'before')"
    )
    ap.add_argument(
        "--repeat", default=5, check=opt.count(), help="launches per checkout; medians are reported (default 5)"
    )
    ap.add_argument(
        "--steps", default=20, check=opt.count(), help="training steps of the run made without --run (default 20)"
    )
    ap.add_argument(
        "--out", default="runs/reader_start", check=opt.out_folder, help="where the run made without --run goes"
    )
    args = ap.parse_args(argv)
    args.root = Path(args.root).expanduser().resolve()
    args.baseline = None if args.baseline is None else Path(args.baseline).expanduser().resolve()
    return args


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    run = Path(args.run).expanduser().resolve() if args.run else train_run(Path(args.out).resolve(), args.steps)
    roots = {"root": args.root, **({"baseline": args.baseline} if args.baseline else {})}
    opt.print_json(measure(roots, run, args.repeat))


if __name__ == "__main__":
    opt.run_script(main)
