"""The ladder's table and picture from its results (benchmarks/ladder.py writes them; this only reads).

Design choices:
- The spread is half the range, so "4.21 ± 0.02" covers every seed; tokens/s counts the whole run, as nanoGPT's peer.
- A variant (`recipe+lever`) is compared seed by seed with its recipe, beside the recipe's half-range (a seed's noise).
- `--docs` replaces only the block between the docs' markers (a lever campaign its own block, so a partial one never
  replaces the ladder), in English and Korean alike: the table is numbers and names.
- matplotlib is needed only for the picture: without it the tables are still written.
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC_PAGES = (ROOT / "docs" / "en" / "ladder.md", ROOT / "docs" / "ko" / "ladder.md")
PICTURE = ROOT / "docs" / "images" / "ladder.png"
SPEED_DRIFT = 1.1  # a reference speed range wider than this is called out under the table
MARKERS = re.compile(r"(<!-- ladder:begin -->\n).*?(<!-- ladder:end -->)", re.S)
LEVER_MARKERS = re.compile(r"(<!-- levers:begin -->\n).*?(<!-- levers:end -->)", re.S)


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
    for (corpus, rung), runs in sorted(groups.items(), key=lambda kv: rank(kv[0])):
        bpcs = [r["heldout_bpc"] for r in runs]
        tps = [v for v in map(throughput, runs) if v]
        table.setdefault(corpus, []).append(
            {
                "rung": rung,
                "seeds": len(runs),
                "bpc": statistics.fmean(bpcs),
                "spread": (max(bpcs) - min(bpcs)) / 2,
                "tokens_per_sec": statistics.median(tps) if tps else None,
                "steps": statistics.fmean(r["steps"] for r in runs),
                "tokens": statistics.fmean(r.get("tokens") or 0 for r in runs),
                "max_load": max(r.get("load_before", 0.0) for r in runs),
                "max_busy": max(
                    (r["cpu_busy_before"] for r in runs if r.get("cpu_busy_before") is not None), default=None
                ),
                "reference": [r["reference_gflops"] for r in runs if r.get("reference_gflops")],
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
