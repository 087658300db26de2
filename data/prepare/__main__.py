"""`python -m data.prepare`: its command line; Ctrl-C and every error are one line (cli.entry)."""

from __future__ import annotations

from cli.entry import run_cli

import argparse
import math
import sys

from common.errors import UserError
from data.download import MIN_SPEED, SLOW_SECONDS
from data.prepare.fetching import BASE_URL_ENV, REGISTRY, default_cache_dir, prepare


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m data.prepare",
        description="Download a public Korean corpus into a local cache and turn it into training text: one file, or "
        "with --files a folder of one file per document. Prints the data.path=... override.",
    )
    p.add_argument("name", nargs="?", help=f"the corpus to prepare: {', '.join(REGISTRY)}")
    p.add_argument("--cache-dir", help=f"where corpora are kept (default {default_cache_dir()})")
    p.add_argument(
        "--base-url",
        help=f"download from a mirror: an http(s):// or file:// URL, or a local folder (or set {BASE_URL_ENV})",
    )
    p.add_argument(
        "--force", action="store_true", help="download every file again, and trust anew each one that validates"
    )
    p.add_argument("--list", action="store_true", help="list the corpora this command knows")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--min-speed",
        type=float,
        metavar="KB_PER_S",
        default=MIN_SPEED / 1024,
        help=f"give up on a mirror that sends less than this for {SLOW_SECONDS} s (default %(default)g)",
    )
    p.add_argument(
        "--max-file-mb",
        type=float,
        metavar="MB",
        help="refuse a file larger than this (default: the corpus's own bound, from --list)",
    )
    p.add_argument(
        "--files",
        action="store_true",
        help="write one text file per document into a folder (data.path can name the folder)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    if args.list:
        for s in REGISTRY.values():
            print(
                f"{s.name}: {s.description}\n    license: {s.license}\n    cite: {s.citation}\n"
                f"    largest file accepted: {s.max_file_mb:g} MB (--max-file-mb)"
            )
        return
    if not args.name:
        raise UserError(f"name the corpus to prepare: python -m data.prepare {'|'.join(REGISTRY)} (or --list)")
    if args.name not in REGISTRY:
        raise UserError(f"unknown corpus {args.name!r}; known: {', '.join(REGISTRY)} (python -m data.prepare --list)")
    source = REGISTRY[args.name]
    for option, value in (("--min-speed", args.min_speed), ("--max-file-mb", args.max_file_mb)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UserError(f"{option} {value:g} is invalid: it must be a positive number")
    path = prepare(
        source,
        args.cache_dir,
        args.base_url,
        args.force,
        progress=not args.quiet,
        files=args.files,
        min_speed_kb=args.min_speed,
        max_file_mb=args.max_file_mb,
    )
    size = sum(f.stat().st_size for f in path.iterdir()) if path.is_dir() else path.stat().st_size
    what = f"{len(list(path.iterdir()))} files, " if path.is_dir() else ""
    print(
        f"{source.name}: {path} ({what}{size:,} bytes). License {source.license}; cite {source.citation}",
        file=sys.stderr,
    )
    print(f"data.path={path}")


if __name__ == "__main__":
    run_cli(main)
