"""What `train.dtype=auto` and `train.compile=auto` choose on this CPU, and whether they chose well, in one JSON object.

    python -m benchmarks.cpu_check                                   # the built-in corpus, 60-s runs
    python -m benchmarks.cpu_check --corpus ../shared/corpora/nsmc_dev.txt --seconds 180

It first says about how long it will take here (with the defaults, a few minutes: docs/en/speed.md), then each part
as it ends; stopped early (Ctrl-C, or a time limit's SIGTERM), it still prints the JSON of what it measured.

Design choices:
- `steps`: the default step in float32 and bfloat16, eager and compiled, taking turns; compile warm-ups apart. A CPU
  without bf16 instructions emulates bf16, slower than float32 however it runs, so there bf16 is timed eagerly only:
  its compile would cost most of a minute to show a choice auto never makes there.
- Each way's timed steps fill about `TIMED_S` seconds, whatever a step costs here: a slower CPU times fewer a round.
- `runs`: a `--seconds` run at auto beside one with the best fixed choice of `steps`: what auto's choices cost or gave.
"""

from __future__ import annotations

from cli.entry import run_cli  # first: a Ctrl-C while the imports run is one line (cli/entry.py)

import argparse
import contextlib
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import options as opt
from benchmarks.gpu_steps import DEFAULT, ours_overrides, ours_step
from benchmarks.ladder_checks import WHOLE_BUDGET
from benchmarks.runs import trained

WAYS = {
    "float32_eager": ("float32", False),
    "float32_compiled": ("float32", True),
    "bfloat16_eager": ("bfloat16", False),
    "bfloat16_compiled": ("bfloat16", True),
}
TIMED_S = 6.0  # seconds of timed steps a way, over all its rounds
# What a part costs on the slowest CPU it was tried on, for the estimate said first (it errs high): a way's set-up
# and untimed steps, inductor's compile of the default step in each precision, and a run's start and end beyond its
# budget.
SETUP_S, RUN_EXTRA_S = 5.0, 20.0
COMPILE_S = {"float32": 40.0, "bfloat16": 55.0}


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


def plan(seconds: float) -> tuple[bool, list[str], float]:
    """Whether this CPU has bf16 instructions (or KOCHAR_CPU_BF16 says so), the ways `steps` times (compiled bf16
    only where it has them), and about how many seconds the whole check takes with `seconds` runs: set-ups and
    compiles slow down on a busy machine, the timed steps and the runs' budgets do not."""
    from common.device import cpu_has_native_bf16
    from training.runner.plan import load_factor

    bf16 = cpu_has_native_bf16()
    ways = [name for name, (dtype, compiled) in WAYS.items() if bf16 or not (compiled and dtype == "bfloat16")]
    work = len(ways) * SETUP_S + sum(COMPILE_S[WAYS[name][0]] for name in ways if WAYS[name][1])
    return bf16, ways, work * load_factor() + len(ways) * TIMED_S + 2 * (seconds + RUN_EXTRA_S)


def say(text: str) -> None:
    print(f"cpu_check: {text}", file=sys.stderr, flush=True)


def steps(corpus: Path, rounds: int, ways: list[str], out: dict) -> None:
    """Into `out`, each as it is measured: the compiled ways' warm-ups and the steps a round that fill `TIMED_S`,
    then the tokens/s and ms per step of the default step in each way, taking turns."""
    import torch

    from benchmarks import timing
    from training.runner.plan import EAGER, Way

    cpu, tokens = torch.device("cpu"), DEFAULT["batch"] * DEFAULT["context_length"]
    out.update(size={**DEFAULT, "corpus": str(corpus)}, warmup_s={}, steps_per_round={})
    timers = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ways:
            dtype, compiled = WAYS[name]
            overrides = ours_overrides(DEFAULT, dtype, corpus, Path(tmp), cpu)
            step, _ = ours_step(overrides, Way(inductor=True) if compiled else EAGER, Path(tmp) / name)
            first = timing.seconds(step, cpu)  # inductor compiles
            if compiled:
                out["warmup_s"][name] = round(first, 1)
            cost = min(timing.seconds(step, cpu) for _ in range(3))  # past a recompile, and a moment's load
            n = out["steps_per_round"][name] = max(1, round(TIMED_S / rounds / cost))
            timers[name] = timing.step_timer(step, tokens, n, cpu, warmup=0)
            say(f"{name} set up" + (f", compiled in {first:.1f} s" if compiled else "") + f"; {n} steps a round")
        speed = timing.median_alternating(timers, rounds)
    out.update(
        tokens_per_sec={k: round(v) for k, v in speed.items()},
        ms_per_step={k: round(1000 * tokens / v, 2) for k, v in speed.items()},
        best=max(speed, key=speed.get),
    )


def runs(corpus: Path, seconds: float, best: str, out: dict) -> None:
    """Into `out`, each as it ends: a `seconds` run with dtype and compile at auto, then the same run with the best
    fixed choice: steps made."""
    dtype, compiled = WAYS[best]
    common = [f"data.path={corpus}", f"train.max_seconds={seconds:g}", WHOLE_BUDGET]
    out["command"] = f"python train.py data.path={corpus} train.max_seconds={seconds:g} train.early_stop=null"
    with tempfile.TemporaryDirectory() as tmp:
        out["auto"] = trained(
            [*common, "train.dtype=auto", "train.compile=auto"], Path(tmp) / "auto", said=("precision:", "compile:")
        )
        say(f"the run at auto ended: {out['auto'].get('steps', 'no')} steps; the run with {best} next")
        out[best] = trained(
            [*common, f"train.dtype={dtype}", f"train.compile={str(compiled).lower()}"], Path(tmp) / "best"
        )
    if "steps" in out["auto"] and "steps" in out[best]:
        out["auto_vs_best_steps"] = round(out["auto"]["steps"] / out[best]["steps"], 3)


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # a time limit's SIGTERM ends the check as a Ctrl-C does: with what it measured


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    import torch

    from training.runner.plan import device_name

    started = time.perf_counter()
    bf16, ways, estimate = plan(args.seconds)
    result: dict = {
        "cpu": device_name(torch.device("cpu")),
        "bf16_instructions": bf16,
        "torch": torch.__version__,
        "load_average": os.getloadavg(),
        "plan": {"ways": ways, "estimate_s": round(estimate)},
    }
    emulated = "" if bf16 else " (no bf16 instructions: bf16 is emulated here, so it is not compiled)"
    say(
        f"about {max(1, round(estimate / 60))} minutes here: the default step {', '.join(ways)}{emulated}, "
        f"then two {args.seconds:g}-s runs of train.py"
    )
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            steps(Path(args.corpus), args.rounds, ways, result.setdefault("steps", {}))
            ms = ", ".join(f"{k} {v} ms" for k, v in result["steps"]["ms_per_step"].items())
            say(f"steps timed after {time.perf_counter() - started:.0f} s: {ms}; two runs next")
            runs(Path(args.corpus), args.seconds, result["steps"]["best"], result.setdefault("runs", {}))
    except KeyboardInterrupt:
        result["interrupted_after_s"] = round(time.perf_counter() - started)
        opt.print_json(result)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    result["wall_s"] = round(time.perf_counter() - started)
    opt.print_json(result)


if __name__ == "__main__":
    run_cli(lambda: main(sys.argv[1:]))
