"""Speed benchmark: prints one JSON object (tokens/s, ratios, memory, FLOP/s).

    python bench.py                      # the default config on this machine's default device
    python bench.py --device cuda --preset shakespeare --dtype bfloat16
    python bench.py --quick              # 2 rounds, no 100 MB memory test
    python bench.py --smoke              # seconds: checks that every benchmark runs (numbers mean nothing)

Timings alternate the compared sides over several rounds and report medians. The code is in benchmarks/.
"""

from cli.entry import run_cli

import os
import sys


def main(argv: list[str]) -> None:
    from benchmarks.options import parse_options, print_json

    opts = parse_options(argv, description=__doc__)  # before torch is imported: a bad flag fails at once
    from benchmarks.run import run_benchmarks

    print_json(run_benchmarks(opts))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    run_cli(lambda: main(sys.argv[1:]))
