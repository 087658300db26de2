"""The ladder, reproducibly: every rung on every corpus, several seeds, scored on held-out text beside nanoGPT.

    python -m benchmarks.ladder --corpus koconovel=../shared/corpora/koconovel_dev.txt \
        --corpus nsmc=../shared/corpora/nsmc_dev.txt --seconds 300 --seeds 2 --nanogpt ~/src/nanoGPT
    python -m benchmarks.ladder --corpus ... --steps 1500      # a fixed step count instead of --seconds

Design choices (docs/en/ladder.md, "Measured beside nanoGPT", tells the whole campaign):
- A rung is a recipe trained as `python train.py recipe=<rung> data.path=...` trains it, the budget its only limit,
  so the lecture rung is the run a user gets; scored as `evaluate.py ckpt=<run>` scores it.
- One run at a time, each with the whole budget; runs in OUT/results.jsonl are not rerun: a stopped campaign goes on.
- The table's spread is half the range, so "4.21 ± 0.02" covers every seed; tokens/s counts the whole run, as
  nanoGPT's peer. A variant (`recipe+lever`) is compared seed by seed with its recipe, beside the recipe's half-range
  (a seed's noise).
- `--docs` replaces only the block between the docs' markers (a lever campaign its own block, so a partial one never
  replaces the ladder), in English and Korean alike: the table is numbers and names. matplotlib is needed only for
  the picture: without it the tables are still written.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: only benchmarks/ is on the path
    sys.path.insert(0, str(ROOT))

from benchmarks import ladder_checks, runs  # noqa: E402
from benchmarks import options as opt  # noqa: E402
from benchmarks.runs import corpus_fingerprint, split_heldout  # noqa: E402
from common.errors import UserError  # noqa: E402

RUNGS = ("lecture", "l1_torch_init", "l2_rope", "l3_rmsnorm", "l4_relu2", "l5_qk_norm", "l6_zero_init", "modern")
DOC_PAGES = (ROOT / "docs" / "en" / "ladder.md", ROOT / "docs" / "ko" / "ladder.md")
PICTURE = ROOT / "docs" / "images" / "ladder.png"
SPEED_DRIFT = 1.1  # a reference speed range wider than this is called out under the table
MARKERS = re.compile(r"(<!-- ladder:begin -->\n).*?(<!-- ladder:end -->)", re.S)
LEVER_MARKERS = re.compile(r"(<!-- levers:begin -->\n).*?(<!-- levers:end -->)", re.S)


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
    report(done, budget(args), args.set, (*RUNGS, *args.variants), out, args.docs)
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


def throughput(run: dict) -> float | None:
    """Tokens seen per second of the whole loop, as nanoGPT's peer counts; else the median logged tokens/s."""
    if run.get("tokens") and run.get("seconds"):
        return run["tokens"] / run["seconds"]
    return run.get("tokens_per_sec")


def scored(results: list[dict]) -> list[dict]:
    return [r for r in results if "error" not in r and r.get("heldout_bpc") is not None]


