"""The ladder, reproducibly: every rung on every corpus, several seeds, scored on held-out text beside nanoGPT.

    python -m benchmarks.ladder --corpus koconovel=../shared/corpora/koconovel_dev.txt \
        --corpus nsmc=../shared/corpora/nsmc_dev.txt --seconds 300 --seeds 2 --nanogpt ~/src/nanoGPT
    python -m benchmarks.ladder --corpus ... --steps 1500      # a fixed step count instead of --seconds

Design choices (docs/en/ladder.md, "Measured beside nanoGPT", tells the whole campaign):
- A rung is a recipe trained as `python train.py recipe=<rung> data.path=...` trains it, the budget its only limit,
  so the lecture rung is the run a user gets; scored as `evaluate.py ckpt=<run>` scores it.
- One run at a time, each with the whole budget; runs in OUT/results.jsonl are not rerun: a stopped campaign goes on.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: only benchmarks/ is on the path
    sys.path.insert(0, str(ROOT))

from benchmarks import ladder_checks, ladder_report, runs  # noqa: E402
from benchmarks import options as opt  # noqa: E402
from benchmarks.runs import corpus_fingerprint, split_heldout  # noqa: E402
from common.errors import UserError  # noqa: E402

RUNGS = ("lecture", "l1_torch_init", "l2_rope", "l3_rmsnorm", "l4_relu2", "l5_qk_norm", "l6_zero_init", "modern")


def is_recipe(name: str) -> bool:
    return (ROOT / "configs" / "recipe" / f"{name}.yaml").is_file()


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = opt.script_parser("ladder.py", __doc__)
    ap.add_argument("--corpus", action="append", required=True, metavar="NAME=PATH", check=opt.named_text_file)
    ap.add_argument("--seconds", default=None, check=opt.SECONDS, help="wall-clock budget of each run (default 300)")
    ap.add_argument("--steps", default=None, check=opt.count(), help="a step budget instead of --seconds (not with it)")
    ap.add_argument("--seeds", default=2, check=opt.count(), help="seeds per rung (default 2: 1337, 1338)")
    ap.add_argument(
        "--rungs",
        default=",".join(RUNGS),
        check=opt.chosen(is_recipe, "the recipes in configs/recipe/"),
        help="comma-separated recipes (default: the ladder)",
    )
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=RECIPE:OVERRIDES",
        help="an extra rung: a recipe with space-separated overrides, e.g. "
        "'modern+gate=modern:model.attention_gate=true' (repeatable)",
    )
    ap.add_argument("--nanogpt", default=None, check=opt.NANOGPT, help="a nanoGPT checkout: train it beside the rungs")
    opt.campaign_flags(ap, "runs/ladder")
    ap.add_argument(
        "--docs",
        action="store_true",
        help="rewrite the docs' ladder tables and docs/images/ladder.png (with --variant: the levers' table only)",
    )
    args = ap.parse_args(argv)
    names = [spec.partition("=")[0] for spec in args.corpus]
    for name in names:
        if names.count(name) > 1:  # the rows of two texts under one name would be averaged together
            raise UserError(f"--corpus: the name {name} is given {names.count(name)} times; give each corpus its own")
    ladder_checks.check_numbers(args)
    args.variants = {}
    for spec in args.variant:
        name, _, rest = spec.partition("=")
        recipe, _, overrides = rest.partition(":")
        if not re.fullmatch(r"[\w.+-]+", name) or not is_recipe(recipe):
            raise UserError(f"--variant {spec!r}: give NAME=RECIPE:OVERRIDES with a recipe of configs/recipe/")
        args.variants[name] = (recipe, overrides.split())
    return args


def budget(args: argparse.Namespace) -> str:
    """The budget every run of this campaign gets, as the results record it: "300 s" or "1500 steps"."""
    return f"{args.steps} steps" if args.steps else f"{args.seconds:g} s"


def run_peer(seed: int, train: Path, heldout: Path, out: Path, args: argparse.Namespace) -> dict:
    flags = {"--nanogpt": args.nanogpt, "--corpus": train, "--heldout": heldout, "--seed": seed, "--out": out}
    flags.update({"--steps": args.steps} if args.steps else {"--seconds": args.seconds})
    r = runs.printed_json("benchmarks/nanogpt_peer.py", *(str(x) for flag in flags.items() for x in flag))
    if "error" in r:
        return r
    r["seconds"] = r["seconds_run"]  # the peer's whole loop, as a rung's `seconds`
    return {k: r[k] for k in ("steps", "seconds", "tokens_per_sec", "tokens", "heldout_bpc", "heldout_chars")}


def run_name(rung: str, seed: int, overrides: str) -> str:
    """A run's folder: with `--set`, a digest of the overrides, so a probe never overwrites the plain rung's."""
    if not overrides.strip():
        return f"{rung}-seed{seed}"
    return f"{rung}-seed{seed}-set{hashlib.sha1(overrides.encode('utf-8')).hexdigest()[:8]}"


def one_run(corpus: str, rung: str, seed: int, split: tuple[Path, Path, str], args: argparse.Namespace) -> dict:
    train, heldout, fingerprint = split
    run_dir = Path(args.out) / corpus / run_name(rung, seed, args.set)
    record = {
        "corpus": corpus,
        "rung": rung,
        "seed": seed,
        "budget": budget(args),
        "set": args.set,
        "heldout": args.heldout,
        "corpus_sha256": fingerprint,
    }
    if rung == "nanogpt":
        return {**record, **runs.machine_before_run(), **run_peer(seed, train, heldout, run_dir, args)}
    recipe, extra = args.variants.get(rung, (rung, []))
    return runs.campaign_run(
        record,
        ladder_checks.run_overrides(recipe, extra, args, str(train), seed),
        run_dir,
        lambda done: scores(run_dir, heldout, done),
    )


def scores(run_dir: Path, heldout: Path, done: dict) -> dict:
    """The held-out score `evaluate.py ckpt=RUN` gives (best.pt's with the last weights' beside), size, tokens."""
    scored = runs.heldout_scores(
        run_dir, heldout, weights="weights", average_updates="average_updates", scored="chosen", scored_step="step"
    )
    last = runs.evaluate(run_dir / "ckpt.pt", heldout) if scored["scored"] == "best" else {}
    facts = runs.run_facts(run_dir)
    if facts.get("tokens_per_step"):
        facts["tokens"] = done["steps"] * facts.pop("tokens_per_step")
    return {**scored, "heldout_bpc_last": last.get("bpc"), **facts}


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    out = Path(args.out)
    results_file = out / "results.jsonl"
    done = runs.results(results_file)
    rungs = (["nanogpt"] if args.nanogpt else []) + args.rungs + list(args.variants)
    splits = prepare(args, rungs, done, out)  # every check before the first run; nothing written if one fails
    ladder_checks.say_whole_budget(budget(args))
    failed = []
    for name, split in splits.items():
        for seed in range(1337, 1337 + args.seeds):
            for rung in rungs:
                key = {"corpus": name, "rung": rung, "seed": seed, "budget": budget(args), "set": args.set}
                if not runs.kept(key, done):
                    done.append(runs.keep(one_run(name, rung, seed, split, args), results_file))
                    failed += [done[-1]] if "error" in done[-1] else []
    ladder_report.report(done, budget(args), args.set, (*RUNGS, *args.variants), out, args.docs)
    if failed:
        raise ladder_checks.CampaignFailed(failed)


def prepare(args: argparse.Namespace, rungs: list[str], done: list[dict], out: Path) -> dict[str, tuple]:
    """Check everything, then split each corpus: {name: (training file, held-out file, fingerprint)}."""
    from data.text import detect_encoding

    corpora = dict(spec.partition("=")[::2] for spec in args.corpus)
    ladder_checks.check_runs(args, rungs, next(iter(corpora.values())))
    prints = {}
    for name, path in corpora.items():
        detect_encoding(Path(path).expanduser())  # train.py's check of the text, before any file is written
        prints[name] = corpus_fingerprint(path)
        ladder_checks.check_results(done, name, args.heldout, prints[name], out)
    out.mkdir(parents=True, exist_ok=True)
    return {name: (*split_heldout(path, out / "splits", args.heldout), prints[name]) for name, path in corpora.items()}


if __name__ == "__main__":
    opt.run_script(main)
