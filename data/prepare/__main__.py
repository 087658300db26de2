"""`python -m data.prepare`: Ctrl-C and every error are one line (common.cli)."""

from common.cli import run_cli

from data.prepare.cli import main

if __name__ == "__main__":
    run_cli(main)
