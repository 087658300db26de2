"""What every entry script runs through (one-line errors, Ctrl-C, `--help`, overrides ready for Hydra) and what only
`train.py` needs around Hydra (run folders, their lock and record). It imports nothing of ours but `common`."""