def summarise(results: list[dict], rungs: tuple[str, ...] = ()) -> dict[str, list[dict]]:
    """{corpus: [row per rung: nanoGPT, then `rungs`' order, then any other]} over the results without errors."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in scored(results):
        groups.setdefault((r["corpus"], r["rung"]), []).append(r)
    corpora = list(dict.fromkeys(corpus for corpus, _ in groups))
    order = ["nanogpt", *rungs]

    def rank(key: tuple[str, str]) -> tuple[int, int]:  # corpora as first seen, rungs in the ladder's order
        corpus, rung = key
        return corpora.index(corpus), order.index(rung) if rung in order else len(order)

    table: dict[str, list[dict]] = {}
    for (corpus, rung), seeds in sorted(groups.items(), key=lambda kv: rank(kv[0])):
        bpcs = [r["heldout_bpc"] for r in seeds]
        tps = [v for v in map(throughput, seeds) if v]
        table.setdefault(corpus, []).append(
            {
                "rung": rung,
                "seeds": len(seeds),
                "bpc": statistics.fmean(bpcs),
                "spread": (max(bpcs) - min(bpcs)) / 2,
                "tokens_per_sec": statistics.median(tps) if tps else None,
                "steps": statistics.fmean(r["steps"] for r in seeds),
                "tokens": statistics.fmean(r.get("tokens") or 0 for r in seeds),
                "max_load": max(r.get("load_before", 0.0) for r in seeds),
                "max_busy": max(
                    (r["cpu_busy_before"] for r in seeds if r.get("cpu_busy_before") is not None), default=None
                ),
                "reference": [r["reference_gflops"] for r in seeds if r.get("reference_gflops")],
            }
        )
    for rows in table.values():
        peer = next((row["bpc"] for row in rows if row["rung"] == "nanogpt"), None)
        for row in rows:
            row["gap"] = None if peer is None else row["bpc"] - peer
    return table


def markdown(table: dict[str, list[dict]], limit: str) -> str:
    lines = []
    for corpus, rows in table.items():
        lines += [
            f"**{corpus}** ({limit} per run; held-out bits per character, mean ± half-range over seeds)",
            "",
            "| run | held-out bpc | vs nanoGPT | tokens seen | tokens/s | steps | seeds |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for row in rows:
            gap = "" if row["gap"] is None else f"{row['gap']:+.3f}"
            tps = "" if row["tokens_per_sec"] is None else f"{row['tokens_per_sec']:,.0f}"
            seen = f"{row['tokens'] / 1e6:.2f}M" if row["tokens"] else ""
            lines.append(
                f"| {row['rung']} | {row['bpc']:.3f} ± {row['spread']:.3f} | {gap} | {seen} | {tps} | "
                f"{row['steps']:,.0f} | {row['seeds']} |"
            )
        lines += ["", machine_line(rows), ""]
    return "\n".join(lines)


def paired(results: list[dict]) -> dict[str, list[dict]]:
    """{corpus: [row per `recipe+lever`]}: the mean difference from its recipe on the same seeds, and its scale."""
    scores = {(r["corpus"], r["rung"], r["seed"]): r for r in scored(results)}
    table: dict[str, list[dict]] = {}
    for corpus, rung in dict.fromkeys((c, g) for c, g, _ in scores if "+" in g):
        base = rung.split("+", 1)[0]
        seeds = sorted(s for c, g, s in scores if (c, g) == (corpus, rung) and (corpus, base, s) in scores)
        if not seeds:
            continue
        diffs = [scores[corpus, rung, s]["heldout_bpc"] - scores[corpus, base, s]["heldout_bpc"] for s in seeds]
        base_bpcs = [scores[corpus, base, s]["heldout_bpc"] for s in seeds]
        steps = [scores[corpus, rung, s]["steps"] / scores[corpus, base, s]["steps"] for s in seeds]
        table.setdefault(corpus, []).append(
            {
                "rung": rung,
                "base": base,
                "seeds": seeds,
                "diff": statistics.fmean(diffs),
                "diffs": diffs,
                "base_spread": (max(base_bpcs) - min(base_bpcs)) / 2,
                "step_ratio": statistics.fmean(steps),
            }
        )
    return table


def levers_markdown(table: dict[str, list[dict]], limit: str) -> str:
    lines = []
    for corpus, rows in table.items():
        lines += [
            f"**{corpus}** ({limit} per run; held-out bits per character against the recipe on the same "
            "seeds, negative is better)",
            "",
            "| run | vs its recipe (mean) | each seed | recipe's half-range | steps vs recipe | seeds |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for row in rows:
            each = ", ".join(f"{d:+.3f}" for d in row["diffs"])
            lines.append(
                f"| {row['rung']} | {row['diff']:+.3f} | {each} | {row['base_spread']:.3f} | "
                f"{row['step_ratio']:.2f}x | {len(row['seeds'])} |"
            )
        lines.append("")
    return "\n".join(lines)


def machine_line(rows: list[dict]) -> str:
    """How idle the machine was before the runs: the CPU share others used, where measured, and the load."""
    load = max(row["max_load"] for row in rows)
    busy = [row["max_busy"] for row in rows if row.get("max_busy") is not None]
    said = (
        f"Other programs used at most {max(busy):.1%} of the CPUs just before a run (where measured); the "
        if busy
        else "The "
    )
    text = (
        f"{said}1-minute load average before a run was at most {load:.2f} (it still counts the run "
        "that had just ended: runs go one after another)."
    )
    speeds = [v for row in rows for v in row.get("reference", [])]
    if speeds:
        low, high = min(speeds), max(speeds)
        text += (
            f" A fixed float32 matrix product ran at {low:,.0f} to {high:,.0f} GFLOP/s before the runs "
            f"that measured it ({len(speeds)} of them)"
        )
        text += (
            f": the machine's speed changed by {high / low - 1:.0%} between runs, so compare tokens/s "
            "and time-limited results with care."
            if high > SPEED_DRIFT * low
            else "."
        )
    return text


def draw(table: dict[str, list[dict]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: docs/images/ladder.png not redrawn: pip install matplotlib", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, len(table), figsize=(6 * len(table), 4), squeeze=False)
    for ax, (corpus, rows) in zip(axes[0], table.items(), strict=True):
        names = [row["rung"] for row in rows]
        ax.barh(names, [row["bpc"] for row in rows], xerr=[row["spread"] for row in rows], color="#4c72b0")
        low = min(row["bpc"] - row["spread"] for row in rows)
        ax.set_xlim(low - 0.1, max(row["bpc"] + row["spread"] for row in rows) + 0.05)
        ax.invert_yaxis()
        ax.set_title(f"{corpus}: held-out bits per character (lower is better)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def report(
    results: list[dict], budget: str, overrides: str, rungs: tuple[str, ...], out: Path, docs: bool = False
) -> None:
    """The table of the runs with `budget` and `overrides` into out/ladder.md (and with `docs` into the docs)."""
    chosen = [r for r in results if r.get("set", "") == overrides and r.get("budget") == budget]
    table = summarise(chosen, rungs)
    text = markdown(table, budget)
    levers = paired(chosen)
    if levers:
        text += "\n" + levers_markdown(levers, budget)
    print(text)
    (out / "ladder.md").write_text(text, encoding="utf-8")
    if docs:
        name, block = ("levers", LEVER_MARKERS) if levers else ("ladder", MARKERS)
        for page in DOC_PAGES:
            old = page.read_text(encoding="utf-8")
            if not block.search(old):
                print(f"note: {page} has no <!-- {name}:begin --> marker; not changed", file=sys.stderr)
                continue
            page.write_text(block.sub(lambda m: m[1] + text + "\n" + m[2], old), encoding="utf-8")
        if not levers:
            draw(table, PICTURE)


if __name__ == "__main__":
    opt.run_script(main)
