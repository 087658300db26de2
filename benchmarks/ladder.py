"""The ladder, measured so that it reproduces: every rung on every corpus, several seeds, one after another,
scored on held-out text, beside nanoGPT; one command regenerates the table and the picture.

    python -m benchmarks.ladder --corpus koconovel=../shared/corpora/koconovel_dev.txt \
        --corpus nsmc=../shared/corpora/nsmc_dev.txt --seconds 300 --seeds 2 --nanogpt ~/src/nanoGPT
    python -m benchmarks.ladder --corpus ... --steps 1500      # a fixed step count instead of --seconds

Everything is checked before the first run (benchmarks/ladder_checks.py): every rung's and variant's train.py config,
the budget, the held-out fraction, each corpus as train.py reads it, and the rows already in OUT. Every run prints
one JSON line and is appended to OUT/results.jsonl, with what makes rows comparable (held-out fraction, budget, the
corpus's fingerprint, the weights scored); a run already there (same corpus, rung, seed, budget and overrides) is not
repeated, so an interrupted campaign continues where it stopped, and a run that failed makes the exit non-zero. At the
end the table (mean and spread over seeds of the held-out bits per character, the gap to nanoGPT, tokens/s,
steps, and each `--variant` against its recipe on the same seeds) is printed and written to OUT/ladder.md;
`--docs` also replaces the tables in docs/en/ladder.md and docs/ko/ladder.md and redraws docs/images/ladder.png
(benchmarks/ladder_report.py); a campaign with variants replaces the levers' block only.

Design choices:
- A rung is a recipe (configs/recipe/) trained exactly as `python train.py recipe=<rung> data.path=...`
  would train it, with `train.max_seconds` as the only limit; nothing else is pinned, so the lecture rung is
  the default run a user gets. `--set` adds overrides to every run (e.g. to explore a learning rate).
- Held-out text: the corpus's tail, cut at a document boundary (benchmarks/heldout.py); every run and the
  nanoGPT peer train on the rest and are scored by `evaluate.py` on the tail. A run is scored as a user's
  `evaluate.py ckpt=<run>` scores it: its best validated weights (best.pt where it differs from ckpt.pt); the row
  records which (`scored`) and, where that was best.pt, the last weights' score beside it (`heldout_bpc_last`).
- Every run has the whole budget: early stopping (`train.early_stop`, on by default for a time budget) is off
  (benchmarks/ladder_checks.py), and the campaign says so when it starts.
- Runs go one after another, never in parallel; the 1-minute load average before each run is recorded and
  a warning printed when the machine is not idle. So is the machine's speed on a fixed matrix product
  (`reference_speed`), since a machine that looks idle can still slow down between one run and the next.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))
RUNGS = ("lecture", "l1_torch_init", "l2_rope", "l3_rmsnorm", "l4_relu2", "l5_qk_norm", "l6_zero_init", "modern")
RESULT = re.compile(r"run: \S+\s+step (?P<step>\d+)\s+val loss \S+\s+val bpc \S+\s+(?P<secs>[\d.]+)s \((?P<why>\w+)\)")


def parse_args(argv: list[str]) -> argparse.Namespace:
    from benchmarks.ladder_checks import check_numbers
    from benchmarks.options import OneLineArgumentParser
    from common.errors import UserError

    ap = OneLineArgumentParser(prog="ladder.py", description=__doc__.split("\n\nEvery run")[0],
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="append", required=True, metavar="NAME=PATH")
    ap.add_argument("--seconds", type=float, default=None, help="wall-clock budget of each run (default 300)")
    ap.add_argument("--steps", type=int, default=None, help="a step budget instead of --seconds (not with it)")
    ap.add_argument("--seeds", type=int, default=2, help="seeds per rung (default 2: 1337, 1338)")
    ap.add_argument("--rungs", default=",".join(RUNGS), help="comma-separated recipes (default: the ladder)")
    ap.add_argument("--set", default="", help="space-separated train.py overrides added to every run")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=RECIPE:OVERRIDES",
                    help="an extra rung: a recipe with space-separated overrides, e.g. "
                         "'modern+gate=modern:model.attention_gate=true' (repeatable)")
    ap.add_argument("--nanogpt", default=None, help="a nanoGPT checkout: train it beside the rungs")
    ap.add_argument("--heldout", type=float, default=0.05, help="fraction of each corpus held out (default 0.05)")
    ap.add_argument("--out", default="runs/ladder", help="runs, splits and results go here (default runs/ladder)")
    ap.add_argument("--docs", action="store_true",
                    help="rewrite the docs' ladder tables and docs/images/ladder.png (with --variant: the levers' "
                    "table only)")
    args = ap.parse_args(argv)
    names = [spec.partition("=")[0] for spec in args.corpus]
    for spec, name in zip(args.corpus, names, strict=True):
        path = spec.partition("=")[2]
        if not re.fullmatch(r"[\w.-]+", name) or not Path(path).expanduser().is_file():
            raise UserError(f"--corpus {spec!r}: give NAME=PATH with an existing text file")
        if names.count(name) > 1:  # the rows of two texts under one name would be averaged together
            raise UserError(f"--corpus: the name {name} is given {names.count(name)} times; give each corpus its own")
    unknown = [r for r in args.rungs.split(",") if not (ROOT / "configs" / "recipe" / f"{r}.yaml").is_file()]
    if unknown:
        raise UserError(f"--rungs: no recipe {', '.join(unknown)} in configs/recipe/")
    check_numbers(args)
    args.variants = {}
    for spec in args.variant:
        name, _, rest = spec.partition("=")
        recipe, _, overrides = rest.partition(":")
        if not re.fullmatch(r"[\w.+-]+", name) or not (ROOT / "configs" / "recipe" / f"{recipe}.yaml").is_file():
            raise UserError(f"--variant {spec!r}: give NAME=RECIPE:OVERRIDES with a recipe of configs/recipe/")
        args.variants[name] = (recipe, overrides.split())
    return args


def budget(args: argparse.Namespace) -> str:
    """The budget every run of this campaign gets, as the results record it: "300 s" or "1500 steps"."""
    return f"{args.steps} steps" if args.steps else f"{args.seconds:g} s"


def cpu_busy(seconds: float = 2.0) -> float | None:
    """The share of all CPUs busy over the next `seconds` (from /proc/stat; None where there is none). The
    campaign itself sleeps meanwhile, so this is what other programs use: unlike the load average, it does not
    still count the run that just ended."""
    def sample() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(fields), fields[3] + (fields[4] if len(fields) > 4 else 0)  # total, idle + iowait
    try:
        total0, idle0 = sample()
        time.sleep(seconds)
        total1, idle1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return round(1 - (idle1 - idle0) / max(total1 - total0, 1), 3)


def reference_speed(reps: int = 150, rounds: int = 3) -> float:
    """GFLOP/s of one fixed float32 matrix product on this process's threads, now. An idle machine can still
    change speed (a host's other tenants, its clock): runs hours apart compare only if this held still."""
    import torch

    from benchmarks.timing import mean_seconds, median_alternating

    a, b = torch.randn(256, 1024), torch.randn(1024, 1024)
    a @ b  # warm-up
    seconds = median_alternating({"matmul": mean_seconds(lambda: a @ b, reps)}, rounds)["matmul"]
    return round(2 * 256 * 1024 * 1024 / seconds / 1e9, 1)


def machine_before_run() -> dict:
    """The load average (which still counts the previous run), the CPU share other programs use now, and the
    machine's speed on a fixed matrix product."""
    busy = cpu_busy()
    if busy is not None and busy > 0.1:
        print(f"warning: the machine is not idle ({busy:.0%} of the CPUs busy); timings will be low", file=sys.stderr)
    return {"load_before": round(os.getloadavg()[0], 2), "cpu_busy_before": busy, "reference_gflops": reference_speed()}


def evaluate(ckpt: Path, heldout: Path) -> dict:
    cmd = [sys.executable, str(ROOT / "evaluate.py"), f"ckpt={ckpt}", f"data.path={heldout}", "progress=false"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["evaluate.py failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def train_rung(rung: str, seed: int, train: Path, run_dir: Path, args: argparse.Namespace) -> dict:
    """One `train.py` run of a recipe; its closing numbers from the result line and TensorBoard."""
    from benchmarks.ladder_checks import run_overrides
    from benchmarks.tb_read import read_scalars

    recipe, extra = getattr(args, "variants", {}).get(rung, (rung, []))  # hangul_compare passes no variants
    cmd = [sys.executable, str(ROOT / "train.py"), *run_overrides(recipe, extra, args, str(train), seed),
           f"hydra.run.dir={run_dir}", "train.overwrite=true"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    m = RESULT.search(proc.stdout)
    if proc.returncode or m is None:
        return {"error": (proc.stderr.strip().splitlines() or ["no result line"])[-1]}
    tps = sorted(v for _, v in read_scalars(run_dir).get("train/tokens_per_sec", []))
    return {"steps": int(m["step"]), "seconds": float(m["secs"]), "stopped": m["why"],
            "tokens_per_sec": round(tps[len(tps) // 2]) if tps else None}


def run_peer(seed: int, train: Path, heldout: Path, out: Path, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "nanogpt_peer.py"), "--nanogpt", args.nanogpt, "--corpus",
           str(train), "--heldout", str(heldout), "--seed", str(seed), "--out", str(out)]
    cmd += ["--steps", str(args.steps)] if args.steps else ["--seconds", str(args.seconds)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["nanogpt_peer.py failed"])[-1]}
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"steps": r["steps"], "seconds": r["seconds_run"], "tokens_per_sec": r["tokens_per_sec"],
            "tokens": r["tokens"], "heldout_bpc": r["heldout_bpc"], "heldout_chars": r["heldout_chars"]}


def run_name(rung: str, seed: int, overrides: str) -> str:
    """A run's folder: with `--set`, a short digest of the overrides, so that a probe keeps its own folder
    instead of overwriting the plain rung's."""
    if not overrides.strip():
        return f"{rung}-seed{seed}"
    return f"{rung}-seed{seed}-set{hashlib.sha1(overrides.encode('utf-8')).hexdigest()[:8]}"


def one_run(corpus: str, rung: str, seed: int, split: tuple[Path, Path, str], args: argparse.Namespace) -> dict:
    train, heldout, fingerprint = split
    run_dir = Path(args.out) / corpus / run_name(rung, seed, args.set)
    record = {"corpus": corpus, "rung": rung, "seed": seed, "budget": budget(args), "set": args.set,
              "heldout": args.heldout, "corpus_sha256": fingerprint, **machine_before_run()}
    if rung == "nanogpt":
        return {**record, **run_peer(seed, train, heldout, run_dir, args)}
    trained = train_rung(rung, seed, train, run_dir, args)
    if "error" in trained:
        return {**record, **trained}
    scored = evaluate(run_dir, heldout)
    last = evaluate(run_dir / "ckpt.pt", heldout) if scored.get("chosen") == "best" else {}
    facts = run_facts(run_dir)
    if facts.get("tokens_per_step"):
        facts["tokens"] = trained["steps"] * facts.pop("tokens_per_step")
    return {**record, **trained, "heldout_bpc": scored.get("bpc"), "heldout_chars": scored.get("chars"),
            "weights": scored.get("weights"), "average_updates": scored.get("average_updates"),
            "scored": scored.get("chosen"), "scored_step": scored.get("step"), "heldout_bpc_last": last.get("bpc"),
            **facts,
            **({"error": scored["error"]} if "error" in scored else {})}


def run_facts(run_dir: Path) -> dict:
    """Parameters, tokens per step and the dropout the run trained with, from its checkpoint."""
    import torch

    from inference.loading import load_run
    from model.counts import num_parameters

    try:
        run = load_run(run_dir, torch.device("cpu"))
    except Exception:  # noqa: BLE001 - facts are a nicety; the run's error, if any, is reported elsewhere
        return {}
    t = run.checkpoint.config.get("train", {})
    tokens = t.get("batch_size", 0) * run.model.context_length * t.get("grad_accum_steps", 1)
    return {"params": num_parameters(run.model), "tokens_per_step": tokens, "dropout": run.model.config.dropout}


def same_run(a: dict, b: dict) -> bool:
    keys = ("corpus", "rung", "seed", "budget", "set")
    return all(a.get(k) == b.get(k) for k in keys) and "error" not in a


def main(argv: list[str]) -> None:
    from benchmarks.ladder_checks import CampaignFailed, say_whole_budget
    from benchmarks.ladder_report import report

    args = parse_args(argv)
    out = Path(args.out)
    results_file = out / "results.jsonl"
    done = [json.loads(line) for line in results_file.read_text().splitlines()] if results_file.is_file() else []
    rungs = (["nanogpt"] if args.nanogpt else []) + args.rungs.split(",") + list(args.variants)
    splits = prepare(args, rungs, done, out)  # every check before the first run; nothing written if one fails
    say_whole_budget(budget(args))
    failed = []
    for name, split in splits.items():
        for seed in range(1337, 1337 + args.seeds):
            for rung in rungs:
                want = {"corpus": name, "rung": rung, "seed": seed, "budget": budget(args), "set": args.set}
                if any(same_run(d, want) for d in done):
                    continue
                record = one_run(name, rung, seed, split, args)
                print(json.dumps(record, ensure_ascii=False), flush=True)
                with results_file.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
                done.append(record)
                failed += [record] if "error" in record else []
    report(done, budget(args), args.set, (*RUNGS, *args.variants), out, args.docs)
    if failed:
        raise CampaignFailed(failed)


def prepare(args: argparse.Namespace, rungs: list[str], done: list[dict], out: Path) -> dict[str, tuple]:
    """Check everything, then split each corpus: {name: (training file, held-out file, fingerprint)}."""
    from benchmarks.heldout import corpus_fingerprint, split_heldout
    from benchmarks.ladder_checks import check_results, check_runs
    from data.text import detect_encoding

    corpora = dict(spec.partition("=")[::2] for spec in args.corpus)
    check_runs(args, rungs, next(iter(corpora.values())))
    prints = {}
    for name, path in corpora.items():
        detect_encoding(Path(path).expanduser())  # train.py's check of the text, before any file is written
        prints[name] = corpus_fingerprint(path)
        check_results(done, name, args.heldout, prints[name], out)
    out.mkdir(parents=True, exist_ok=True)
    return {name: (*split_heldout(path, out / "splits", args.heldout), prints[name]) for name, path in corpora.items()}


if __name__ == "__main__":
    from cli.entry import run_cli

    run_cli(lambda: main(sys.argv[1:]))
