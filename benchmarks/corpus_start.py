"""How long a run waits for its corpus: one file against the same text as a folder of many files.

    python -m benchmarks.corpus_start --corpus ../shared/corpora/koconovel_dev.txt --files 500

Design choices:
- Both load as `train.py` loads them, cold (tokenised) and warm (cached); the ratio is of warm loads: users' usual wait.
- Equal-sized files cut at lines, like a folder of notes; the one file joins them as a folder's are: the same text.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a file: only benchmarks/ is on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import options as opt  # noqa: E402


def split_into_files(corpus: Path, count: int, out: Path) -> tuple[Path, Path]:
    """(folder of `count` files, one file with the same documents joined as a folder's are)."""
    from data.text import iter_text_chunks

    lines = "".join(iter_text_chunks(corpus)).splitlines(keepends=True)
    cuts = [round(i * len(lines) / count) for i in range(count + 1)]
    parts = ["".join(lines[a:b]).strip("\n") for a, b in itertools.pairwise(cuts)]
    parts = [p for p in parts if p.strip()]
    folder, joined = out / "folder", out / "joined.txt"
    shutil.rmtree(out, ignore_errors=True)
    folder.mkdir(parents=True)
    for i, part in enumerate(parts):
        (folder / f"{i:05d}.txt").write_text(part + "\n", encoding="utf-8")
    joined.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return folder, joined


def timed_load(path: Path, cache: Path, repeat: int) -> tuple[float, float, object]:
    """(cold seconds: the first load, fastest warm seconds of the `repeat` after it, the corpus)."""
    from data.corpus import load_corpus

    loads = []
    for _ in range(1 + repeat):
        start = time.perf_counter()
        corpus = load_corpus(path, cache_dir=cache)
        loads.append(time.perf_counter() - start)
    return loads[0], min(loads[1:]), corpus


def measure(corpus: Path, count: int, out: Path, repeat: int) -> dict:
    import numpy as np

    folder, joined = split_into_files(corpus, count, out)
    file_cold, file_warm, one = timed_load(joined, out / "cache-file", repeat)
    folder_cold, folder_warm, many = timed_load(folder, out / "cache-folder", repeat)
    same = one.tokenizer.fingerprint() == many.tokenizer.fingerprint() and np.array_equal(
        np.asarray(one.tokens), np.asarray(many.tokens)
    )
    return {
        "files": len(list(folder.iterdir())),
        "chars": one.num_chars,
        "file_cold_s": round(file_cold, 4),
        "file_warm_s": round(file_warm, 4),
        "folder_cold_s": round(folder_cold, 4),
        "folder_warm_s": round(folder_warm, 4),
        "warm_ratio_folder_to_file": round(folder_warm / file_warm, 3),
        "same_ids": bool(same),
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = opt.script_parser("corpus_start.py", __doc__)
    ap.add_argument("--corpus", required=True, check=opt.text_file, help="a text file")
    ap.add_argument("--files", default=500, check=opt.count(2), help="how many files the folder holds (default 500)")
    ap.add_argument("--repeat", default=3, check=opt.count(), help="warm loads timed; the fastest counts (default 3)")
    ap.add_argument(
        "--out", default="runs/corpus_start", check=opt.out_folder, help="where the folder, file and caches go"
    )
    return ap.parse_args(argv)


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    opt.print_json(measure(Path(args.corpus).expanduser(), args.files, Path(args.out), args.repeat))


if __name__ == "__main__":
    opt.run_script(main)
