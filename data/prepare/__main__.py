"""`python -m data.prepare`: Ctrl-C and every error are one line (cli.entry)."""

from cli.entry import run_cli

from data.prepare.command import main

if __name__ == "__main__":
    run_cli(main)
