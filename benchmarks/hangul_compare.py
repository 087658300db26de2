"""char, jamo and the Hangul-aware model side by side: the same recipe, the same seconds, held-out text.

    python -m benchmarks.hangul_compare --corpus koconovel=../shared/corpora/koconovel_dev.txt \
        --corpus nsmc=../shared/corpora/nsmc_dev.txt --seconds 300

Design choices:
- Each variant is the lecture recipe plus its keys, trained as a ladder rung and scored on the weights a reader gets.
- A character's loss is its tokens' sum over non-overlapping windows, so every variant is scored per character of
  the same text; seen, rare (1-3x) and unseen ones apart (`char` can only call an unseen one `<unk>`: no score).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):  # run as a file: only benchmarks/ is on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import options as opt  # noqa: E402
from benchmarks.ladder_checks import run_overrides, say_whole_budget  # noqa: E402
from benchmarks.runs import campaign_run, keep, kept, results, run_facts, sample, split_heldout  # noqa: E402

VARIANTS = {
    "char": "data.tokenizer=char",
    "jamo": "data.tokenizer=jamo",
    "hangul": "data.tokenizer=hangul",
    "hangul+jamo-in": "data.tokenizer=hangul model.embedding=jamo",
    "hangul+jamo-out": "data.tokenizer=hangul model.head=jamo",
    "hangul+jamo-in+out": "data.tokenizer=hangul model.embedding=jamo model.head=jamo",
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = opt.script_parser("hangul_compare.py", __doc__)
    ap.add_argument("--corpus", action="append", required=True, metavar="NAME=PATH", check=opt.named_text_file)
    ap.add_argument("--seconds", default=300.0, check=opt.SECONDS, help="wall-clock budget of each run (default 300)")
    ap.add_argument(
        "--variants", default=",".join(VARIANTS), check=opt.chosen(VARIANTS), help="comma-separated (default: all)"
    )
    ap.add_argument(
        "--seeds",
        default="1337",
        check=opt.counts(0),
        help="comma-separated; each variant runs once per "
        "seed and the table gives the mean and the spread (default 1337)",
    )
    opt.campaign_flags(ap, "runs/hangul")
    ap.set_defaults(steps=None)  # a time budget only (benchmarks/ladder_checks.py's run_overrides)
    return ap.parse_args(argv)


def char_nats(run_dir: Path, text: str, batch: int = 16) -> list[float]:
    """Each character's loss in nats (its tokens' sum; NaN for the first, which has no context)."""
    import numpy as np
    import torch

    from inference.loading import load_run

    run = load_run(run_dir, torch.device("cpu"))
    ids = torch.from_numpy(run.tokenizer.encode(text, normalized=True).astype(np.int64))
    L, N = run.model.context_length, len(ids)
    losses = np.full(N, np.nan)
    full = [s for s in range(0, N - 1, L) if s + L < N]  # windows of L + 1 tokens: L targets each
    with torch.inference_mode():
        for k in range(0, len(full), batch):
            starts = full[k : k + batch]
            w = torch.stack([ids[s : s + L + 1] for s in starts])
            out = run.model.token_losses(w[:, :-1], w[:, 1:]).double().numpy()
            for r, s in enumerate(starts):
                losses[s + 1 : s + L + 1] = out[r]
        rest = (full[-1] + L) if full else 0
        if rest < N - 1:  # the last, shorter window
            w = ids[rest:][None]
            losses[rest + 1 :] = run.model.token_losses(w[:, :-1], w[:, 1:]).double().numpy()[0]
    return np.add.reduceat(losses, np.concatenate([[0], np.cumsum(run.tokenizer.token_counts(text))[:-1]])).tolist()


def breakdown(nats: list[float], text: str, seen: Counter) -> dict:
    """Bits per character over all characters and over the seen, rare and unseen ones."""
    groups: dict[str, list[float]] = {"all": [], "seen": [], "rare": [], "unseen": [], "unseen_syllables": []}
    for c, n in zip(text, nats, strict=True):
        if math.isnan(n):
            continue
        k = seen.get(c, 0)
        groups["all"].append(n)
        groups["seen" if k else "unseen"].append(n)
        if 1 <= k <= 3:
            groups["rare"].append(n)
        if not k and "\uac00" <= c <= "\ud7a3":
            groups["unseen_syllables"].append(n)
    return {f"bpc_{g}": (sum(v) / len(v) / math.log(2) if v else None) for g, v in groups.items()} | {
        f"chars_{g}": len(v) for g, v in groups.items()
    }


def one_run(
    corpus: str, variant: str, seed: int, paths: tuple[Path, Path], seen: Counter, args: argparse.Namespace
) -> dict:
    from data.text import iter_text_chunks

    train, heldout = paths
    run_dir = Path(args.out) / corpus / f"{variant}-seed{seed}"
    record = {"corpus": corpus, "variant": variant, "seed": seed, "seconds_budget": args.seconds, "set": args.set}

    def scores(_: dict) -> dict:
        text = "".join(iter_text_chunks(heldout))
        facts = run_facts(run_dir)
        facts.pop("tokens_per_step", None)
        return {**facts, **breakdown(char_nats(run_dir, text), text, seen), "sample": sample(run_dir, "그날 밤", 80)}

    return campaign_run(
        record, run_overrides("lecture", VARIANTS[variant].split(), args, str(train), seed), run_dir, scores
    )


def _mean_spread(values: list[float | None]) -> str:
    """ "4.812" for one run, "4.812 ± 0.010" (half the range) for several; "—" where nothing was scored."""
    v = [x for x in values if x is not None]
    if not v:
        return "—"
    mean = sum(v) / len(v)
    return f"{mean:.3f}" if len(v) == 1 else f"{mean:.3f} ± {(max(v) - min(v)) / 2:.3f}"


def table(rows: list[dict]) -> str:
    """One row per corpus and variant: the mean (± half the range over seeds) of each number."""
    lines = [
        "| corpus | variant | seeds | bpc (all) | bpc (seen) | bpc (rare, 1-3x) | bpc (unseen) | tokens/s "
        "| steps | params |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["corpus"], r["variant"]), []).append(r)
    for (corpus, variant), runs in groups.items():
        ok = [r for r in runs if "error" not in r]
        if not ok:
            lines.append(f"| {corpus} | {variant} | {len(runs)} | error: {runs[0]['error']} | | | | | | |")
            continue
        col = {k: _mean_spread([r.get(k) for r in ok]) for k in ("bpc_all", "bpc_seen", "bpc_rare", "bpc_unseen")}
        unseen = "(<unk>)" if variant == "char" else col["bpc_unseen"]
        speed = round(sum(r.get("tokens_per_sec") or 0 for r in ok) / len(ok))
        steps = round(sum(r["steps"] for r in ok) / len(ok))
        lines.append(
            f"| {corpus} | {variant} | {len(ok)} | {col['bpc_all']} | {col['bpc_seen']} | {col['bpc_rare']} | "
            f"{unseen} | {speed:,} | {steps:,} | {ok[0].get('params', 0):,} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    from data.text import iter_text_chunks

    args = parse_args(argv)
    say_whole_budget(f"{args.seconds:g} s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log_file = out / "results.jsonl"
    done, table_rows = [{"seed": 1337, **r} for r in results(log_file)], []  # rows from before --seeds: seed 1337
    for spec in args.corpus:
        name, _, path = spec.partition("=")
        paths = split_heldout(Path(path).expanduser(), out / "splits", args.heldout)
        seen = Counter("".join(iter_text_chunks(paths[0])))
        for seed, variant in ((s, v) for s in args.seeds for v in args.variants):
            key = {"corpus": name, "variant": variant, "seed": seed, "seconds_budget": args.seconds, "set": args.set}
            table_rows.append(kept(key, done) or keep(one_run(name, variant, seed, paths, seen, args), log_file))
    report = table(table_rows)
    (out / "hangul.md").write_text(report, encoding="utf-8")
    print(report)


if __name__ == "__main__":
    opt.run_script(main)
